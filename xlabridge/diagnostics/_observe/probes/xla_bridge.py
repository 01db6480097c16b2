"""How torch_xla's Dynamo bridge cuts one FX graph into XLA graphs and CPU nodes.

The bridge does its work at the first call of a compiled graph (``extract_compiled_graph``):
it runs the graph once node by node to find the nodes that leave XLA, partitions the graph
around them, and traces and compiles each XLA partition. It returns the partitioned graph
and keeps no record of what it did, so these are wrapped for the length of that one call
only (``window``), each wrapper calling the original:

* ``torch_xla.core.dynamo_bridge.extract_compiled_graph``: the extraction's interval, and the
  partitioned graph it returns (its CPU nodes get a timer, for the CPU-fallback seconds);
* ``dynamo_bridge.UnsupportedNodesCollector``: a subclass reads torch_xla's fallback counters
  after each node (the bridge clears them before each node, so the ops listed are that
  node's), the only place the ops a node ran on the CPU can be known;
* ``dynamo_bridge.extract_internal``: each XLA partition's FX nodes (the bridge deletes the
  partition modules afterwards) and the lines of its generated code, which the Python stacks
  of its HLO (``XLA_HLO_DEBUG``) end in;
* ``torch_xla._XLAC._get_graph_hash``: each XLA graph's hash, and (``capture_hlo``) its HLO
  module proto, read from the same tensors before the bridge clears their pending graph.

Outside an extraction nothing of torch_xla is replaced. Checked on torch_xla 2.8.1 and 2.9.0.
"""

from __future__ import annotations

import contextlib
import dataclasses
import linecache
import operator
import re
import time
from collections.abc import Iterator
from typing import Any

import torch

from xlabridge._upstream import torch as upstream_torch, torch_xla as upstream_xla
from xlabridge.diagnostics import _frames
from xlabridge.diagnostics._observe import recorder as _recorder
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe.probes import Installation, ProbeInfo, status as _status, xla_metrics

INFO = ProbeInfo(
    name="xla.bridge",
    surface="torch_xla.core.dynamo_bridge.extract_compiled_graph; torch_xla._dynamo.dynamo_bridge."
    "UnsupportedNodesCollector, extract_internal; torch_xla._XLAC._get_graph_hash (during extraction only)",
    checked="torch_xla 2.8.1, 2.9.0",
    patch=True,
    why="the bridge partitions, finds fallback ops and hashes graphs inside one call and returns "
    "only the partitioned graph; no torch_xla API reports any of it",
    sees="how each FX graph is cut (XLA graphs, CPU nodes and their fallback ops), graph hashes, "
    "HLO protos, and the extraction's share of the time split",
)


def op_name(target: Any) -> str:
    """``aten::exp2`` for an aten op, the callable's or method's name otherwise."""
    schema = upstream_torch.op_schema(target)
    if schema is not None:
        return schema.name
    if isinstance(target, str):
        return target
    return getattr(target, "__name__", None) or str(target)


def graph_ops(gm: torch.fx.GraphModule) -> list[str]:
    """The op names of ``gm``'s computing nodes, in order (tuple unpacking left out)."""
    return [
        op_name(node.target)
        for node in gm.graph.nodes
        if node.op in ("call_function", "call_method", "call_module") and node.target is not operator.getitem
    ]


