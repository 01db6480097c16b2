"""Which way one XLA graph is compiled: forward-only, or through AOTAutograd.

``openxla`` sends every graph through AOTAutograd, which traces it again to aten ops,
functionalizes it and prepares a backward, before torch_xla compiles the forward. When no
gradient can be needed, tracing Dynamo's graph to aten ops alone and handing that to the
bridge (``xlabridge.backend._forward_only``, then ``openxla_eval``'s path) gives the same results,
transfers and XLA graphs for less work. "Same results" is the contract, so the decision is
conservative: the forward-only path is taken only when the graph

* cannot need a gradient: grad mode is off at compile time (Dynamo guards on it, so the
  graph only runs with grad mode off), or no input or output requires grad;
* does not switch grad mode itself, nor call a higher-order op (checkpointing, autograd
  functions) whose behaviour depends on autograd;
* mutates no input or buffer: AOTAutograd writes such mutations back after the call; seen
  through the fake tensors' version counters, plus the mutations fake tensors do not count
  (``batch_norm``/``instance_norm`` running statistics, ``out=`` arguments, mutable ops);
* has no in-place op whose result is unused: torch_xla's bridge drops such a node as dead
  code (``y.add_(1).relu_(); return y * 2`` loses the ``relu_``), AOTAutograd's
  functionalization keeps its effect; an in-place op whose result is used
  (``x = F.relu(x, inplace=True)``) runs, and mutates only intermediates (rule above);
* returns no output aliasing an input or another output (AOTAutograd regenerates views);
* has no random op (the two paths are not shown to draw the same numbers).

Anything else, including a graph this module cannot read, takes the AOTAutograd path. One
pass over the graph's nodes: the decision costs microseconds per node, once per graph.
"""

from __future__ import annotations

import dataclasses
import enum
import operator
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.multiprocessing.reductions import StorageWeakRef

from xlabridge._upstream import torch as upstream_torch
from xlabridge.backend._placement import tensors_in


class PathKind(str, enum.Enum):
    """How the backend compiles one graph."""

    FORWARD_ONLY = "forward-only"
    """Traced to aten ops and handed to torch_xla's bridge directly (``xlabridge.backend._forward_only``)."""
    AOT_AUTOGRAD = "aot-autograd"
    """Through AOTAutograd, as ``openxla`` compiles every graph."""
    INDUCTOR = "inductor"
    """Not an XLA graph: inductor compiles it."""
    TORCHTPU = "tpu-backend"
    """TorchTPU's ``backend="tpu"`` compiles it (AOTAutograd, its split compiler, XLA:TPU)."""

_GRAD_MODE_SWITCHES = frozenset({upstream_torch.set_grad_enabled_function(), torch.set_grad_enabled})

_RANDOM_FUNCTIONS = frozenset(
    {
        torch.rand, torch.randn, torch.randint, torch.randperm, torch.rand_like, torch.randn_like,
        torch.randint_like, torch.bernoulli, torch.multinomial, torch.normal, torch.poisson,
        torch.nn.init.uniform_, torch.nn.init.normal_, torch.nn.init.trunc_normal_,
    }
)
"""Random functions Dynamo records as themselves; dropout-like ones are checked by flag."""

_RANDOM_METHODS = frozenset(
    {"bernoulli", "bernoulli_", "uniform_", "normal_", "random_", "exponential_", "geometric_",
     "cauchy_", "log_normal_", "multinomial"}
)

_DROPOUTS = frozenset(
    {F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout, F.feature_alpha_dropout,
     torch.dropout, torch.alpha_dropout, torch.feature_dropout, torch.feature_alpha_dropout}
)
"""Random when ``training`` (third argument, default True) is set and ``p`` is not 0."""

_RUNNING_STAT_NORMS: dict[Any, tuple[str, int, bool, tuple[int, int]]] = {
    F.batch_norm: ("training", 5, False, (1, 2)),
    F.instance_norm: ("use_input_stats", 5, True, (1, 2)),
    torch.batch_norm: ("training", 5, False, (3, 4)),
    torch.instance_norm: ("use_input_stats", 5, False, (3, 4)),
}
"""Norms that update running statistics in place, which fake tensors' version counters do
not count: the flag's name, position and default, and where ``running_mean``/``running_var``
are."""


_IN_PLACE_OPERATORS = frozenset(
    {operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
     operator.ifloordiv, operator.imod, operator.ipow, operator.iand, operator.ior, operator.ixor,
     operator.ilshift, operator.irshift, operator.imatmul}
)
_IN_PLACE_DUNDERS = frozenset(
    {"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__",
     "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__imatmul__"}
)


@dataclasses.dataclass(frozen=True)
class CompilePath:
    """The path chosen for one graph and why, in a few words for the diagnostics report."""

    name: PathKind
    reason: str


def _argument(node: torch.fx.Node, name: str, position: int, default: Any) -> Any:
    if name in node.kwargs:
        return node.kwargs[name]
    return node.args[position] if len(node.args) > position else default


def _example(node: Any) -> Any:
    return node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None


