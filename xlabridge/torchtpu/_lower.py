"""Lower a captured TorchTPU graph to StableHLO for the TPU platform: torchax, then jax.export.

torchax (Google's ATen-to-JAX op library) runs the ATen graph on JAX values inside
``jax.jit``; ``jax.export`` lowers it for the ``tpu`` platform without a TPU. torchax 0.0.13
(the newest) names, at import, ATen overloads that torch 2.15 no longer has
(``aten::prod.dim_Dimname``, ``aten::cholesky``, ``aten::qr``, named-dimension overloads) and
fails with AttributeError; ``_import_torchax`` resolves those names to inert placeholders while
it imports, so those ops (unused by these graphs) have no lowering and every other op keeps its own.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator
from typing import Any

import torch

from xlabridge import _optional
from xlabridge._upstream import torch as upstream_torch

logger = logging.getLogger(__name__)

__all__ = ["lower_to_stablehlo"]


class _AbsentOp:
    """Stands for an ATen op or overload that this torch lacks, while torchax imports."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, key: str) -> _AbsentOp:
        if key.startswith("__"):
            raise AttributeError(key)
        return _AbsentOp(f"{self.name}.{key}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self.name} does not exist in torch {torch.__version__}")


@contextlib.contextmanager
def _tolerate_absent_ops(absent: list[str]) -> Iterator[None]:
    packet_class, namespace_class = upstream_torch.op_overload_packet(), upstream_torch.op_namespace()
    packet_getattr = packet_class.__getattr__
    namespace_getattr = namespace_class.__getattr__

    def packet(self: Any, key: str) -> Any:
        try:
            return packet_getattr(self, key)
        except AttributeError:
            if key.startswith("__"):
                raise
            name = upstream_torch.qualified_op_name(self)
            absent.append(f"{name}.{key}")
            return _AbsentOp(f"{name}.{key}")

    def namespace(self: Any, key: str) -> Any:
        try:
            return namespace_getattr(self, key)
        except AttributeError:
            if key.startswith("__"):
                raise
            absent.append(f"{self.name}::{key}")
            return _AbsentOp(f"{self.name}::{key}")

    packet_class.__getattr__ = packet
    namespace_class.__getattr__ = namespace
    try:
        yield
    finally:
        packet_class.__getattr__ = packet_getattr
        namespace_class.__getattr__ = namespace_getattr


@functools.cache
def _import_torchax() -> Any:
    """torchax and its environment (ops loaded), importable beside torch 2.15 (module docstring)."""
    _optional.require("jax", "xlabridge.torchtpu.lower_to_stablehlo")
    if not _optional.is_available("torchax"):
        from xlabridge.errors import MissingDependencyError

        raise MissingDependencyError(
            "xlabridge.torchtpu.lower_to_stablehlo needs torchax: pip install -r requirements/torchtpu.txt"
        )
    absent: list[str] = []
    with _tolerate_absent_ops(absent):
        import torchax

        env = torchax.default_env()
    if absent:
        logger.info("torchax: ATen names absent from torch %s (no lowering): %s", torch.__version__, ", ".join(absent))
    return env


@functools.cache
def _decompositions() -> dict[Any, Any]:
    """ATen ops lowered through torch's own decomposition instead of torchax's lowering.

    torchax 0.0.13's ``native_layer_norm_backward`` takes 5-6 positional arguments where
    torch 2.15's op passes 8 (TypeError on GPT-2's backward graph).
    """
    return upstream_torch.decompositions([torch.ops.aten.native_layer_norm_backward.default])


