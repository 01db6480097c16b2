"""JAX's and jaxlib's private surfaces that xlabridge reaches: XLA's client below ``jax.jit``.

The TPU compile worker (``xlabridge.tpu``) drives libtpu's compile-only client through them, and
the SPMD partitioning worker (``xlabridge.pod``) XLA:CPU's partitioner: compile options, device
assignments, HLO proto to StableHLO conversion, and MLIR contexts, none of which JAX exposes
publicly. Each wrapper says which names and which JAX releases it was checked on
(``_registry.surface``; jaxlib is released with JAX at the same version: jax 0.7.1 beside
libtpu 0.0.23, jax 0.10.2 beside libtpu 0.0.52). The worker processes import this module, so it
imports nothing but the registry: JAX only when a wrapper is called, never torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from types import ModuleType
from typing import Any

from xlabridge._upstream._registry import surface

CHECKED = ("0.7.1", "0.10.2")
"""The JAX releases of the CI environments (pinned and TorchTPU)."""


@surface("jax", "jax._src.lib.xla_client._xla.mlir.hlo_to_stablehlo", checked=CHECKED)
def hlo_to_stablehlo(proto: bytes) -> bytes:
    """A serialized HLO module proto as StableHLO bytecode (shardings and input/output aliases kept)."""
    from jax._src.lib import xla_client

    return xla_client._xla.mlir.hlo_to_stablehlo(proto)


@surface(
    "jax", "jax._src.lib.xla_client._xla.HloModule.from_serialized_hlo_module_proto", checked=("0.7.1",),
    missing_from=("0.10.2",),
)
def hlo_module_text(proto: bytes) -> str:
    """The HLO text of a serialized HLO module proto. jaxlib 0.10 has no ``HloModule``: there the
    TPU worker refuses HLO protos, naming this."""
    from jax._src.lib import xla_client

    return xla_client._xla.HloModule.from_serialized_hlo_module_proto(proto).to_string()


@surface("jax", "jax._src.compiler.get_compile_options", checked=CHECKED)
def compile_options(*, num_replicas: int, num_partitions: int, device_assignment: Any) -> Any:
    """XLA compile options as JAX builds them for ``jax.jit``, SPMD partitioning on (JAX's default;
    jax 0.10 has no switch for it), ``device_assignment`` an array of device ids."""
    from jax._src import compiler

    return compiler.get_compile_options(
        num_replicas=num_replicas, num_partitions=num_partitions, device_assignment=device_assignment
    )


@surface("jax", "jax._src.lib.xla_client.CompileOptions", checked=CHECKED)
def empty_compile_options() -> Any:
    """XLA compile options with every field at its default (``executable_build_options`` to set)."""
    from jax._src.lib import xla_client

    return xla_client.CompileOptions()


@surface("jax", "jax._src.lib.xla_client.DeviceAssignment.create", checked=CHECKED)
def device_assignment(assignment: Any) -> Any:
    """An XLA device assignment from an array of device ids (replicas x partitions)."""
    from jax._src.lib import xla_client

    return xla_client.DeviceAssignment.create(assignment)


@surface("jax", "jax._src.lib.xla_client.DeviceList", checked=CHECKED)
def device_list(devices: Sequence[Any]) -> Any:
    """The device list an XLA client compiles for."""
    from jax._src.lib import xla_client

    return xla_client.DeviceList(tuple(devices))


@surface("jax", "jax._src.interpreters.mlir.make_ir_context", checked=CHECKED)
def ir_context() -> AbstractContextManager[Any]:
    """An MLIR context with JAX's dialects loaded (``with`` it to parse and build modules)."""
    from jax._src.interpreters import mlir

    return mlir.make_ir_context()


@surface("jax", "jax._src.interpreters.mlir.module_to_bytecode", checked=CHECKED)
def module_to_bytecode(module: Any) -> bytes:
    """An MLIR module as bytecode, as JAX serializes what it compiles."""
    from jax._src.interpreters import mlir

    return mlir.module_to_bytecode(module)


# ---------------------------------------------------------------- accessors: read


@surface(
    "jax", "jax._src.lib.mlir.ir", checked=CHECKED,
    uses=("Module.parse", "StringAttr", "DictAttr", "DictAttr.get", "BoolAttr.get", "ArrayAttr.get"),
)
def mlir_ir() -> ModuleType:
    """JAX's MLIR Python bindings: to parse a module and rewrite its attributes."""
    from jax._src.lib.mlir import ir

    return ir
