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

from xlabridge._placement import Target, resolve_target


def _compile_with_openxla(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
    from torch._dynamo.backends.torchxla import openxla

    return openxla(gm, example_inputs)


def _compile_with_inductor(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(gm, example_inputs)


def xlabridge_backend(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any
) -> Callable:
    """Compile one Dynamo graph: through ``openxla`` on XLA devices, inductor elsewhere.

    ``kwargs`` holds what ``torch.compile`` forwards (``mode``, ``options``); the XLA path
    takes no mode, and inductor's own options are not forwarded to it.
    """
    if resolve_target(gm, example_inputs) is Target.XLA:
        return _compile_with_openxla(gm, example_inputs)
    return _compile_with_inductor(gm, example_inputs)
