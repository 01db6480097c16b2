"""The XLA graphs of a lazily traced run, per graph: what cut it, compiles, executions, its HLO.

Most sharded training on TPU does not call ``torch.compile``: torch_xla traces lazily and cuts a
graph at ``torch_xla.sync()`` or wherever the code reads a tensor's value on the host. torch_xla
says so itself when started with

- ``PT_XLA_DEBUG_LEVEL=2`` and ``PT_XLA_DEBUG_FILE=F``: every compilation and execution, its
  cause, the graph hash and the Python frames that triggered it (``_debug_file``);
- ``XLA_SAVE_TENSORS_FILE=F`` with ``XLA_SAVE_TENSORS_FMT=hlo`` (and ``XLA_HLO_DEBUG=1`` for
  source lines, ``XLA_DUMP_POST_OPTIMIZATIONS=1`` for the partitioned, optimized module): each
  synced graph's HLO with the same hash and frames (``_save_file``).

torch_xla reads these once, when it starts, so they work only when set before the process
starts (``xlabridge report`` controls its child's environment: ``capture_environment``).
``read_lazy_trace`` joins both files by graph hash into plain records: ``LazyGraph`` per
distinct graph and ``GraphRun`` per execution with its step index (steps end at each
``torch_xla.sync()`` and each ``torch_xla.compile`` region). Dynamo-compiled graphs appear too (their cause says so), so a run
that mixes both is covered.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from xlabridge.pod._debug_file import DebugEvent, parse_debug_file
from xlabridge.pod._save_file import SavedGraph, parse_save_file
from xlabridge.diagnostics.events import Frame, innermost

__all__ = ["GraphCause", "GraphRun", "LazyGraph", "LazyTrace", "build_lazy_trace", "classify_cause", "read_lazy_trace"]


class GraphCause(str, enum.Enum):
    """Why torch_xla compiled or executed a graph."""

    SYNC = "sync"
    """The user's ``torch_xla.sync()`` (``xm.mark_step()``): the end of a step."""
    COMPILE_REGION = "torch-xla-compile"
    """The end of a ``torch_xla.compile`` region: its graph."""
    PENDING_FLUSH = "pending-flush"
    """The work pending before a ``torch_xla.compile`` region, synced as the region starts."""
    HOST_READ = "host-read"
    """A tensor's value was read on the host (``.item()``, ``.cpu()``, ``print``) mid-graph."""
    DYNAMO_COMPILE = "dynamo-compile"
    """torch_xla's Dynamo bridge compiling an FX graph (``torch.compile``)."""
    DYNAMO_EXECUTE = "dynamo-execute"
    """A graph compiled with ``torch.compile``, running."""
    OTHER = "other"


# torch_xla's own words for each cause (2.8 and 2.9; "mark_step" in releases before the rename).
_CAUSE_TEXT = (
    ("user torch_xla.sync", GraphCause.SYNC),
    ("user mark_step", GraphCause.SYNC),
    ("torch_xla.compile clear the pending graph", GraphCause.PENDING_FLUSH),
    ("torch_xla.compile", GraphCause.COMPILE_REGION),
    ("access tensor value", GraphCause.HOST_READ),
    ("dynamo is compiling", GraphCause.DYNAMO_COMPILE),
    ("dynamo is executing", GraphCause.DYNAMO_EXECUTE),
)


# Causes that end a training step (the pending work a torch_xla.compile region syncs first ends nothing).
_STEP_ENDS = frozenset({GraphCause.SYNC, GraphCause.COMPILE_REGION})


def classify_cause(text: str) -> GraphCause:
    """The cause torch_xla's debug text names."""
    return next((cause for words, cause in _CAUSE_TEXT if words in text), GraphCause.OTHER)


def _frames_dict(frames: tuple[Frame, ...]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(frame) for frame in frames]


def _frames(data: list[Mapping[str, Any]]) -> tuple[Frame, ...]:
    return tuple(Frame(**frame) for frame in data)


@dataclasses.dataclass(frozen=True)
class LazyGraph:
    """One distinct XLA graph of the run (by torch_xla's graph hash)."""

    graph_hash: str
    cause: GraphCause
    """The cause of its first execution (or compilation, if it never ran)."""
    cause_text: str
    compiles: int
    executions: int
    trigger: tuple[Frame, ...]
    """The Python stack that first triggered it, outermost first."""
    trigger_truncated: bool
    """torch_xla cut the stack at ``PT_XLA_DEBUG_MAX_FRAME`` frames (innermost kept)."""
    inputs: int
    outputs: int
    hlo: str | None = None
    """The graph's HLO from the save-tensors file (optimized and partitioned when
    ``XLA_DUMP_POST_OPTIMIZATIONS=1``), ``None`` without one."""
    output_shardings: tuple[str, ...] = ()
    sizes_gb: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def user_frame(self, is_user: Callable[[str], bool]) -> Frame | None:
        """Where the user's code cut the graph: the innermost frame of ``trigger`` whose file
        ``is_user`` (the report's user-code rule)."""
        return innermost(self.trigger, is_user)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["cause"] = self.cause.value
        data["trigger"] = _frames_dict(self.trigger)
        data["sizes_gb"] = dict(self.sizes_gb)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LazyGraph:
        values = dict(data)
        values["cause"] = GraphCause(values["cause"])
        values["trigger"] = _frames(values["trigger"])
        values["output_shardings"] = tuple(values.get("output_shardings", ()))
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class GraphRun:
    """One execution of a graph, in the order the process ran them."""

    step: int
    """How many step ends (``torch_xla.sync()`` or ``torch_xla.compile`` region executions)
    came before it: its training step."""
    graph_hash: str
    cause: GraphCause
    compiled: bool = False
    """The graph was compiled just before this execution (a first compile or a recompile)."""


