"""Capture the graphs TorchTPU's ``backend="tpu"`` hands to its lowering, without a TPU.

TorchTPU's ``TpuBackend`` (torch_tpu 0.2.0, ``_internal/compile/_backend.py``) takes each
Dynamo graph through ``fold_gqa``, AOTAutograd (its decompositions, partitioner, settings), and,
per forward and backward graph, its ``SplitCompiler`` (FX passes, then ``split_module`` at
collectives) and ``StaticCompiler`` (more FX passes: ``decompose_auto_functionalized``,
``fold_gqa``, ``detect_causal_mask``, ``mark_embedded_constants``,
``mark_activation_checkpoints``), whose ``_compile`` lowers each partition (``fx_to_mlir``:
the graph is run on the ``tpu`` device in a tracing mode) and compiles it with PJRT. All of that
is Python on FakeTensors, and runs here, except ``_compile``: it needs a TPU.

``GraphCapture`` runs TorchTPU's own backend with the compiler it makes observed through the
diagnostics' TorchTPU seam (``_probes/torchtpu_seam.py``: ``observe_compiler``, through
``_backend.make_backend_compiler``, patched for the duration of the backend call; the probes are
the one place that touches TorchTPU's compiler): each partition is recorded exactly as ``fx_to_mlir`` would receive it, and run on CPU
in its place, so the user's program goes on with eager-CPU results.

One of TorchTPU's passes is skipped while capturing: ``mark_embedded_constants`` turns each
constant the graph holds (``get_attr``: GPT-2's attention bias, an empty cache) into a TorchTPU
constant tensor on the ``tpu`` device (``tpu_torch_compile.make_constant_tensor``); beside the
CPU inputs here, the split compiler's FakeTensor propagation then fails with
FakeTensorDeviceMismatchError (privateuseone:0 and cpu). Skipped, the constants stay CPU tensors
with the same data, which the lowering embeds as StableHLO constants as TorchTPU's would.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import re
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from xlabridge import _optional
from xlabridge._upstream import torch as upstream_torch, torch_tpu as upstream_tpu
from xlabridge.torchtpu import _seam as torchtpu_seam
from xlabridge.errors import MissingDependencyError

logger = logging.getLogger(__name__)

__all__ = ["CollectiveSplit", "GraphCapture", "TpuGraph", "capture_tpu_backend", "torchtpu_available"]

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)')
_TORCH_DIRS = ("/torch/", "/torch_tpu/")


def torchtpu_available() -> bool:
    """Whether torch_tpu is installed (found without importing it)."""
    return _optional.is_available("torch_tpu")


@dataclasses.dataclass(frozen=True)
class CollectiveSplit:
    """A collective TorchTPU's split compiler compiles as a partition of its own, with the user's line."""

    op: str
    user_line: str | None


@dataclasses.dataclass
class TpuGraph:
    """One program TorchTPU would lower and compile: a partition of a forward or backward graph."""

    dynamo_graph: int
    """Index of the Dynamo graph (in capture order) this graph comes from."""
    compile_id: str
    """Dynamo's compile id of that graph (``frame/recompile``; its backward graphs share it), or ``""``."""
    kind: str
    """``"forward"`` or ``"backward"`` (``"forward"`` for inference graphs too)."""
    partition: int
    """Index of the partition among those the split compiler made of the forward/backward graph."""
    module_name: str | None
    """The MLIR module name TorchTPU gives it (``graph0_split0_fwd_submod_0``)."""
    graph_module: torch.fx.GraphModule
    """The ATen-level graph as TorchTPU's ``fx_to_mlir`` receives it."""
    input_specs: list[torchtpu_seam.InputSpec]
    """Each input's shape and dtype (parameters lifted as inputs, as AOTAutograd passes them); an
    int for a symbol's value (a graph with dynamic shapes: its bucket's bound)."""
    user_lines: dict[str, str]
    """Op node name -> the user's ``file:line`` it was traced from (where known)."""
    collective_splits: list[CollectiveSplit]
    """Collectives in this partition (the split compiler gives each collective a partition)."""
    capture_seconds: float
    """Seconds from the Dynamo graph's arrival at TorchTPU's backend to this partition's capture."""
    bounds: str = ""
    """A graph with dynamic shapes: the bucket this program is compiled for (``s33 in [2, 128]``),
    at its bound, its dynamic inputs padded in the graph (TorchTPU's ``DynamicCompiler``)."""

    @property
    def name(self) -> str:
        return f"graph{self.dynamo_graph}_{self.kind}_{self.partition}"

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
        """Plain data for an event log (without the graph itself)."""
        return {
            "dynamo_graph": self.dynamo_graph,
            "compile_id": self.compile_id,
            "kind": self.kind,
            "partition": self.partition,
            "name": self.name,
            "module_name": self.module_name,
            "inputs": [spec if isinstance(spec, int) else [list(spec[0]), str(spec[1]).removeprefix("torch.")]
                       for spec in self.input_specs],
            "ops": self.op_counts,
            "user_lines": dict(self.user_lines),
            "collective_splits": [dataclasses.asdict(split) for split in self.collective_splits],
            "capture_seconds": self.capture_seconds,
            "bounds": self.bounds,
        }


