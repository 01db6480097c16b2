"""The ``xlabridge`` torch.compile backend.

``torch.compile(model, backend="xlabridge")`` works once xlabridge is installed: torch finds
the backend through the ``torch_dynamo_backends`` entry point group, without an import.
Graphs whose tensors live on an XLA device compile through torch_xla's Dynamo bridge, with
the results of ``backend="openxla"``: forward-only (``openxla_eval``'s path, no AOTAutograd)
when ``_compile_path.choose`` finds no gradient can be needed and nothing would differ, through
AOTAutograd (``openxla`` itself) otherwise. Any other graph goes to inductor, so the same
script also runs on a GPU or CPU machine that has no torch_xla. The path and its reason go to
every active diagnostics report; the persistent cache (``xlabridge.cache``) is configured
before the first XLA graph compiles.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

from xlabridge import _compile_path, _optional, cache
from xlabridge._options import BackendOptions
from xlabridge._placement import Target, describe_inputs, resolve_target
from xlabridge.errors import DeviceMismatchError

INDUCTOR = "inductor"


def _active_collectors() -> list[Any]:
    hooks = sys.modules.get("xlabridge.diagnostics._hooks")
    return list(hooks._ACTIVE) if hooks is not None else []


def _record_path(path: str, reason: str) -> None:
    collectors = _active_collectors()
    if collectors:
        compile_id = sys.modules["xlabridge.diagnostics._hooks"]._current_compile_id()
        for collector in collectors:
            collector.safely(collector.record_compile_path, compile_id, path, reason)


def _configure_cache(cache_dir: Any) -> None:
    """Configure the persistent cache (first time only); a cache not in effect is a report warning."""
    status = cache.configure(cache_dir) if cache_dir is not None else cache.configure_from_environment()
    if status is None or status["state"] == "enabled":
        return
    message = f"xlabridge persistent cache at {status['directory']}: {status['state']}: {status['reason']}"
    for collector in _active_collectors():
        if message not in collector.report.warnings:
            collector.report.warnings.append(message)


def _compile_for_xla(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
    from torch._dynamo.backends import torchxla

    path = _compile_path.choose(gm, example_inputs)
    _record_path(path.name, path.reason)
    if path.name == _compile_path.FORWARD_ONLY:
        return torchxla.openxla_eval(gm, example_inputs)
    return torchxla.openxla(gm, example_inputs)


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
    """Compile one Dynamo graph: through torch_xla's bridge on XLA devices, inductor elsewhere.

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
        _configure_cache(settings.cache_dir)
        return _compile_for_xla(gm, example_inputs)
    if settings.device == "xla":
        raise DeviceMismatchError(
            f"xlabridge: device='xla' was requested, but {describe_inputs(gm, example_inputs)}. "
            f"Move the model and its inputs to the XLA device with .to(torch_xla.device())."
        )
    _record_path(INDUCTOR, "no tensor on an XLA device")
    return _compile_with_inductor(gm, example_inputs)
