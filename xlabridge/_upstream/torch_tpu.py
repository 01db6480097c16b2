"""torch_tpu's private surfaces that xlabridge reaches: TorchTPU's compiler (``_internal.compile``).

TorchTPU offers no hook between AOTAutograd and its lowering, so the ``torchtpu.compiler`` probe
and ``xlabridge.torchtpu.GraphCapture`` patch its compiler's classes and module functions; the
accessors here hand them those classes and modules, the functions call what they read. Each
says which names and which torch_tpu releases it was checked on (``_registry.surface``; torch_tpu
0.2.0 runs with torch 2.15.0). Nothing here imports torch_tpu before a wrapper is called.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from xlabridge._upstream._registry import surface

CHECKED = ("0.2.0",)
"""The torch_tpu releases of the CI environments (TorchTPU, with torch 2.15.0)."""


@surface("torch_tpu", "torch_tpu._internal.utils.hardware.get_tpu_device_count", checked=CHECKED)
def tpu_device_count() -> int:
    """The TPU chips torch_tpu finds on this machine (its PCI scan; no device is started)."""
    from torch_tpu._internal.utils import hardware

    return hardware.get_tpu_device_count()


@surface("torch_tpu", "torch_tpu._internal.distributed.collective_ops.is_collective_op", checked=CHECKED)
def is_collective_op(target: Any) -> bool:
    """Whether an FX node's target is a collective TorchTPU cuts its graphs at."""
    from torch_tpu._internal.distributed import collective_ops

    return collective_ops.is_collective_op(target)


@surface(
    "torch_tpu", "torch_tpu._internal.compile.dynamic.dynamic_executable.DynamicTpuCompiledExecutable",
    attributes=("_bucket_specs",), checked=CHECKED,
)
def bucket_specs(executable: Any) -> list[Any]:
    """The bucket programs of the executable a ``DynamicCompiler`` returns (each one's
    ``graph_module``, ``bounded_model_inputs`` and ``symbol_bounds``); empty for another object."""
    return getattr(executable, "_bucket_specs", None) or []


# ---------------------------------------------------------------- accessors: patched


@surface(
    "torch_tpu", "torch_tpu._internal.compile._backend", checked=CHECKED,
    uses=("make_backend_compiler", "TpuBackend", "TpuBackend.__call__", "TpuBackend._compile_graph_module"),
)
def compile_backend() -> ModuleType:
    """TorchTPU's ``backend="tpu"`` module: ``TpuBackend`` and ``make_backend_compiler`` (the
    ``SplitCompiler`` each forward or backward graph is handed to)."""
    from torch_tpu._internal.compile import _backend

    return _backend


@surface(
    "torch_tpu", "torch_tpu._internal.compile.compiler.StaticCompiler", checked=CHECKED,
    uses=("__call__", "_compile"),
)
def static_compiler() -> type:
    """The compiler of one partition: ``__call__`` (FX passes), then ``_compile`` (lowering, PJRT)."""
    from torch_tpu._internal.compile import compiler

    return compiler.StaticCompiler


@surface(
    "torch_tpu", "torch_tpu._internal.compile.dynamic.dynamic_compiler.DynamicCompiler", checked=CHECKED,
    uses=("__call__",),
)
def dynamic_compiler() -> type:
    """The compiler of a graph with dynamic shapes: one program per bucket of its symbols' values."""
    from torch_tpu._internal.compile.dynamic import dynamic_compiler as module

    return module.DynamicCompiler


@surface(
    "torch_tpu", "torch_tpu._internal.compile.split_compiler._SplitCompiledExecutable", checked=CHECKED,
    uses=("__call__",),
)
def split_executable() -> type:
    """What TorchTPU returns for one forward or backward graph: it runs the partitions in order."""
    from torch_tpu._internal.compile import split_compiler

    return split_compiler._SplitCompiledExecutable


@surface(
    "torch_tpu", "torch_tpu._internal.compile.fx_passes.mark_embedded_constants", checked=CHECKED,
    uses=("apply",),
)
def embedded_constants_pass() -> ModuleType:
    """The FX pass whose ``apply`` moves a graph's embedded constants to the ``tpu`` device."""
    from torch_tpu._internal.compile.fx_passes import mark_embedded_constants

    return mark_embedded_constants


@surface("torch_tpu", "torch_tpu._loader._default_tpu_compile", checked=CHECKED)
def tpu_compile_installed() -> bool:
    """Whether ``torch.compile`` is TorchTPU's own (``_loader._default_tpu_compile``, installed by
    ``_init_device_impl`` when a TPU starts): it defaults ``dynamic`` to ``False`` for its backends."""
    import torch
    from torch_tpu import _loader

    return torch.compile is _loader._default_tpu_compile