@dataclasses.dataclass(frozen=True)
class LazyTrace:
    graphs: tuple[LazyGraph, ...]
    """Each distinct graph, in the order it first appeared."""
    runs: tuple[GraphRun, ...]

    def graph(self, graph_hash: str) -> LazyGraph:
        return next(graph for graph in self.graphs if graph.graph_hash == graph_hash)

    def to_dict(self) -> dict[str, Any]:
        return {
            "graphs": [graph.to_dict() for graph in self.graphs],
            "runs": [{**dataclasses.asdict(run), "cause": run.cause.value} for run in self.runs],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LazyTrace:
        return cls(
            graphs=tuple(LazyGraph.from_dict(g) for g in data["graphs"]),
            runs=tuple(GraphRun(r["step"], r["graph_hash"], GraphCause(r["cause"]), r.get("compiled", False))
                       for r in data["runs"]),
        )


def _read(path: str | Path | None) -> str:
    return Path(path).read_text(errors="replace") if path is not None else ""


def build_lazy_trace(events: list[DebugEvent], saved: list[SavedGraph]) -> LazyTrace:
    """Join debug events and saved graphs by graph hash (either list may be empty)."""
    order: list[str] = []
    first: dict[str, DebugEvent] = {}
    first_run: dict[str, DebugEvent] = {}
    compiles: dict[str, int] = {}
    executions: dict[str, int] = {}
    sizes: dict[str, dict[str, float]] = {}
    runs: list[GraphRun] = []
    step = 0
    just_compiled: set[str] = set()
    for event in events:
        key = event.graph_hash
        if key not in first:
            order.append(key)
            first[key] = event
        if event.phase == "compile":
            compiles[key] = compiles.get(key, 0) + 1
            sizes.setdefault(key, dict(event.sizes_gb))
            just_compiled.add(key)
        else:
            executions[key] = executions.get(key, 0) + 1
            first_run.setdefault(key, event)
            cause = classify_cause(event.cause)
            runs.append(GraphRun(step, key, cause, compiled=key in just_compiled))
            just_compiled.discard(key)
            if cause in _STEP_ENDS:
                step += 1
    hlo: dict[str, SavedGraph] = {}
    for graph in saved:
        # The last save of a hash wins: with XLA_DUMP_POST_OPTIMIZATIONS a graph's first save
        # can precede its compilation; later ones hold the compiled module.
        hlo[graph.graph_hash] = graph
        if graph.graph_hash not in first:
            order.append(graph.graph_hash)
    graphs = []
    for key in order:
        event = first_run.get(key) or first.get(key)
        saved_graph = hlo.get(key)
        trigger = event.frames if event is not None else saved_graph.frames
        # The save-tensors file keeps the whole stack; the debug file cuts it.
        truncated = event.truncated if event is not None else False
        if saved_graph is not None and truncated and len(saved_graph.frames) > len(trigger):
            trigger, truncated = saved_graph.frames, False
        cause_text = event.cause if event is not None else f"saved by torch_xla ({saved_graph.tag})"
        graphs.append(
            LazyGraph(
                graph_hash=key,
                cause=classify_cause(cause_text) if event is not None else GraphCause.OTHER,
                cause_text=cause_text,
                compiles=compiles.get(key, 0),
                executions=executions.get(key, 0),
                trigger=trigger,
                trigger_truncated=truncated,
                inputs=event.inputs if event is not None else 0,
                outputs=event.outputs if event is not None else 0,
                hlo=saved_graph.hlo if saved_graph is not None else None,
                output_shardings=saved_graph.output_shardings if saved_graph is not None else (),
                sizes_gb=sizes.get(key, {}),
            )
        )
    return LazyTrace(graphs=tuple(graphs), runs=tuple(runs))


def read_lazy_trace(debug_file: str | Path | None = None, save_file: str | Path | None = None) -> LazyTrace:
    """The graphs of a run from its ``PT_XLA_DEBUG_FILE`` and/or its save-tensors file.

    ``save_file`` is the file torch_xla wrote (with the device ordinal it appends: ``F.0``).
    """
    if debug_file is None and save_file is None:
        raise ValueError("read_lazy_trace needs debug_file (PT_XLA_DEBUG_FILE) or save_file (XLA_SAVE_TENSORS_FILE)")
    return build_lazy_trace(parse_debug_file(_read(debug_file)), parse_save_file(_read(save_file)))