def _random_call(node: torch.fx.Node) -> bool:
    target = node.target
    if node.op == "call_method":
        return target in _RANDOM_METHODS
    if target in _RANDOM_FUNCTIONS:
        return True
    if target in _DROPOUTS:
        return bool(_argument(node, "training", 2, True)) and _argument(node, "p", 1, 0.5) != 0
    if target is F.rrelu:
        return bool(_argument(node, "training", 3, False))
    return False


def _in_place(node: torch.fx.Node) -> bool:
    """``x.add_(y)``, ``torch.relu_(x)``, ``F.relu(x, inplace=True)``, ``x += y``, ``x[i] = v``."""
    if node.kwargs.get("inplace") is True or node.target in _IN_PLACE_OPERATORS:
        return True
    if node.op == "call_function" and getattr(node.target, "__module__", None) in ("_operator", "operator"):
        return False  # operator.and_ / or_ / not_ are not in-place
    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    if not isinstance(name, str):
        return False
    dunder = name.startswith("__") and name.endswith("__")
    return (name.endswith("_") and not dunder) or name in _IN_PLACE_DUNDERS


def _hidden_mutation(node: torch.fx.Node) -> str | None:
    """A mutation of an existing tensor that fake tensors' version counters do not show."""
    if node.target in _RUNNING_STAT_NORMS:
        flag, flag_at, default, (mean_at, var_at) = _RUNNING_STAT_NORMS[node.target]
        updates = _argument(node, flag, flag_at, default)
        stats = (_argument(node, "running_mean", mean_at, None), _argument(node, "running_var", var_at, None))
        if updates and any(s is not None for s in stats):
            return f"{node.target.__name__} updates running statistics"
    if node.kwargs.get("out") is not None:
        return f"{getattr(node.target, '__name__', node.target)} writes to out="
    schema = upstream_torch.op_schema(node.target)
    if schema is not None and schema.is_mutable:
        return f"{schema.name} mutates an argument"
    return None


def _node_reason(node: torch.fx.Node) -> str | None:
    if node.op == "call_module":
        return f"calls module {node.target} (not inlined)"
    if node.op not in ("call_function", "call_method"):
        return None
    if node.target in _GRAD_MODE_SWITCHES:
        return "switches grad mode inside the graph"
    if isinstance(node.target, upstream_torch.higher_order_operator()):
        return f"calls higher-order op {node.target.__name__}"
    if _random_call(node):
        return f"random op {getattr(node.target, '__name__', node.target)}"
    hidden = _hidden_mutation(node)
    if hidden is not None:
        return hidden
    if _in_place(node) and not node.users:
        return f"result of in-place op {getattr(node.target, '__name__', node.target)} unused"
    return None


def _output_nodes(gm: torch.fx.GraphModule) -> list[Any]:
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    flat: list[Any] = []
    torch.fx.node.map_arg(output.args, flat.append)
    return flat


def _alias_reason(placeholders: Sequence[torch.fx.Node], outputs: Sequence[torch.fx.Node]) -> str | None:
    input_storages = {
        StorageWeakRef(t.untyped_storage()): node.name
        for node in placeholders
        for t in tensors_in(_example(node))
    }
    seen: dict[StorageWeakRef, str] = {}
    for node in outputs:
        for tensor in tensors_in(_example(node)):
            storage = StorageWeakRef(tensor.untyped_storage())
            if storage in input_storages:
                return f"output {node.name} aliases input {input_storages[storage]}"
            if storage in seen and seen[storage] != node.name:
                return f"outputs {seen[storage]} and {node.name} share storage"
            seen[storage] = node.name
    return None


def choose(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> CompilePath:
    """The path for Dynamo graph ``gm``: forward-only only when it gives openxla's results."""
    try:
        return _choose(gm, example_inputs)
    except Exception as error:  # an unexpected graph must not fail compilation: be conservative
        return CompilePath(PathKind.AOT_AUTOGRAD, f"graph not analysable ({type(error).__name__})")


def _choose(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> CompilePath:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if any(not isinstance(x, torch.Tensor) for x in example_inputs):
        return CompilePath(PathKind.AOT_AUTOGRAD, "graph takes symbolic sizes or non-tensor inputs")
    grad_enabled = torch.is_grad_enabled()
    if grad_enabled:
        needing = next((n.name for n, x in zip(placeholders, example_inputs) if x.requires_grad), None)
        if needing is not None:
            return CompilePath(PathKind.AOT_AUTOGRAD, f"grad mode on and input {needing} requires grad")
    for node in placeholders:
        example = _example(node)
        if isinstance(example, torch.Tensor) and example._version > 0:
            return CompilePath(PathKind.AOT_AUTOGRAD, f"mutates input {node.name}")
    for node in gm.graph.nodes:
        reason = _node_reason(node)
        if reason is not None:
            return CompilePath(PathKind.AOT_AUTOGRAD, reason)
    outputs = [n for n in _output_nodes(gm) if isinstance(n, torch.fx.Node)]
    if any(t.requires_grad for n in outputs for t in tensors_in(_example(n))):
        return CompilePath(PathKind.AOT_AUTOGRAD, "an output requires grad")
    alias = _alias_reason(placeholders, outputs)
    if alias is not None:
        return CompilePath(PathKind.AOT_AUTOGRAD, alias)
    return CompilePath(PathKind.FORWARD_ONLY, "no grad mode" if not grad_enabled else "no input requires grad")
