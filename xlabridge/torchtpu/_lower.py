"""Lower a captured TorchTPU graph to StableHLO for the TPU platform, through the TPU view's FX
front end (``xlabridge.tpu._fx``: torchax, then ``jax.export``), with TorchTPU's own op
``tpu::_pad_real_to_static`` (a dynamic graph's bucket program) lowered here."""

from __future__ import annotations

from typing import Any

import torch

from xlabridge.tpu import _fx

__all__ = ["lower_to_stablehlo"]


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
    _fx.import_torchax("xlabridge.torchtpu.lower_to_stablehlo")
    return _fx.export_fx(graph.graph_module, graph.input_specs, platforms,
                         overrides={"tpu::_pad_real_to_static": _pad_real_to_static})


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