def _on_one_device(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` without ``device=`` arguments (``_to_copy``, factory ops).

    Captured on CPU, the graph names ``device=cpu`` where TorchTPU's names ``tpu``; under
    torchax, ``cpu`` means "leave JAX" (a concrete torch tensor, impossible while tracing), so
    the argument is dropped: every tensor is on the one device being compiled for.
    """
    import copy

    graph = copy.deepcopy(gm.graph)
    for node in graph.nodes:
        if node.op == "call_function" and "device" in node.kwargs:
            node.kwargs = {key: value for key, value in node.kwargs.items() if key != "device"}
    return torch.fx.GraphModule(gm, graph)


def lower_to_stablehlo(graph: Any) -> str:
    """The graph as StableHLO text for the TPU platform (``jax.export``, no TPU needed).

    ``graph``: a captured partition, with its ``graph_module`` and its ``input_specs`` (each input's
    shape and dtype): a ``TpuGraph`` of ``GraphCapture().graphs``, or the diagnostics' record of one.
    """
    if not isinstance(getattr(graph, "graph_module", None), torch.fx.GraphModule) or not hasattr(graph, "input_specs"):
        raise TypeError(f"graph must be a TpuGraph (GraphCapture().graphs), got {type(graph).__name__}")
    return export_graph(graph, ("tpu",)).mlir_module()


def export_graph(graph: Any, platforms: tuple[str, ...]) -> Any:
    """``jax.export.Exported`` of the graph for ``platforms`` (``("cpu",)`` can be run here)."""
    env = _import_torchax()
    import jax
    from jax import export
    from torchax import interop

    gm = _on_one_device(graph.graph_module)

    decompositions = _decompositions()

    class _Interpreter(torch.fx.Interpreter):
        # constants the graph holds (get_attr: e.g. an empty KV cache) become JAX values too
        def get_attr(self, target: Any, args: Any, kwargs: Any) -> Any:
            value = super().get_attr(target, args, kwargs)
            return env.to_xla(value) if isinstance(value, torch.Tensor) else value

        def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
            if target in decompositions:
                return decompositions[target](*args, **kwargs)
            if _qualified_name(target) == "tpu::_pad_real_to_static":
                return _pad_real_to_static(*args, **kwargs)
            return super().call_function(target, args, kwargs)

    # an int input (a dynamic graph's symbol, at its bucket's bound) is a constant of the program
    constants = {position: spec for position, spec in enumerate(graph.input_specs) if isinstance(spec, int)}

    def run(*tensors: Any) -> Any:
        viewed = iter(interop.torch_view(tensors))
        args = [constants[i] if i in constants else next(viewed) for i in range(len(graph.input_specs))]
        with env:
            outputs = _Interpreter(gm).run(*args)
        flat = [o for o in outputs if o is not None] if isinstance(outputs, (tuple, list)) else [outputs]
        return interop.jax_view(tuple(flat))

    avals = [jax.ShapeDtypeStruct(spec[0], interop.jax_view(spec[1]))
             for spec in graph.input_specs if not isinstance(spec, int)]
    return export.export(jax.jit(run), platforms=list(platforms))(*avals)


def _qualified_name(target: Any) -> str:
    return str(upstream_torch.qualified_op_name(target) or getattr(upstream_torch.op_schema(target), "name", ""))


def _pad_real_to_static(x: Any, sizes: list[Any], static_shape: list[int], dynamic: list[bool]) -> Any:
    """TorchTPU's ``tpu::_pad_real_to_static`` (a dynamic graph's bucket program), on torchax
    tensors: the input, at the bucket's static shape, with the elements past each dynamic
    dimension's real size (``sizes``, 0-d tensors) zeroed. XLA:TPU lowers the op as its own custom
    call; this is the same data as one select, which XLA fuses into the input's first use."""
    import jax
    import jax.numpy as jnp
    from torchax import interop

    array = interop.jax_view(x)
    if list(array.shape) != list(static_shape):
        raise ValueError(f"_pad_real_to_static: input of shape {list(array.shape)}, expected the bound {static_shape}")
    for dim, (size, is_dynamic) in enumerate(zip(sizes, dynamic)):
        if is_dynamic:
            keep = jax.lax.broadcasted_iota(jnp.int32, array.shape, dim) < interop.jax_view(size)
            array = jnp.where(keep, array, jnp.zeros((), array.dtype))
    return interop.torch_view(array)