class CpuClock:
    """Seconds spent in the CPU nodes of one partitioned graph, over all its calls."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def timed(self, target: Any, label: str) -> Any:
        """A function calling ``target`` that adds its time to ``seconds``.

        Named so that FX's code generator keeps the object rather than a name of ``target``.
        """
        clock = self

        def run(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return target(*args, **kwargs)
            finally:
                clock.seconds += time.perf_counter() - start

        run.__name__ = run.__qualname__ = f"xlabridge_cpu_timer_{label}"
        run.__module__ = __name__
        return run


@dataclasses.dataclass
class _Partition:
    ops: list[str]
    compiled: Any = None
    hashes: list[str] = dataclasses.field(default_factory=list)
    hlo_files: list[str | None] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Extraction:
    """What the bridge did while extracting bridge graph ``graph``."""

    graph: int
    clock: CpuClock
    capture: list[_recorder.Recorder]
    start: float | None = None
    end: float | None = None
    before: xla_metrics.Snapshot | None = None
    after: xla_metrics.Snapshot | None = None
    fallback_ops: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    partitions: list[_Partition] = dataclasses.field(default_factory=list)
    segments: list[ev.SegmentRecord] = dataclasses.field(default_factory=list)
    segment_partitions: dict[int, _Partition] = dataclasses.field(default_factory=dict)

    def events(self, stamp: dict[str, Any]) -> list[ev.Event]:
        """``partitioned``, ``xla_compile`` and ``xla_graph`` events of this extraction."""
        if self.start is None or self.end is None:
            return []
        at_end = {**stamp, "t": self.end}
        out: list[ev.Event] = [ev.Partitioned(**at_end, graph=self.graph, start=self.start, segments=self.segments)]
        if self.before is not None and self.after is not None:
            delta = self.after.since(self.before)
            if delta.compiles or delta.compile_seconds:
                out.append(ev.XlaCompile(**at_end, graph=self.graph, phase=ev.XlaPhase.EXTRACTION,
                                         count=delta.compiles, seconds=delta.compile_seconds))
        partitions = _recorder.safely(INFO.name, "reading the SPMD device count", spmd_partitions) or 1
        for index, partition in sorted(self.segment_partitions.items()):
            for digest, hlo_file in zip(partition.hashes, partition.hlo_files):
                out.append(ev.XlaGraphSeen(**at_end, graph=self.graph, segment=index, hash=digest,
                                           origin=ev.GraphOrigin.DYNAMO, hlo_file=hlo_file,
                                           num_partitions=partitions))
        return out


def spmd_partitions() -> int:
    """Devices an XLA graph is partitioned over: all of them under SPMD (``xr.use_spmd()``), else 1.

    Public ``torch_xla.runtime`` functions (2.8 and 2.9).
    """
    import torch_xla.runtime as xr

    return xr.global_runtime_device_count() if xr.is_spmd() else 1


def _node_record(node: torch.fx.Node, fallback_ops: dict[str, list[str]]) -> ev.CpuNode:
    return ev.CpuNode(
        name=node.name,
        op=op_name(node.target),
        fallback_ops=tuple(fallback_ops.get(node.name, ())),
        frames=tuple(_frames.from_stack_trace(node.meta.get("stack_trace"))),
    )


def _segments(extraction: Extraction, compiled: Any) -> None:
    """Read the segments off what the bridge returned, and time its CPU nodes."""
    partitions = {id(p.compiled): p for p in extraction.partitions}
    if not isinstance(compiled, torch.fx.GraphModule):
        # one XLA graph, not partitioned (graphs with symbolic sizes take this way)
        extraction.segments = [ev.SegmentRecord(ev.SegmentKind.XLA, tuple(p.ops)) for p in extraction.partitions]
        extraction.segment_partitions = dict(enumerate(extraction.partitions))
        return
    changed = False
    for node in compiled.graph.nodes:
        if node.op not in ("call_function", "call_method", "call_module") or node.target is operator.getitem:
            continue
        index = len(extraction.segments)
        partition = partitions.get(id(node.target))
        if partition is not None:
            extraction.segments.append(ev.SegmentRecord(ev.SegmentKind.XLA, tuple(partition.ops)))
            extraction.segment_partitions[index] = partition
            continue
        record = _node_record(node, extraction.fallback_ops)
        extraction.segments.append(ev.SegmentRecord(ev.SegmentKind.CPU, (record.op,), record))
        if node.op == "call_function":
            node.target = extraction.clock.timed(node.target, f"g{extraction.graph}_{node.name}")
            changed = True
    if changed:
        compiled.recompile()


_ASSIGNS = re.compile(r"^\s*([A-Za-z_]\w*)\s*=")


def _fx_code(extraction: Extraction, gm: torch.fx.GraphModule) -> None:
    """Emit the lines of ``gm``'s generated code that run a node with a stack trace: stacks
    recorded while it is traced (``XLA_HLO_DEBUG``) end in that code, not in the user's."""
    filename = gm.forward.__code__.co_filename
    nodes = {node.name: node for node in gm.graph.nodes}
    lines = []
    for lineno, text in enumerate(linecache.getlines(filename), start=1):
        match = _ASSIGNS.match(text)
        node = nodes.get(match.group(1)) if match else None
        frames = _frames.from_stack_trace(node.meta.get("stack_trace")) if node is not None else []
        if frames:
            lines.append(ev.FxLine(lineno, node.name, tuple(frames)))
    _recorder.emit(ev.FxCode(**_recorder.stamp(), filename=filename, graph=extraction.graph, lines=lines))


