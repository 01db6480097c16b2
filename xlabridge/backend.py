"""The ``xlabridge`` torch.compile backend.

``torch.compile(model, backend="xlabridge")`` works once xlabridge is installed: torch finds
the backend through the ``torch_dynamo_backends`` entry point group, without an import.
Graphs whose tensors live on an XLA device compile through torch_xla's ``openxla`` path,
so results are those of ``backend="openxla"``; any other graph goes to inductor, so the same
script also runs on a GPU or CPU machine that has no torch_xla.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from xlabridge import _optional
from xlabridge._options import BackendOptions
from xlabridge._placement import Target, describe_inputs, resolve_target
from xlabridge.errors import DeviceMismatchError


def _compile_with_openxla(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
    from torch._dynamo.backends.torchxla import openxla

    return openxla(gm, example_inputs)


def _compile_with_inductor(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(gm, example_inputs)


def xlabridge_backend(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    options: dict[str, Any] | None = None,
    mode: str | None = None,
) -> Callable:
    """Compile one Dynamo graph: through ``openxla`` on XLA devices, inductor elsewhere.

    ``options`` are xlabridge's own (see ``BackendOptions``); ``mode`` is accepted for
    ``torch.compile``'s sake and not used: the XLA path has no modes, and inductor's are
    not forwarded so that one script behaves the same on every machine.
    """
    del mode
    settings = BackendOptions.from_mapping(options)
    if settings.device == "xla":
        _optional.require("torch_xla", "xlabridge backend option device='xla'")
    target = resolve_target(gm, example_inputs)
    if target is Target.XLA:
        return _compile_with_openxla(gm, example_inputs)
    if settings.device == "xla":
        raise DeviceMismatchError(
            f"xlabridge: device='xla' was requested, but {describe_inputs(gm, example_inputs)}. "
            f"Move the model and its inputs to the XLA device with .to(torch_xla.device())."
        )
    return _compile_with_inductor(gm, example_inputs)
