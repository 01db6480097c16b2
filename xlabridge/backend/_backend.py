"""The ``xlabridge`` torch.compile backend.

``torch.compile(model, backend="xlabridge")`` works once xlabridge is installed: torch finds
the backend through the ``torch_dynamo_backends`` entry point group, without an import.
Graphs with a tensor on an XLA device compile through torch_xla's Dynamo bridge, with the
results, transfers and XLA graphs of ``backend="openxla"``: forward-only (traced to aten ops,
then ``openxla_eval``'s path, no AOTAutograd) when ``_compile_path.choose`` finds no gradient
can be needed and nothing would differ, through AOTAutograd (``openxla`` itself) otherwise.
Graphs whose tensors are all on the CPU take the same way where torch_xla is installed, as
``openxla`` would take them (the diagnostics report them: usually a model not moved to the
device); graphs on CUDA, or anywhere without torch_xla, go to inductor, so the same script also
runs on a GPU or CPU machine. On a TorchTPU machine (torch 2.11 and later, ``torch_tpu``), graphs
with a tensor on its ``tpu`` device go to ``backend="tpu"`` (``_placement`` says when CPU graphs
do too), as the same Dynamo graph would reach it, so its results are TorchTPU's; and where TorchTPU's own
``torch.compile`` is in place (a TPU started), such frames get its default, ``dynamic=False`` unless
the caller passed ``dynamic`` (``_tpu_default``). Each graph, and the path chosen with its reason, goes to the
diagnostics (``xlabridge.diagnostics._observe.hooks.record_graph`` / ``record_compile_path``, which do nothing
unless a report is being collected); the persistent cache (``xlabridge.backend.cache``) is configured
before the first XLA graph compiles.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from xlabridge.backend import _path as _compile_path, _forward_only, _tpu_default, cache
from xlabridge import _optional
from xlabridge._upstream import torch as upstream_torch
from xlabridge.diagnostics._observe import hooks as diagnostics
from xlabridge.backend._path import PathKind
from xlabridge.backend._options import BackendOptions
from xlabridge.backend._placement import Placement, Target, describe_inputs, resolve_target
from xlabridge.errors import DeviceMismatchError

BACKEND_NAME = "xlabridge"

logger = logging.getLogger(__name__)


def _configure_cache(cache_dir: Any) -> None:
    """Configure the persistent cache (first time only); ``cache`` warns when it is not in effect
    and the report's environment records its state."""
    if cache_dir is not None:
        cache.configure(cache_dir)
    else:
        cache.configure_from_environment()


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


def _compile_for_xla(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], where: Placement) -> Callable:
    torchxla = upstream_torch.torchxla_backends()
    path = _compile_path.choose(gm, example_inputs)
    logger.debug("XLA graph (%s): %s, %s", where.value, path.name.value, path.reason)
    diagnostics.record_compile_path(
        target=Target.XLA.value, path=path.name.value, reason=path.reason, cpu_only=where is Placement.CPU_ONLY
    )
    if path.name is PathKind.FORWARD_ONLY:
        return torchxla.openxla_eval(_forward_only.aten_graph(gm, example_inputs), example_inputs)
    return torchxla.openxla(gm, example_inputs)


def _compile_for_torchtpu(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], where: Placement) -> Callable:
    reason = "a tensor on TorchTPU's tpu device" if where is Placement.TPU else (
        "all tensors on the CPU, TorchTPU installed" + (", no TPU: run on CPU in its place while diagnosed"
                                                         if diagnostics.torchtpu_stand_in() else ""))
    diagnostics.record_compile_path(target=Target.TORCHTPU.value, path=PathKind.TORCHTPU.value, reason=reason,
                                    cpu_only=where is Placement.CPU_ONLY)
    _tpu_default.apply_to_current_frame()  # dynamic=False unless the caller passed dynamic, as "tpu" gets
    return upstream_torch.lookup_backend("tpu")(gm, example_inputs)


def _torchtpu_for_cpu() -> bool:
    """TorchTPU takes all-CPU graphs where a TPU is present or where the diagnostics stand in for one."""
    return diagnostics.torchtpu_stand_in() or diagnostics.tpu_present()


def _compile_with_inductor(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
    return upstream_torch.inductor_compile(gm, example_inputs)


def xlabridge_backend(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    options: dict[str, Any] | None = None,
    mode: str | None = None,
) -> Callable:
    """Compile one Dynamo graph: through torch_xla's bridge for XLA, inductor elsewhere.

    ``options`` are xlabridge's own (see ``BackendOptions``); ``mode`` is accepted for
    ``torch.compile``'s sake and not used: the XLA path has no modes, and inductor's are
    not forwarded so that one script behaves the same on every machine.
    """
    del mode
    settings = BackendOptions.from_mapping(options)
    diagnostics.record_graph(gm, backend=BACKEND_NAME)
    if settings.device == "xla":
        _optional.require("torch_xla", "xlabridge backend option device='xla'")
    target, where = resolve_target(gm, example_inputs, torchtpu_for_cpu=_torchtpu_for_cpu)
    if settings.device == "xla" and where is not Placement.XLA:
        raise DeviceMismatchError(
            f"xlabridge: device='xla' was requested, but {describe_inputs(gm, example_inputs)}. "
            f"Move the model and its inputs to the XLA device with .to(torch_xla.device())."
        )
    if target is Target.XLA:
        _configure_cache(settings.cache_dir)
        if settings.autocast_parity:
            _enable_autocast_parity(gm)
        return _compile_for_xla(gm, example_inputs, where)
    if target is Target.TORCHTPU:
        return _compile_for_torchtpu(gm, example_inputs, where)
    logger.debug("native graph (%s): inductor", where.value)
    diagnostics.record_compile_path(
        target=Target.NATIVE.value, path=PathKind.INDUCTOR.value,
        reason="no tensor on an XLA or TPU device" if where is Placement.OTHER
        else "all tensors on the CPU, no torch_xla, no TPU",
    )
    return _compile_with_inductor(gm, example_inputs)