def _save_hlo(extraction: Extraction, tensors: Any, number: int) -> str | None:
    if not extraction.capture:
        return None
    proto = upstream_xla.tensors_hlo_proto(list(tensors))
    name = None
    for recorder in extraction.capture:
        path, name = recorder.hlo_path(f"{_recorder.stamp()['pid']}-g{extraction.graph}-{number}.hlo.pb")
        path.write_bytes(proto)
    return name


def _install_window(installation: Installation, extraction: Extraction) -> None:
    import torch_xla.core.dynamo_bridge as core_bridge

    dynamo_bridge = upstream_xla.dynamo_bridge()

    def wrap_extract_compiled_graph(original: Any) -> Any:
        def extract_compiled_graph(xla_model: Any, xla_args: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(xla_model, torch.fx.GraphModule):
                # the graph the bridge runs while unpartitioned: stacks of its executions end in its code
                _recorder.safely(INFO.name, "reading the graph's generated code", _fx_code, extraction, xla_model)
            extraction.start, extraction.before = time.monotonic(), xla_metrics.Snapshot.take()
            compiled = original(xla_model, xla_args, *args, **kwargs)
            extraction.end, extraction.after = time.monotonic(), xla_metrics.Snapshot.take()
            _recorder.safely(INFO.name, "reading the partitioned graph", _segments, extraction, compiled)
            return compiled

        return extract_compiled_graph

    def wrap_collector(original: Any) -> Any:
        class RecordingUnsupportedNodesCollector(original):
            def run_node(self, node: torch.fx.Node) -> Any:
                result = super().run_node(node)
                fell_back = _recorder.safely(INFO.name, "reading fallback ops", xla_metrics.fallback_ops)
                if fell_back:
                    extraction.fallback_ops[node.name] = fell_back
                return result

        return RecordingUnsupportedNodesCollector

    def wrap_extract_internal(original: Any) -> Any:
        def extract_internal(xla_model: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
            partition = _Partition(ops=_recorder.safely(INFO.name, "reading a partition", graph_ops, xla_model) or [])
            _recorder.safely(INFO.name, "reading a partition's generated code", _fx_code, extraction, xla_model)
            extraction.partitions.append(partition)
            partition.compiled = original(xla_model, *args, **kwargs)
            return partition.compiled

        return extract_internal

    def wrap_graph_hash(original: Any) -> Any:
        def _get_graph_hash(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            digest = original(tensors, *args, **kwargs)
            if extraction.partitions:
                partition = extraction.partitions[-1]
                number = sum(len(p.hashes) for p in extraction.partitions)
                partition.hashes.append(bytes(digest).hex())
                partition.hlo_files.append(
                    _recorder.safely(INFO.name, "saving an HLO proto", _save_hlo, extraction, tensors, number)
                )
            return digest

        return _get_graph_hash

    installation.replace(core_bridge, "extract_compiled_graph", wrap_extract_compiled_graph)
    installation.replace(dynamo_bridge, "UnsupportedNodesCollector", wrap_collector)
    installation.replace(dynamo_bridge, "extract_internal", wrap_extract_internal)
    installation.replace(upstream_xla.xlac(), "_get_graph_hash", wrap_graph_hash)


_EXTRACTING = [0]
"""Extractions under way (nested when a graph's first call compiles another's)."""


def extracting() -> bool:
    """Whether the bridge is extracting a graph now (its first call)."""
    return _EXTRACTING[0] > 0


@contextlib.contextmanager
def window(extraction: Extraction) -> Iterator[bool]:
    """The bridge observed for one call; yields whether the wrappers are in place."""
    installation = Installation()
    _EXTRACTING[0] += 1
    try:
        try:
            _install_window(installation, extraction)
        except Exception as error:  # the bridge changed: the call runs unobserved, the report says so
            installation.restore()
            _status.unavailable(INFO, f"{type(error).__name__}: {error}")
            yield False
            return
        try:
            yield True
        finally:
            installation.restore()
    finally:
        _EXTRACTING[0] -= 1


def check() -> None:
    """Raise if the names the window wraps are gone (run when torch_xla is imported)."""
    import torch_xla.core.dynamo_bridge as core_bridge

    dynamo_bridge = upstream_xla.dynamo_bridge()
    for owner, name in (
        (core_bridge, "extract_compiled_graph"),
        (dynamo_bridge, "UnsupportedNodesCollector"),
        (dynamo_bridge, "extract_internal"),
        (upstream_xla.xlac(), "_get_graph_hash"),
    ):
        getattr(owner, name)
