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

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from xlabridge import _compile_path, _optional, cache
from xlabridge._options import BackendOptions
from xlabridge._placement import Target, describe_inputs, resolve_target
from xlabridge.diagnostics import _hooks
from xlabridge.errors import DeviceMismatchError

INDUCTOR = "inductor"


def _configure_cache(cache_dir: Any) -> None:
    """Configure the persistent cache (first time only); a cache not in effect is a report warning."""
    status = cache.configure(cache_dir) if cache_dir is not None else cache.configure_from_environment()
    if status is None or status["state"] == "enabled":
        return
    _hooks.add_report_warning(
        f"xlabridge persistent cache at {status['directory']}: {status['state']}: {status['reason']}"
    )


def _enable_autocast_parity(gm: torch.fx.GraphModule) -> None:
    """Apply the ``autocast_parity`` option; say so when it comes too late for this graph.

    Dynamo traces a graph, dtypes included, before it calls the backend: kernels registered
    now change how the graph computes, but not the dtypes Dynamo already recorded for it.
    ``xlabridge.compile(..., autocast_parity=True)`` registers them before any trace.
    """
    from xlabridge.autocast import enable_parity

    newly_registered = enable_parity().registered
    uses_autocast = any("autocast" in str(node.target) for node in gm.graph.nodes)
    if newly_registered and uses_autocast:
        warnings.warn(
            "xlabridge: options={'autocast_parity': True} took effect while compiling a graph that "
            "Dynamo traced under the old autocast lists; its traced dtypes may be stale. Use "
            "xlabridge.compile(model, autocast_parity=True) or call xlabridge.autocast.enable_parity() "
            "before the first call.",
            RuntimeWarning,
            stacklevel=2,
        )


def _compile_for_xla(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
    from torch._dynamo.backends import torchxla

    path = _compile_path.choose(gm, example_inputs)
    _hooks.record_compile_path(path.name, path.reason)
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
        if settings.autocast_parity:
            _enable_autocast_parity(gm)
        return _compile_for_xla(gm, example_inputs)
    if settings.device == "xla":
        raise DeviceMismatchError(
            f"xlabridge: device='xla' was requested, but {describe_inputs(gm, example_inputs)}. "
            f"Move the model and its inputs to the XLA device with .to(torch_xla.device())."
        )
    _hooks.record_compile_path(INDUCTOR, "no tensor on an XLA device")
    return _compile_with_inductor(gm, example_inputs)
