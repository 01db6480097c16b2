"""FX graphs (ATen) lowered to StableHLO for the TPU platform: torchax, then ``jax.export``.

The TPU view's front end for programs that come as FX graphs rather than as XLA modules: the
graphs Dynamo hands to any backend (inductor, eager, aot_eager... traced forward and backward by
``_aot``), and TorchTPU's partitions (``xlabridge.torchtpu``). torchax (Google's ATen-to-JAX op
library) runs the ATen graph on JAX values inside ``jax.jit``; ``jax.export`` lowers it for the
``tpu`` platform without a TPU, and ``compile_row`` compiles the text with libtpu.

Each node runs under a JAX name scope of its FX node's name, so the optimized TPU HLO's op
metadata names the node an instruction came from (``missing_lowerings`` and an XLA:TPU refusal
are mapped back to the user's line that way).

torchax 0.0.13 (the newest) names, at import, ATen overloads that torch 2.15 no longer has
(``aten::prod.dim_Dimname``, ``aten::cholesky``, ``aten::qr``, named-dimension overloads) and
fails with AttributeError; ``_import_torchax`` resolves those names to inert placeholders while
it imports, so those ops (unused by these graphs) have no lowering and every other op keeps its own.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from xlabridge import _optional
from xlabridge._upstream import torch as upstream_torch, torchax as upstream_torchax

logger = logging.getLogger(__name__)

__all__ = ["FxLoweringError", "InputSpec", "LoweringBreak", "export_fx", "missing_lowerings", "op_name", "torchax_available"]

InputSpec = "tuple[tuple[int, ...], torch.dtype] | int"
"""One input of a graph: a tensor's shape and dtype, or an int (a symbol's value: a constant of the program)."""

INSTALL_HINT = "pip install -r requirements/torchtpu.txt (torchax 0.0.13 with jax 0.10.2)"


def torchax_available() -> bool:
    """Whether torchax (its own distribution: torch_xla 2.9's wheel carries an older copy that needs
    flax) and JAX are installed, found without importing them."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("torchax")
    except PackageNotFoundError:
        return False
    return _optional.is_available("torchax") and _optional.is_available("jax")


@dataclasses.dataclass(frozen=True)
class LoweringBreak:
    """One FX node whose op has no TPU lowering: torchax has none and torch no decomposition into ops it has."""

    op: str
    """The ATen op, ``aten::adaptive_max_pool2d``."""
    node: str
    """The FX node's name."""
    stack_trace: str
    """The node's ``meta["stack_trace"]`` (the user's line is read from it)."""


class FxLoweringError(RuntimeError):
    """torchax (or JAX) failed on one node of the graph: which node, its op and its stack."""

    def __init__(self, op: str, node: str, stack_trace: str, error: BaseException) -> None:
        super().__init__(f"node {node} ({op}): {type(error).__name__}: {error}")
        self.op, self.node, self.stack_trace = op, node, stack_trace


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


def import_torchax(caller: str = "xlabridge.tpu") -> Any:
    """torchax's environment (its ops loaded), importable beside torch 2.15 (module docstring);
    ``MissingDependencyError`` naming ``caller`` without torchax or JAX."""
    _optional.require("jax", caller)
    if not torchax_available():
        from xlabridge.errors import MissingDependencyError

        raise MissingDependencyError(f"{caller} lowers FX graphs for TPU with torchax: {INSTALL_HINT}")
    return _torchax_env()


@functools.cache
def _torchax_env() -> Any:
    absent: list[str] = []
    with _tolerate_absent_ops(absent):
        import torchax

        env = torchax.default_env()
    if absent:
        logger.info("torchax: ATen names absent from torch %s (no lowering): %s", torch.__version__, ", ".join(absent))
    return env


@functools.cache
def _replaced_lowerings() -> dict[Any, Any]:
    """ATen ops lowered through torch's own decomposition instead of torchax's lowering.

    torchax 0.0.13's ``native_layer_norm_backward`` takes 5-6 positional arguments where
    torch 2.15's op passes 8 (TypeError on GPT-2's backward graph).
    """
    return upstream_torch.decompositions([torch.ops.aten.native_layer_norm_backward.default])


def op_name(target: Any) -> str:
    """``aten::mm`` for an op overload; the target's name for anything else."""
    schema = upstream_torch.op_schema(target)
    if schema is not None:
        return str(schema.name)
    return str(upstream_torch.qualified_op_name(target) or getattr(target, "__name__", target))


def _convolution_backward(grad_output: Any, input: Any, weight: Any, bias_sizes: Any, stride: Any, padding: Any,
                          dilation: Any, transposed: Any, output_padding: Any, groups: Any, output_mask: Any) -> Any:
    """``aten::convolution_backward`` on torchax tensors: the VJP of torchax's own convolution
    (torchax 0.0.13 lowers the convolution, not its backward; XLA lowers both)."""
    import jax
    from torchax import interop

    def convolve(x: Any, w: Any) -> Any:
        out = torch.ops.aten.convolution.default(interop.torch_view(x), interop.torch_view(w), None, stride, padding,
                                                 dilation, transposed, output_padding, groups)
        return interop.jax_view(out)

    x, w, g = interop.jax_view((input, weight, grad_output))
    _, vjp = jax.vjp(convolve, x, w)
    grad_input, grad_weight = vjp(g)
    grad_bias = g.sum(axis=(0, *range(2, g.ndim))) if output_mask[2] else None
    return interop.torch_view((grad_input if output_mask[0] else None, grad_weight if output_mask[1] else None,
                               grad_bias))


LOWERINGS: dict[str, Callable[..., Any]] = {"aten::convolution_backward": _convolution_backward}
"""ATen ops torchax does not lower that xlabridge lowers itself, by name (on torchax tensors): XLA has
a lowering of them, so a graph that uses them is not reported as one without."""