skip_tpu_metadata_query = torchtpu_seam.skip_tpu_metadata_query


def _user_line(node: torch.fx.Node) -> str | None:
    """The innermost frame of the node's stack trace outside torch and torch_tpu, as ``file:line``."""
    trace = node.meta.get("stack_trace") or ""
    frames = [m for m in _FRAME.finditer(trace) if not any(d in m.group("file") for d in _TORCH_DIRS)]
    if not frames:
        return None
    last = frames[-1]
    return f"{last.group('file')}:{last.group('line')}"


class GraphCapture:
    """A Dynamo backend: TorchTPU's ``backend="tpu"``, recording what it would lower, running on CPU.

    Use it as ``torch.compile(model, backend=GraphCapture())``. ``graphs`` lists the captured
    partitions in capture order (a backward graph is captured when AOTAutograd compiles it, at the
    first ``backward()``); a graph with dynamic shapes gives one per bucket TorchTPU compiles it
    for (``TpuGraph.bounds``). Needs torch_tpu.
    """

    def __init__(self) -> None:
        if not torchtpu_available():
            raise MissingDependencyError(
                "xlabridge.torchtpu.GraphCapture needs torch_tpu: pip install -r requirements/torchtpu.txt"
            )
        skip_tpu_metadata_query()
        self.graphs: list[TpuGraph] = []
        self._dynamo_graphs = itertools.count()
        self._backend = upstream_tpu.compile_backend().TpuBackend()

    def __call__(self, graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Any:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        index = next(self._dynamo_graphs)
        options = dict(kwargs.pop("options", None) or {})
        options.setdefault("name", f"graph{index}")
        # Attention's math form: on CPU, AOTAutograd would trace scaled_dot_product_attention to
        # the CPU flash kernel (_scaled_dot_product_flash_attention_for_cpu and its backward),
        # a CPU-only op that no TPU lowering knows; on a TPU, TorchTPU picks its own kernel.
        compile_id = upstream_torch.current_compile_id()
        with self._recording(index, "" if compile_id is None else str(compile_id), time.perf_counter()), \
                sdpa_kernel([SDPBackend.MATH]):
            return self._backend(graph_module, example_inputs, options=options, **kwargs)

    @contextlib.contextmanager
    def _recording(self, index: int, compile_id: str, started: float) -> Iterator[None]:
        _backend = upstream_tpu.compile_backend()
        capture = self
        partitions = {"forward": itertools.count(), "backward": itertools.count()}

        def on_partition(record: Callable[[], torchtpu_seam.Partition]) -> None:
            partition = record()
            lines = {}
            for node in partition.graph_module.graph.nodes:
                line = _user_line(node) if node.op == "call_function" else None
                if line is not None:
                    lines[node.name] = line
            splits = [CollectiveSplit(str(getattr(n.target, "overloadpacket", n.target)), _user_line(n))
                      for n in partition.collectives]
            capture.graphs.append(TpuGraph(
                index, compile_id, partition.kind, next(partitions[partition.kind]), partition.module_name,
                partition.graph_module, partition.input_specs, lines, splits, time.perf_counter() - started,
                partition.bounds,
            ))

        original = _backend.make_backend_compiler

        def make_backend_compiler(*args: Any, **kwargs: Any) -> Any:
            made = original(*args, **kwargs)
            if not torchtpu_seam.observe_compiler(made, on_partition, run_on_cpu=True):
                raise NotImplementedError(
                    f"GraphCapture: TorchTPU made a compiler it does not know "
                    f"({type(getattr(made, 'base_compiler', made)).__name__})")
            return made

        _backend.make_backend_compiler = make_backend_compiler
        try:
            with torchtpu_seam.stand_in_patches():
                yield
        finally:
            _backend.make_backend_compiler = original


@contextlib.contextmanager
def capture_tpu_backend(capture: GraphCapture | None = None) -> Iterator[GraphCapture]:
    """Within it, ``torch.compile(..., backend="tpu")`` is ``capture`` (a new ``GraphCapture`` by default).

    For programs written for TorchTPU, unchanged, on a machine without a TPU (their tensors on
    CPU): Dynamo's registry entry for ``"tpu"`` points at the capture for the duration, then back
    at TorchTPU's ``TpuBackend``. Graphs compiled before entering keep the backend they got.
    """
    capture = GraphCapture() if capture is None else capture
    if not isinstance(capture, GraphCapture):
        raise TypeError(f"capture must be a GraphCapture, got {type(capture).__name__}")
    original = upstream_torch.lookup_backend("tpu")  # loads TorchTPU's backend if not yet registered
    upstream_torch.dynamo_backends()["tpu"] = capture
    try:
        yield capture
    finally:
        upstream_torch.dynamo_backends()["tpu"] = original
