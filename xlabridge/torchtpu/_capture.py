"""Capture the graphs TorchTPU's ``backend="tpu"`` would compile, without a TPU.

TorchTPU's ``TpuBackend`` (torch_tpu 0.2.0, ``_internal/compile/_backend.py``) takes each
Dynamo graph through: ``fold_gqa`` (a pre-AOTAutograd FX pass), then ``aot_autograd`` with the
masked_fill decompositions, ``min_cut_rematerialization_partition`` and
``keep_inference_input_mutations=False``, then, per forward and backward graph, its split
compiler (cut at collectives) and its lowering. ``GraphCapture`` does the same up to the
lowering, records each graph, and runs it on CPU so the user's program goes on.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from xlabridge import _optional

logger = logging.getLogger(__name__)

__all__ = ["CollectiveSplit", "GraphCapture", "TpuGraph", "torchtpu_available"]

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)')
_TORCH_DIR = "/torch/"


def torchtpu_available() -> bool:
    """Whether torch_tpu is installed (found without importing it)."""
    return _optional.is_available("torch_tpu")


@dataclasses.dataclass(frozen=True)
class CollectiveSplit:
    """Where TorchTPU's split compiler cuts a graph: a collective op, with the user's line."""

    op: str
    user_line: str | None


@dataclasses.dataclass
class TpuGraph:
    """One graph TorchTPU would lower and compile: a forward or backward graph of a Dynamo graph."""

    dynamo_graph: int
    """Index of the Dynamo graph (in capture order) this graph comes from."""
    kind: str
    """``"forward"`` or ``"backward"`` (``"forward"`` for inference graphs too)."""
    graph_module: torch.fx.GraphModule
    """The ATen-level graph after AOTAutograd, as TorchTPU's compiler receives it."""
    input_specs: list[tuple[tuple[int, ...], torch.dtype]]
    """Each input's shape and dtype (parameters lifted as inputs, as AOTAutograd passes them)."""
    user_lines: dict[str, str]
    """Op node name -> the user's ``file:line`` it was traced from (where known)."""
    collective_splits: list[CollectiveSplit]
    """The collectives TorchTPU's split compiler cuts this graph at (partitions = 2*len + 1 at most)."""
    capture_seconds: float
    """Seconds from the Dynamo graph's arrival at the backend to this graph's capture."""
    torchtpu_passes: bool
    """Whether torch_tpu's own passes and decompositions were applied (torch_tpu installed)."""

    @property
    def name(self) -> str:
        return f"graph{self.dynamo_graph}_{self.kind}"

    @property
    def op_counts(self) -> dict[str, int]:
        """ATen op -> how many call_function nodes use it."""
        counts: dict[str, int] = {}
        for node in self.graph_module.graph.nodes:
            if node.op == "call_function":
                name = str(getattr(node.target, "__name__", node.target))
                counts[name] = counts.get(name, 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        """Plain data for an event log (the graph itself as its readable code)."""
        return {
            "dynamo_graph": self.dynamo_graph,
            "kind": self.kind,
            "name": self.name,
            "inputs": [[list(shape), str(dtype).removeprefix("torch.")] for shape, dtype in self.input_specs],
            "ops": self.op_counts,
            "user_lines": dict(self.user_lines),
            "collective_splits": [dataclasses.asdict(split) for split in self.collective_splits],
            "capture_seconds": self.capture_seconds,
            "torchtpu_passes": self.torchtpu_passes,
        }


def _user_line(node: torch.fx.Node) -> str | None:
    """The innermost frame of the node's stack trace outside torch itself, as ``file:line``."""
    trace = node.meta.get("stack_trace") or ""
    frames = [m for m in _FRAME.finditer(trace) if _TORCH_DIR not in m.group("file")]
    if not frames:
        return None
    last = frames[-1]
    return f"{last.group('file')}:{last.group('line')}"


def _torchtpu_pieces() -> tuple[Callable[[torch.fx.GraphModule], Any] | None, dict[Any, Any], Callable[[Any], bool]]:
    """TorchTPU's pre-grad pass, its decomposition table and its collective test, or torch's equivalents."""
    from torch._decomp import get_decompositions

    if torchtpu_available():
        from torch_tpu._internal.compile import _backend
        from torch_tpu._internal.compile.fx_passes import fold_gqa
        from torch_tpu._internal.distributed import collective_ops

        return fold_gqa.apply, dict(_backend._TPU_DECOMPOSITIONS), collective_ops.is_collective_op
    decompositions = get_decompositions([torch.ops.aten.masked_fill.Tensor, torch.ops.aten.masked_fill_.Tensor])

    def is_collective(target: Any) -> bool:
        return str(getattr(target, "_qualified_op_name", "")).startswith("_c10d_functional::")

    return None, decompositions, is_collective


class GraphCapture:
    """A Dynamo backend recording what TorchTPU's ``backend="tpu"`` would compile.

    Use it as ``torch.compile(model, backend=GraphCapture())`` (``dynamic=False``, as TorchTPU
    makes it the default for its backend). Graphs run on CPU with the captured ATen graphs, so
    results are those of eager CPU execution. ``graphs`` lists the captured graphs in order.
    """

    def __init__(self) -> None:
        self.graphs: list[TpuGraph] = []
        self._dynamo_graphs = itertools.count()
        self._pre_grad, self._decompositions, self._is_collective = _torchtpu_pieces()

    def __call__(self, graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Any:
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd
        from torch._functorch.partitioners import min_cut_rematerialization_partition

        index = next(self._dynamo_graphs)
        started = time.perf_counter()
        if self._pre_grad is not None:
            self._pre_grad(graph_module)

        def capture(kind: str) -> Callable[[torch.fx.GraphModule, Sequence[Any]], Any]:
            def compiler(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> Any:
                self.graphs.append(self._record(index, kind, gm, inputs, started))
                return make_boxed_func(gm)

            return compiler

        return aot_autograd(
            fw_compiler=capture("forward"),
            bw_compiler=capture("backward"),
            partition_fn=min_cut_rematerialization_partition,
            decompositions=self._decompositions,
            keep_inference_input_mutations=False,
        )(graph_module, example_inputs)

    def _record(
        self, index: int, kind: str, gm: torch.fx.GraphModule, inputs: Sequence[Any], started: float
    ) -> TpuGraph:
        specs = []
        for position, value in enumerate(inputs):
            if not isinstance(value, torch.Tensor):
                raise NotImplementedError(
                    f"graph {index} ({kind}) input {position} is a {type(value).__name__}, not a tensor: "
                    "symbolic shapes are not captured (TorchTPU compiles with dynamic=False by default)"
                )
            specs.append((tuple(int(size) for size in value.shape), value.dtype))
        lines, splits = {}, []
        for node in gm.graph.nodes:
            if node.op != "call_function":
                continue
            line = _user_line(node)
            if line is not None:
                lines[node.name] = line
            target = getattr(node.target, "overloadpacket", node.target)
            if self._is_collective(target) and "wait_tensor" not in str(target):
                splits.append(CollectiveSplit(str(target), line))
        graph = TpuGraph(index, kind, gm, specs, lines, splits, time.perf_counter() - started, self._pre_grad is not None)
        logger.debug("captured %s: %d nodes, %d collective splits", graph.name, len(gm.graph.nodes), len(splits))
        return graph