def has_lowering(target: Any) -> bool:
    """Whether torchax lowers ``target`` (an ATen op overload), or xlabridge replaces its lowering."""
    if target in _replaced_lowerings() or op_name(target) in LOWERINGS:
        return True
    return upstream_torchax.has_lowering(import_torchax(), target)


def decompositions_for_tpu() -> dict[Any, Callable[..., Any]]:
    """torch's decompositions of the ops torchax does not lower (for AOTAutograd's tracing): an op
    with one lowers as the ops it decomposes into, as inductor decomposes what it has no kernel for."""
    table = upstream_torch.core_decompositions()
    return {op: fn for op, fn in table.items() if isinstance(op, upstream_torch.op_overload()) and not has_lowering(op)}


def missing_lowerings(gm: torch.fx.GraphModule, overrides: Mapping[str, Callable[..., Any]] | None = None) -> list[LoweringBreak]:
    """The nodes of ``gm`` whose ATen op has no TPU lowering (torchax lacks it), in graph order."""
    overrides = overrides or {}
    found = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or upstream_torch.op_schema(node.target) is None:
            continue
        name = op_name(node.target)
        if name in overrides or has_lowering(node.target):
            continue
        found.append(LoweringBreak(name, node.name, node.meta.get("stack_trace") or ""))
    return found


def on_one_device(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` without ``device=`` arguments (``_to_copy``, factory ops).

    A graph captured on CPU or CUDA names its device where the TPU program has one device; under
    torchax, ``cpu`` means "leave JAX" (a concrete torch tensor, impossible while tracing), so
    the argument is dropped: every tensor is on the one device being compiled for.
    """
    graph = copy.deepcopy(gm.graph)
    for node in graph.nodes:
        if node.op == "call_function" and "device" in node.kwargs:
            node.kwargs = {key: value for key, value in node.kwargs.items() if key != "device"}
    return torch.fx.GraphModule(gm, graph)


def export_fx(
    gm: torch.fx.GraphModule,
    input_specs: Sequence[Any],
    platforms: tuple[str, ...] = ("tpu",),
    *,
    overrides: Mapping[str, Callable[..., Any]] | None = None,
    in_shardings: Sequence[Any] | None = None,
) -> Any:
    """``jax.export.Exported`` of ``gm`` on inputs of ``input_specs`` for ``platforms``
    (``("cpu",)`` can be run here).

    ``input_specs``: per placeholder, ``(shape, dtype)`` or an int (a symbol's value, a constant of
    the program). ``overrides``: ATen ops (``"tpu::_pad_real_to_static"``) lowered by the given
    function instead of torchax (on torchax tensors). ``in_shardings``: per tensor input, a
    ``jax.sharding.NamedSharding`` (over an abstract mesh) for an SPMD program; the outputs'
    shardings are left to XLA's propagation.
    """
    env = import_torchax()
    import jax
    from jax import export
    from torchax import interop

    gm = on_one_device(gm)
    replaced = _replaced_lowerings()
    overrides = {**LOWERINGS, **(overrides or {})}

    class _Interpreter(torch.fx.Interpreter):
        # constants the graph holds (get_attr: e.g. an empty KV cache) become JAX values too
        def get_attr(self, target: Any, args: Any, kwargs: Any) -> Any:
            value = super().get_attr(target, args, kwargs)
            return env.to_xla(value) if isinstance(value, torch.Tensor) else value

        def run_node(self, node: torch.fx.Node) -> Any:
            with jax.named_scope(node.name):
                try:
                    return super().run_node(node)
                except FxLoweringError:
                    raise
                except Exception as error:
                    if node.op != "call_function":
                        raise
                    raise FxLoweringError(op_name(node.target), node.name, node.meta.get("stack_trace") or "",
                                          error) from error

        def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
            if target in replaced:
                return replaced[target](*args, **kwargs)
            override = overrides.get(op_name(target))
            if override is not None:
                return override(*args, **kwargs)
            return super().call_function(target, args, kwargs)

    constants = {position: spec for position, spec in enumerate(input_specs) if isinstance(spec, int)}

    def run(*tensors: Any) -> Any:
        viewed = iter(interop.torch_view(tensors))
        args = [constants[i] if i in constants else next(viewed) for i in range(len(input_specs))]
        # random ops draw from a key made inside the program: torchax's own key, a concrete array,
        # would be hoisted as an extra argument (which a sharded export miscounts) and rotated
        # into a leaked tracer
        with env, env.override_property(prng=jax.random.PRNGKey(0)):
            outputs = _Interpreter(gm).run(*args)
        flat = [o for o in outputs if o is not None] if isinstance(outputs, (tuple, list)) else [outputs]
        return interop.jax_view(tuple(flat))

    avals = [jax.ShapeDtypeStruct(tuple(spec[0]), interop.jax_view(spec[1]))
             for spec in input_specs if not isinstance(spec, int)]
    jitted = jax.jit(run) if in_shardings is None else jax.jit(run, in_shardings=tuple(in_shardings))
    return export.export(jitted, platforms=list(platforms))(*avals)


def data_parallel_shardings(input_specs: Sequence[Any], batch_inputs: Sequence[int], axis: str, size: int) -> list[Any]:
    """Per tensor input, its sharding over an abstract mesh ``{axis: size}``: the batch inputs
    split along their first dimension, every other input (parameters) replicated."""
    from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec

    mesh = AbstractMesh((size,), (axis,))
    tensors = [spec for spec in input_specs if not isinstance(spec, int)]
    return [NamedSharding(mesh, PartitionSpec(axis) if position in batch_inputs else PartitionSpec())
            for position in range(len(tensors))]
