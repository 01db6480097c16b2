"""The diagnostics report: plain data built from events, and its JSON form.

``Report.from_events(events)`` is the only way a report is made: from the events of one
``diagnose()`` block, or of every process of an ``xlabridge report`` run (process ids kept
apart). Causes, suggestions and which frame is the user's are decided here, from the raw
facts in the events, so a newer xlabridge re-reads an older log with its newer knowledge.

The JSON form is versioned by ``SCHEMA`` (``xlabridge.report/3``); ``docs/report-schema.md``
documents every field and is generated from this module and ``events.py``
(``python -m xlabridge.diagnostics._schema_doc``). ``str(report)`` and ``report.to_html(path)``
render it through ``xlabridge.diagnostics.views``.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from xlabridge.diagnostics import _pod_report, _timesplit, causes
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._frames import UNKNOWN, UserCodeRule
from xlabridge.diagnostics.events import _field

SCHEMA = "xlabridge.report/3"
_READABLE_SCHEMAS = ("xlabridge.report/2", SCHEMA)
"""Schemas ``from_dict`` reads: /3 added the TPU view (``tpu``); a /2 report has none."""

TimeSplit = _timesplit.TimeSplit


@dataclasses.dataclass
class DynamoGraph:
    """One FX graph Dynamo captured and handed to a backend."""

    compile_id: str = _field("Dynamo compile id (``frame/recompile``)")
    op_count: int = _field("``call_function`` nodes (``torch._dynamo.explain``'s ``ops_per_graph`` length)")
    backend: str = _field("the backend it was handed to")
    path: str = _field("for ``xlabridge``: ``forward-only``, ``aot-autograd`` or ``inductor``; else empty", "")
    path_reason: str = _field("why that path", "")
    ends_in_break: bool = _field("whether it ends at a Dynamo graph break", False)
    tracing_seconds: float | None = _field("Dynamo's compile time for its frame (tracing and the backend's compile call)", None)
    filename: str = _field("user source file of its first op", UNKNOWN.filename)
    lineno: int = _field("line in ``filename``", 0)
    function: str = _field("function of that line", UNKNOWN.function)
    pid: int = _field("process that compiled it", 0)


@dataclasses.dataclass
class DynamoBreak:
    """Dynamo stopped capturing: the FX graph before this point ends here."""

    reason: str = _field("first line of Dynamo's reason")
    category: str = _field("the matching row of ``causes.DYNAMO_CAUSES``")
    filename: str = _field("user source file of the break (innermost user frame)")
    lineno: int = _field("line in ``filename``")
    function: str = _field("function of that line")
    suggestion: str = _field("how to avoid the break")
    detail: str = _field("Dynamo's full reason (explanation, hints)", "")
    compile_id: str = _field("compile id of the graph the break ends", "")
    pid: int = _field("process", 0)


@dataclasses.dataclass
class Recompile:
    """Dynamo compiled a frame again because a guard of an earlier compilation failed."""

    reason: str = _field("the guard failure Dynamo names (``frame/n: guard``); first line")
    filename: str = _field("user location: the recompiled code when it is the user's, else the user's caller")
    lineno: int = _field("line in ``filename``")
    function: str = _field("function of that line")
    category: str = _field("the matching row of ``causes.RECOMPILE_CAUSES``", "other")
    suggestion: str = _field("how to avoid it", "")
    compile_id: str = _field("compile id of the new compilation", "")
    code: str = _field("the recompiled code object, ``file:line (function)``", "")
    pid: int = _field("process", 0)


@dataclasses.dataclass
class RecompileGroup:
    """The recompiles of one user location, grouped."""

    filename: str = _field("user location")
    lineno: int = _field("line")
    function: str = _field("function")
    count: int = _field("recompiles there")
    first_reason: str = _field("reason of the first")
    last_reason: str = _field("reason of the last")
    category: str = _field("cause of the last")


@dataclasses.dataclass
class Segment:
    """A run of consecutive FX nodes executed one way: one XLA graph, or one node on the CPU."""

    kind: str = _field("``xla`` (one XLA graph) or ``cpu`` (one node run on the host)")
    ops: list[str] = _field("op names, in order", factory=list)


@dataclasses.dataclass
class XlaGraph:
    """One FX graph as torch_xla's Dynamo bridge compiled it, and what each call costs."""

    index: int = _field("position in ``hlo.graphs``; ``HloBreak.graph`` refers to it")
    compile_id: str = _field("Dynamo compile id it belongs to")
    role: str = _field("``forward`` or ``backward`` (AOTAutograd's, recognised by its tangents)")
    fx_ops: int = _field("call nodes in the graph the bridge received")
    xla_graphs: int = _field("XLA graphs the bridge cut it into (``1``: not split)")
    compiles: int = _field("XLA compilations of it (extraction and later calls)", 0)
    compile_seconds: float = _field("their time", 0.0)
    extraction_seconds: float | None = _field("the bridge's extraction at the first call (partitioning, tracing, compiling)", None)
    executions_per_call: int = _field("XLA graph executions per call (last fully measured call)", 0)
    transfers_per_call: int = _field("host-device transfers per call, both ways (last fully measured call)", 0)
    bytes_per_call: int = _field("bytes moved per call, both ways (last fully measured call)", 0)
    seconds_per_call: float | None = _field("mean call time after the first call (first call if it is the only one)", None)
    cpu_fallback_seconds_per_call: float = _field("time in CPU nodes per call (same calls)", 0.0)
    calls: int = _field("calls while observed", 0)
    segments: list[Segment] = _field("its nodes in execution order, grouped as run", factory=list)
    hashes: list[str] = _field("torch_xla graph hash of each XLA segment, in order", factory=list)
    hlo_files: list[str | None] = _field("HLO proto file of each hash (``capture_hlo``), relative to the log", factory=list)
    graph: int = _field("the process's bridge graph number", 0)
    pid: int = _field("process", 0)


@dataclasses.dataclass
class HloBreak:
    """One FX node that ran outside XLA, cutting its FX graph into several XLA graphs."""

    op: str = _field("aten op name: the fallback op, or the node's op when it touched host tensors")
    category: str = _field("``cpu-fallback``, ``host-transfer`` or ``host-tensor`` (``causes.HLO_CAUSES``)")
    filename: str = _field("user source line of the node")
    lineno: int = _field("line")
    function: str = _field("function")
    suggestion: str = _field("how to keep it in XLA")
    graph: int = _field("``index`` of its ``XlaGraph``", 0)
    node: str = _field("the FX node's name", "")


@dataclasses.dataclass
class ProbeReport:
    """What one probe could see."""

    name: str = _field("probe name")
    state: str = _field("``ok``, ``unavailable``, ``silent`` or ``failed``")
    reason: str = _field("why, when not ``ok``", "")
    surface: str = _field("the upstream names it reads or wraps", "")
    patch: bool = _field("whether it wraps an upstream function", False)
    sees: str = _field("what the report lacks when it cannot see", "")


@dataclasses.dataclass
class Finding:
    """Something the report concludes from the events, worth acting on."""

    kind: str = _field("``cpu-only-graph``, ``probe``, ``cache``, ``compiled-before-observation``, "
                       "``tpu-does-not-fit``, ``tpu-refused``")
    message: str = _field("what it means and what to do")
    graph: int | None = _field("``XlaGraph.index`` it is about, if any", None)


@dataclasses.dataclass
class TpuGraph:
    """One distinct XLA graph of the run as XLA:TPU compiled it (compiled here, not run)."""

    hash: str = _field("torch_xla's graph hash (``XlaGraph.hashes``)")
    origin: str = _field("``dynamo`` (from a compiled FX graph) or ``lazy``", "dynamo")
    xla_graphs: list[int] = _field("``XlaGraph.index`` of each FX graph it belongs to", factory=list)
    pids: list[int] = _field("processes that ran it", factory=list)
    num_partitions: int = _field("devices it is partitioned over (SPMD), else 1", 1)
    compiled: bool = _field("whether libtpu compiled it (false: see ``error``)", False)
    error: str = _field("why not: XLA:TPU's refusal, a dead worker, no HLO captured", "")
    kernels: int | None = _field("kernels in the optimized TPU HLO (``xlabridge.hlo.parse_kernels``)", None)
    kernel_names: list[str] = _field("their names", factory=list)
    hbm_bytes: int | None = _field(
        "HBM one device needs: arguments + outputs - aliased + temporaries + code", None)
    hbm_capacity_bytes: int | None = _field("one device's HBM (the chip's; half of a v4 chip per TensorCore)", None)
    argument_bytes: int | None = _field("of which arguments", None)
    output_bytes: int | None = _field("outputs", None)
    alias_bytes: int | None = _field("outputs written in place of donated arguments (subtracted)", None)
    temp_bytes: int | None = _field("temporaries (peak)", None)
    code_bytes: int | None = _field("generated code", None)
    fits: bool | None = _field("whether it fits one device's HBM (null: not compiled)", None)
    out_of_memory: str | None = _field("XLA:TPU's message when it ran out of HBM while compiling", None)
    compile_seconds: float | None = _field("libtpu's compile time for it, on this machine", None)
    flops: float | None = _field("XLA cost analysis: floating-point operations per run, per device", None)
    bytes_accessed: float | None = _field("XLA cost analysis: bytes read and written per run, per device", None)
    cost_model_seconds: float | None = _field(
        "XLA's cost-model estimate (``optimal_seconds``; see ``xlabridge.tpu.result.COST_MODEL_NOTE``)", None)
    hbm_seconds: float | None = _field("``bytes_accessed`` at the chip's HBM bandwidth: a floor, not a prediction", None)
    devices: int | None = _field("devices of the compiled program", None)
    chips: int | None = _field("chips they sit on", None)
    collectives: list[dict[str, Any]] = _field(
        "collectives as XLA:TPU scheduled them, per kind: ``kind``, ``count``, ``bytes`` per device per run",
        factory=list)
    tpu_hlo_file: str | None = _field("the optimized TPU HLO text, relative to the event logs", None)
    filename: str = _field("user source line of the graph (its FX graph's first op, or a lazy graph's trigger)",
                           UNKNOWN.filename)
    lineno: int = _field("line", 0)
    function: str = _field("function", UNKNOWN.function)


@dataclasses.dataclass
class TpuView:
    """Every distinct XLA graph of the run compiled for one TPU topology after the run."""

    topology: str = _field("libtpu topology name (``v5e:2x2``)")
    generation: str = _field("TPU generation", "")
    libtpu_version: str = _field("libtpu that compiled", "")
    jax_version: str = _field("JAX that drove it", "")
    label: str = _field("what the figures are: compiled for TPU by libtpu on this machine, not run", "")
    seconds: float = _field("wall time of the TPU compiles (after the run; worker start-up included)", 0.0)
    compile_seconds: float = _field("libtpu's compile time summed over the graphs", 0.0)
    hbm_capacity_bytes: int | None = _field("one device's HBM", None)
    graphs: list[TpuGraph] = _field("one row per distinct XLA graph", factory=list)
    error: str = _field("why nothing was compiled (libtpu missing, the worker did not start)", "")


@dataclasses.dataclass
class RunGraph:
    """One distinct XLA graph a process ran, as torch_xla's debug file tells it (``--pod``):
    lazily traced graphs, cut at a sync or a host read, and Dynamo-compiled ones."""

    hash: str = _field("torch_xla's graph hash")
    origin: str = _field("``lazy`` (traced outside ``torch.compile``) or ``dynamo``")
    cause: str = _field("what cut it: ``sync``, ``torch-xla-compile``, ``pending-flush``, ``host-read``, "
                        "``dynamo-compile``, ``dynamo-execute`` or ``other`` (``xlabridge.pod.GraphCause``)")
    cause_text: str = _field("torch_xla's words for it")
    compiles: int = _field("XLA compilations of it")
    executions: int = _field("its executions")
    filename: str = _field("user source line that cut it (the sync, the host read, the compiled call)")
    lineno: int = _field("line")
    function: str = _field("function")
    module: str = _field("the module XLA compiled for it, in XLA's dump", "")
    num_partitions: int = _field("devices it is partitioned over (SPMD)", 1)
    collectives: int = _field("collectives per run of it", 0)
    collective_bytes: int = _field("their bytes per run, per device", 0)
    pid: int = _field("process", 0)
    process: str = _field("``rank N`` where known, else ``pid N``", "")


@dataclasses.dataclass
class CollectiveGroup:
    """The collectives of one XLA graph of one kind, cause and user line, per run of the graph."""

    hash: str = _field("the graph's hash (``RunGraph.hash``)")
    module: str = _field("its compiled module's name")
    module_id: int = _field("its number in the process's XLA dump (``pod-<pid>/xla_dump/module_NNNN.*``)")
    kind: str = _field("``all-gather``, ``all-reduce``, ``reduce-scatter``, ``all-to-all``, ``collective-permute``...")
    count: int = _field("collectives per run of the graph (loop trip counts applied)")
    bytes: int = _field("bytes per run, per device: the whole tensor each works on (``xlabridge.pod.collectives``)")
    replica_groups: list[list[int]] = _field("device groups of the first (empty: all devices)", factory=list)
    category: str = _field("the matching row of ``xlabridge.pod.COLLECTIVE_CAUSES``", "other")
    avoidable: bool = _field("whether that cause is usually avoidable", False)
    suggestion: str = _field("what to change", "")
    filename: str = _field("user source line that produced the tensor", UNKNOWN.filename)
    lineno: int = _field("line", 0)
    function: str = _field("function", UNKNOWN.function)
    op_type: str = _field("the op that needed it (HLO metadata)", "")
    unknown_executions: int = _field("collectives in loops of unknown trip count, counted once", 0)
    pid: int = _field("process", 0)


@dataclasses.dataclass
class ProcessDivergence:
    """At one step and position the processes ran different graphs."""

    step: int = _field("training step (syncs before it)")
    position: int = _field("index of the graph among the step's executions")
    graphs: dict[str, str | None] = _field("process → graph hash it ran there (``null``: none)", factory=dict)
    differences: dict[str, list[str]] = _field(
        "process → source lines of its graph that the others' lack (HLO metadata and user frames)", factory=dict)


@dataclasses.dataclass
class UnevenCompile:
    """The same graph at the same place compiled on some processes only (the others wait)."""

    step: int = _field("training step")
    position: int = _field("index among the step's executions")
    hash: str = _field("the graph")
    compiled_on: list[str] = _field("processes that compiled it there", factory=list)
    cached_on: list[str] = _field("processes that had it compiled", factory=list)


@dataclasses.dataclass
class Report:
    """Everything observed over one ``explain`` call, ``diagnose`` block or CLI run."""

    environment: dict[str, Any] = _field("versions, PJRT device, TPU type, argv, compilation cache", factory=dict)
    processes: list[dict[str, Any]] = _field("``pid``, ``rank``, ``world``, ``wall_seconds`` of each process", factory=list)
    probes: list[ProbeReport] = _field("each probe's state", factory=list)
    time: list[TimeSplit] = _field("per process: wall seconds split into exclusive shares", factory=list)
    dynamo_graphs: list[DynamoGraph] = _field("FX graphs Dynamo captured", factory=list)
    dynamo_breaks: list[DynamoBreak] = _field("Dynamo graph breaks", factory=list)
    recompiles: list[Recompile] = _field("recompilations", factory=list)
    recompile_groups: list[RecompileGroup] = _field("recompilations grouped by user location", factory=list)
    xla_graphs: list[XlaGraph] = _field("FX graphs through torch_xla's bridge", factory=list)
    hlo_breaks: list[HloBreak] = _field("FX nodes that ran outside XLA", factory=list)
    tpu: TpuView | None = _field("the TPU view (``--tpu`` / ``tpu=``): each XLA graph compiled for a TPU", None)
    run_graphs: list[RunGraph] = _field("XLA graphs the processes ran, lazily traced ones too (``--pod``)", factory=list)
    collectives: list[CollectiveGroup] = _field("collectives per XLA graph, grouped (``--pod``)", factory=list)
    divergences: list[ProcessDivergence] = _field("places where processes ran different graphs", factory=list)
    uneven_compiles: list[UnevenCompile] = _field("compiles some processes only did", factory=list)
    findings: list[Finding] = _field("conclusions worth acting on", factory=list)
    warnings: list[str] = _field("what the diagnostics could not observe, in plain words", factory=list)

    @property
    def graph_count(self) -> int:
        """Dynamo FX graphs compiled (``torch._dynamo.explain``'s ``graph_count``)."""
        return len(self.dynamo_graphs)

    @property
    def break_count(self) -> int:
        """Dynamo graph breaks (``len(torch._dynamo.explain(...).break_reasons)``)."""
        return len(self.dynamo_breaks)

    @property
    def hlo_break_count(self) -> int:
        """FX nodes that ran outside XLA, over all FX graphs."""
        return len(self.hlo_breaks)

    # ------------------------------------------------------------------ building

    @classmethod
    def from_events(cls, events: Iterable[ev.Event]) -> Report:
        """The report of ``events`` (one process's or several's, in any interleaving)."""
        by_pid: dict[int, list[ev.Event]] = defaultdict(list)
        tpu_events: list[ev.Event] = []
        for event in events:
            # TPU compiles are made after the run, by whichever process compiled them: not a
            # process of the run.
            (tpu_events if isinstance(event, (ev.TpuCompiled, ev.TpuPass)) else by_pid[event.pid]).append(event)
        report = cls()
        builders = {}
        for pid, process_events in by_pid.items():
            builders[pid] = _ProcessBuilder(report, pid, process_events)
            builders[pid].build()
        report.recompile_groups = _group_recompiles(report.recompiles)
        if tpu_events:
            _TpuBuilder(report, builders, tpu_events).build()
        _across_processes(report, list(builders.values()))
        return report

    # ------------------------------------------------------------------ JSON

    def to_dict(self) -> dict[str, Any]:
        """The report in the shape of schema ``xlabridge.report/3``."""
        rows = dataclasses.asdict
        return {
            "schema": SCHEMA,
            "environment": dict(self.environment),
            "processes": [dict(p) for p in self.processes],
            "probes": [rows(p) for p in self.probes],
            "time": [rows(t) for t in self.time],
            "dynamo": {
                "graph_count": self.graph_count,
                "break_count": self.break_count,
                "graphs": [rows(g) for g in self.dynamo_graphs],
                "breaks": [rows(b) for b in self.dynamo_breaks],
                "recompiles": [rows(r) for r in self.recompiles],
                "recompile_groups": [rows(g) for g in self.recompile_groups],
            },
            "hlo": {
                "break_count": self.hlo_break_count,
                "graphs": [rows(g) for g in self.xla_graphs],
                "breaks": [rows(b) for b in self.hlo_breaks],
            },
            "tpu": rows(self.tpu) if self.tpu is not None else None,
            "pod": {
                "graphs": [rows(g) for g in self.run_graphs],
                "collectives": [rows(c) for c in self.collectives],
                "divergences": [rows(d) for d in self.divergences],
                "uneven_compiles": [rows(u) for u in self.uneven_compiles],
            },
            "findings": [rows(f) for f in self.findings],
            "warnings": list(self.warnings),
        }

    def to_json(self, path: str | Path | None = None, *, indent: int = 2) -> str:
        """The JSON text of ``to_dict()``; also written to ``path`` when one is given."""
        text = json.dumps(self.to_dict(), indent=indent)
        if path is not None:
            Path(path).write_text(text + "\n", encoding="utf-8")
        return text

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        """Read a report back from ``to_dict()``'s form (for example, one made on a TPU VM)."""
        if data.get("schema") not in _READABLE_SCHEMAS:
            raise ValueError(f"report 'schema' must be one of {_READABLE_SCHEMAS}, got {data.get('schema')!r}")
        dynamo, hlo = data["dynamo"], data["hlo"]

        def build(kind: type, rows: Sequence[dict[str, Any]]) -> list:
            names = {f.name for f in dataclasses.fields(kind)}
            return [kind(**{k: v for k, v in row.items() if k in names}) for row in rows]

        graphs = build(XlaGraph, hlo["graphs"])
        for graph in graphs:
            graph.segments = build(Segment, graph.segments)  # type: ignore[arg-type]
        tpu = None
        if data.get("tpu"):
            tpu = build(TpuView, [data["tpu"]])[0]
            tpu.graphs = build(TpuGraph, tpu.graphs)  # type: ignore[arg-type]
        return cls(
            tpu=tpu,
            environment=dict(data.get("environment", {})),
            processes=[dict(p) for p in data.get("processes", [])],
            probes=build(ProbeReport, data.get("probes", [])),
            time=build(TimeSplit, data.get("time", [])),
            dynamo_graphs=build(DynamoGraph, dynamo.get("graphs", [])),
            dynamo_breaks=build(DynamoBreak, dynamo["breaks"]),
            recompiles=build(Recompile, dynamo["recompiles"]),
            recompile_groups=build(RecompileGroup, dynamo.get("recompile_groups", [])),
            xla_graphs=graphs,
            hlo_breaks=build(HloBreak, hlo["breaks"]),
            run_graphs=build(RunGraph, data.get("pod", {}).get("graphs", [])),
            collectives=build(CollectiveGroup, data.get("pod", {}).get("collectives", [])),
            divergences=build(ProcessDivergence, data.get("pod", {}).get("divergences", [])),
            uneven_compiles=build(UnevenCompile, data.get("pod", {}).get("uneven_compiles", [])),
            findings=build(Finding, data.get("findings", [])),
            warnings=list(data.get("warnings", [])),
        )

    # ------------------------------------------------------------------ views

    def __str__(self) -> str:
        from xlabridge.diagnostics.views import text

        return text.render(self)

    def to_html(self, path: str | Path) -> Path:
        """Write a self-contained HTML page with a picture of how each FX graph is split."""
        from xlabridge.diagnostics.views import html

        return html.write(self, Path(path))


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


class _ProcessBuilder:
    """Adds one process's events to a report."""

    def __init__(self, report: Report, pid: int, events: list[ev.Event]) -> None:
        self.report, self.pid, self.events = report, pid, events
        start = next((e for e in events if isinstance(e, ev.ProcessStart)), None)
        end = next((e for e in reversed(events) if isinstance(e, ev.ProcessEnd)), None)
        self.start = start
        program = (end.main_file if end else None) or (start.main_file if start else None)
        self.rule = UserCodeRule.of(start.framework_paths, program) if start else UserCodeRule(())

    def of(self, kind: type[ev.Event]) -> list:
        return [e for e in self.events if isinstance(e, kind)]

    def build(self) -> None:
        self._environment()
        self._probes()
        split = _timesplit.split(self.events)
        if split is not None:
            self.report.time.append(split)
        self._dynamo()
        self._recompiles()
        self._xla_graphs()
        self._run_graphs()

    def _where(self, frames: Sequence[ev.Frame]) -> dict[str, Any]:
        frame = self.rule.innermost(frames)
        return {"filename": frame.filename, "lineno": frame.lineno, "function": frame.function}

    def _environment(self) -> None:
        end = next((e for e in reversed(self.events) if isinstance(e, ev.ProcessEnd)), None)
        environment = (end.environment if end and end.environment else None) or (self.start.environment if self.start else {})
        if not self.report.environment:
            self.report.environment = dict(environment)
        first = self.events[0]
        self.report.processes.append({
            "pid": self.pid, "rank": first.rank, "world": first.world,
            "wall_seconds": (end.t - end.start) if end else None,
        })
        cache = environment.get("compilation_cache") or {}
        if cache.get("state") not in (None, "off", "enabled"):
            self.report.findings.append(Finding(
                "cache", f"persistent cache at {cache.get('directory')}: {cache.get('state')}: {cache.get('reason')}"
            ))

    def _probes(self) -> None:
        statuses = self.of(ev.ProbeStatus)
        for status in statuses:
            if status.state == ev.ProbeState.FAILED and status.reason not in self.report.warnings:
                self.report.warnings.append(status.reason)
        order = {ev.ProbeState.OK: 0, ev.ProbeState.FAILED: 1, ev.ProbeState.SILENT: 2, ev.ProbeState.UNAVAILABLE: 3}
        worst: dict[str, ev.ProbeStatus] = {}
        for status in statuses:
            current = worst.get(status.probe)
            if current is None or order[status.state] > order[current.state] or (
                status.state == current.state and not current.surface
            ):
                worst[status.probe] = status if status.surface or current is None else dataclasses.replace(
                    status, surface=current.surface, patch=current.patch, sees=current.sees)
        known = {p.name: p for p in self.report.probes}
        for name, status in worst.items():
            entry = ProbeReport(name, status.state.value, status.reason if status.state != ev.ProbeState.FAILED
                                else "", status.surface, status.patch, status.sees)
            if name in known:
                if order[ev.ProbeState(known[name].state)] >= order[status.state]:
                    continue
                self.report.probes.remove(known[name])
            self.report.probes.append(entry)
            if status.state in (ev.ProbeState.UNAVAILABLE, ev.ProbeState.SILENT):
                message = f"probe {name} is {status.state.value}: {status.reason}; the report lacks {status.sees}"
                if message not in self.report.warnings:
                    self.report.warnings.append(message)
                    self.report.findings.append(Finding("probe", message))

    def _callers(self, compile_id: str) -> list[ev.Frame]:
        """The stack that called into the compiled code of ``compile_id`` (its frame's callers)."""
        return self.callers.get(compile_id.split("/")[0], [])

    def _dynamo(self) -> None:
        self.callers: dict[str, list[ev.Frame]] = {}
        for compile_event in self.of(ev.DynamoCompile):
            if compile_event.trigger == "dynamo" and compile_event.caller_frames:
                self.callers.setdefault(compile_event.compile_id.split("/")[0], compile_event.caller_frames)
        paths = {e.compile_id: e for e in self.of(ev.CompilePath)}
        tracing: dict[str, float] = defaultdict(float)
        for compile_event in self.of(ev.DynamoCompile):
            if compile_event.trigger == "dynamo":
                tracing[compile_event.compile_id] += compile_event.t - compile_event.start
        breaks = {e.compile_id: e for e in self.of(ev.GraphBreak)}
        for captured in self.of(ev.GraphCaptured):
            path = paths.get(captured.compile_id)
            self.report.dynamo_graphs.append(DynamoGraph(
                compile_id=captured.compile_id, op_count=captured.op_count, backend=captured.backend,
                path=path.path if path else "", path_reason=path.reason if path else "",
                ends_in_break=captured.ends_in_break, tracing_seconds=tracing.get(captured.compile_id),
                pid=self.pid, **self._where(self._callers(captured.compile_id) + captured.frames),
            ))
            graph_break = breaks.get(captured.compile_id)
            if captured.ends_in_break and graph_break is not None:
                cause = causes.classify_dynamo_break(graph_break.reason)
                self.report.dynamo_breaks.append(DynamoBreak(
                    reason=_first_line(graph_break.reason), category=cause.category,
                    suggestion=cause.suggestion, detail=graph_break.reason.strip(),
                    compile_id=captured.compile_id, pid=self.pid,
                    **self._where(self._callers(captured.compile_id) + graph_break.frames),
                ))

    def _recompiles(self) -> None:
        callers = {e.compile_id: e.caller_frames for e in self.of(ev.DynamoCompile) if e.trigger == "dynamo"}
        for recompile in self.of(ev.Recompile):
            code = recompile.code or UNKNOWN
            where = self._where(callers.get(recompile.compile_id, self._callers(recompile.compile_id)) + [code])
            if where["filename"] == UNKNOWN.filename:
                where = {"filename": code.filename, "lineno": code.lineno, "function": code.function}
            cause = causes.classify_recompile(recompile.reason)
            reason = _first_line(recompile.reason)
            if not causes.guard_text(recompile.reason).strip():
                reason = f"{reason.rstrip(': ')}: no guard failed (compiled before for another backend)"
            self.report.recompiles.append(Recompile(
                reason=reason, category=cause.category, suggestion=cause.suggestion, compile_id=recompile.compile_id,
                code=f"{code.filename}:{code.lineno} ({code.function})", pid=self.pid, **where,
            ))

    def _xla_graphs(self) -> None:
        partitions = {e.graph: e for e in self.of(ev.Partitioned)}
        called: dict[int, list[ev.GraphCalled]] = defaultdict(list)
        for call in self.of(ev.GraphCalled):
            called[call.graph].append(call)
        summed: dict[int, list[ev.GraphCalls]] = defaultdict(list)
        for calls in self.of(ev.GraphCalls):
            summed[calls.graph].append(calls)
        compiles: dict[int, list[ev.XlaCompile]] = defaultdict(list)
        for compile_event in self.of(ev.XlaCompile):
            if compile_event.graph is not None:
                compiles[compile_event.graph].append(compile_event)
        seen: dict[int, list[ev.XlaGraphSeen]] = defaultdict(list)
        for graph_seen in self.of(ev.XlaGraphSeen):
            if graph_seen.graph is not None:
                seen[graph_seen.graph].append(graph_seen)
        for bridge in self.of(ev.BridgeGraph):
            index = len(self.report.xla_graphs)
            partition = partitions.get(bridge.graph)
            segments = partition.segments if partition else []
            measured = sorted(called.get(bridge.graph, []), key=lambda c: c.call)
            later = summed.get(bridge.graph, [])
            calls = len(measured) + sum(s.calls for s in later)
            steady_measured = [c for c in measured if c.call > 1] or measured
            steady_calls = len(steady_measured) + sum(s.calls for s in later)
            steady_seconds = sum(c.t - c.start for c in steady_measured) + sum(s.seconds for s in later)
            steady_cpu = sum(c.cpu_fallback_seconds for c in steady_measured) + sum(s.cpu_fallback_seconds for s in later)
            last = measured[-1] if measured else None
            graph_compiles = compiles.get(bridge.graph, [])
            hashes = sorted(seen.get(bridge.graph, []), key=lambda s: s.segment)
            self.report.xla_graphs.append(XlaGraph(
                index=index, compile_id=bridge.compile_id, role=bridge.role, fx_ops=bridge.fx_ops,
                xla_graphs=sum(s.kind == ev.SegmentKind.XLA for s in segments),
                compiles=sum(c.count for c in graph_compiles),
                compile_seconds=sum(c.seconds for c in graph_compiles),
                extraction_seconds=(partition.t - partition.start) if partition else None,
                executions_per_call=last.executions if last else 0,
                transfers_per_call=(last.transfers_to_device + last.transfers_from_device) if last else 0,
                bytes_per_call=(last.bytes_to_device + last.bytes_from_device) if last else 0,
                seconds_per_call=steady_seconds / steady_calls if steady_calls else None,
                cpu_fallback_seconds_per_call=steady_cpu / steady_calls if steady_calls else 0.0,
                calls=calls,
                segments=[Segment(s.kind.value, list(s.ops)) for s in segments],
                hashes=[h.hash for h in hashes], hlo_files=[h.hlo_file for h in hashes],
                graph=bridge.graph, pid=self.pid,
            ))
            for segment in segments:
                if segment.kind != ev.SegmentKind.CPU or segment.node is None:
                    continue
                node = segment.node
                fell_back = bool(node.fallback_ops)
                op = node.fallback_ops[0] if fell_back else node.op
                cause = causes.classify_hlo_break(op, fell_back=fell_back)
                self.report.hlo_breaks.append(HloBreak(
                    op=op, category=cause.category, suggestion=cause.suggestion, graph=index, node=node.name,
                    **self._where(self._callers(bridge.compile_id) + list(node.frames)),
                ))
        self._cpu_only_findings()

    def _run_graphs(self) -> None:
        """The graphs torch_xla's debug file recorded, and the collectives XLA compiled into each."""
        from xlabridge.pod import PartitionedGraph, classify
        from xlabridge.pod.lazy import GraphCause, classify_cause

        first = self.events[0]
        process = _pod_report.label(self.pid, first.rank)
        fx = _pod_report.FxLines(self.events)
        compiled = {e.hash: e for e in self.of(ev.GraphCollectives)}
        dynamo = {GraphCause.DYNAMO_COMPILE, GraphCause.DYNAMO_EXECUTE}
        for seen in self.of(ev.LazyGraphSeen):
            cause = classify_cause(seen.cause)
            where = self.rule.innermost(fx.expand(seen.frames))
            collectives = compiled.get(seen.hash)
            graph = PartitionedGraph.from_dict(collectives.partitioned) if collectives else None
            totals = graph.totals().values() if graph else ()
            self.report.run_graphs.append(RunGraph(
                hash=seen.hash, origin="dynamo" if cause in dynamo else "lazy", cause=cause.value,
                cause_text=seen.cause, compiles=seen.compiles, executions=seen.executions,
                filename=where.filename, lineno=where.lineno, function=where.function, module=seen.module,
                num_partitions=graph.num_partitions if graph else 1, collectives=sum(t.count for t in totals),
                collective_bytes=sum(t.bytes for t in totals),
                pid=self.pid, process=process,
            ))
            if graph is None:
                continue
            groups: dict[tuple, list] = {}
            for collective in graph.collectives:
                cause_row = classify(collective, graph)
                line = _pod_report.user_frame(self.rule, fx, collective.stack, collective.source)
                groups.setdefault((collective.kind.value, cause_row.category, line), []).append((collective, cause_row))
            for (kind, category, line), members in groups.items():
                cause_row = members[0][1]
                runs = [c.executions if c.executions is not None else 1 for c, _ in members]
                group = CollectiveGroup(
                    hash=seen.hash, module=collectives.module, module_id=collectives.module_id, kind=kind, count=sum(runs),
                    bytes=sum(c.bytes * n for (c, _), n in zip(members, runs)),
                    replica_groups=[list(g) for g in members[0][0].replica_groups], category=category,
                    avoidable=cause_row.avoidable, suggestion=cause_row.suggestion, filename=line.filename,
                    lineno=line.lineno, function=line.function,
                    op_type=members[0][0].source.op_type if members[0][0].source else "",
                    unknown_executions=sum(c.executions is None for c, _ in members), pid=self.pid,
                )
                self.report.collectives.append(group)
                if group.avoidable:
                    self.report.findings.append(Finding(
                        "avoidable-collective",
                        f"{process}: graph {seen.hash[:10]} ({collectives.module}) runs {group.count} {kind} "
                        f"({group.bytes} bytes per device) per run for {_place(line)}: {cause_row.suggestion}",
                    ))

    def _cpu_only_findings(self) -> None:
        """One finding per FX graph of Dynamo compiled for XLA with every tensor on the CPU."""
        ours = [g for g in self.report.xla_graphs if g.pid == self.pid]
        cpu_only = {e.compile_id for e in self.of(ev.CompilePath) if e.cpu_only}
        cpu_only |= {b.compile_id for b in self.of(ev.BridgeGraph) if b.input_devices == ["cpu"]}
        for compile_id in sorted(cpu_only):
            graphs = [g.index for g in ours if g.compile_id == compile_id]
            self.report.findings.append(Finding(
                "cpu-only-graph",
                f"the FX graph of compile id {compile_id} ran entirely on the CPU: its tensors are not on "
                "the XLA device. Move the model and its inputs there (.to(torch_xla.device())); a graph "
                "meant for the CPU compiles faster with backend='inductor'.",
                graph=graphs[0] if graphs else None,
            ))


def _place(frame: ev.Frame) -> str:
    return f"{frame.filename}:{frame.lineno} ({frame.function})" if frame is not UNKNOWN else "an unknown line"


def _across_processes(report: Report, builders: Sequence[_ProcessBuilder]) -> None:
    """Graphs that differ between processes at the same step, and compiles only some did."""
    found, uneven = _pod_report.divergences([
        (_pod_report.label(b.pid, b.events[0].rank), b.events, b.rule.is_user) for b in builders
    ])
    for divergence in found:
        differences = {d.process: list(d.lines) for d in divergence.differences}
        report.divergences.append(ProcessDivergence(
            divergence.step, divergence.position, dict(divergence.graphs), differences))
        lines = "; ".join(f"{name}: {', '.join(lines[:4])}" for name, lines in differences.items())
        ran = ", ".join(f"{name}: {(graph or 'none')[:10]}" for name, graph in divergence.graphs.items())
        report.findings.append(Finding(
            "divergence",
            f"at step {divergence.step} (graph {divergence.position} of the step) the processes ran different "
            f"graphs ({ran}); on a pod "
            f"the others wait at the next collective. Lines only some have: {lines or 'none recorded'}",
        ))
    for compile_ in uneven:
        report.uneven_compiles.append(UnevenCompile(
            compile_.step, compile_.position, compile_.graph_hash, list(compile_.compiled_on), list(compile_.cached_on)))
        report.findings.append(Finding(
            "uneven-compile",
            f"at step {compile_.step} graph {compile_.graph_hash[:10]} was compiled on "
            f"{', '.join(compile_.compiled_on)} only; {', '.join(compile_.cached_on)} waited for it",
        ))


def _group_recompiles(recompiles: Sequence[Recompile]) -> list[RecompileGroup]:
    groups: dict[tuple[str, int, str], list[Recompile]] = {}
    for recompile in recompiles:
        groups.setdefault((recompile.filename, recompile.lineno, recompile.function), []).append(recompile)
    return [
        RecompileGroup(filename, lineno, function, len(items), items[0].reason, items[-1].reason, items[-1].category)
        for (filename, lineno, function), items in groups.items()
    ]


_GIB = 2**30

_TPU_MEMORY_FIELDS = (
    ("hbm_bytes", "total_bytes"), ("hbm_capacity_bytes", "capacity_bytes"), ("argument_bytes", "argument_bytes"),
    ("output_bytes", "output_bytes"), ("alias_bytes", "alias_bytes"), ("temp_bytes", "temp_bytes"),
    ("code_bytes", "generated_code_bytes"),
)
"""``TpuGraph`` fields and the ``HbmUsage.to_dict()`` keys they are read from."""


class _TpuBuilder:
    """The TPU view: ``tpu_compiled`` events joined to the run's XLA graphs by hash."""

    def __init__(self, report: Report, builders: dict[int, _ProcessBuilder], events: list[ev.Event]) -> None:
        self.report = report
        self.passes = [e for e in events if isinstance(e, ev.TpuPass)]
        self.compiled = [e for e in events if isinstance(e, ev.TpuCompiled)]
        # Where each graph comes from, looked up once: a Dynamo graph's first op by (compile id,
        # process); a lazily traced graph's trigger, the innermost user frame of its stack.
        self.dynamo_places = {(g.compile_id, g.pid): (g.filename, g.lineno, g.function) for g in report.dynamo_graphs}
        self.lazy_places: dict[str, tuple[str, int, str]] = {}
        for builder in builders.values():
            for seen in builder.of(ev.XlaGraphSeen):
                if seen.frames and seen.hash not in self.lazy_places:
                    frame = builder.rule.innermost(seen.frames)
                    self.lazy_places[seen.hash] = (frame.filename, frame.lineno, frame.function)

    def build(self) -> None:
        if not self.passes:
            return
        last = self.passes[-1]
        view = TpuView(
            topology=last.topology, generation=last.generation, libtpu_version=last.libtpu_version,
            jax_version=last.jax_version, seconds=sum(p.t - p.start for p in self.passes),
            error="; ".join(p.error for p in self.passes if p.error),
        )
        if last.libtpu_version:
            view.label = (f"compiled for TPU {last.generation} ({last.topology}) by libtpu {last.libtpu_version} "
                          "on this machine, not run")
        self.report.tpu = view
        if view.error:
            self.report.warnings.append(f"TPU view: nothing compiled: {view.error}")
        for compiled in self.compiled:
            view.graphs.append(self._row(compiled))
        view.compile_seconds = sum(g.compile_seconds or 0.0 for g in view.graphs)
        view.hbm_capacity_bytes = next((g.hbm_capacity_bytes for g in view.graphs if g.hbm_capacity_bytes), None)
        if view.hbm_capacity_bytes is None:
            from xlabridge.tpu import CHIPS

            chip = CHIPS.get(view.generation)
            view.hbm_capacity_bytes = chip.hbm_bytes if chip else None
        missing = {h for g in self.report.xla_graphs for h in g.hashes} - {g.hash for g in view.graphs}
        if missing and not view.error:
            self.report.warnings.append(
                f"TPU view: {len(missing)} XLA graph(s) of the run were not compiled for TPU (no HLO saved)")
        self._findings(view)

    def _row(self, compiled: ev.TpuCompiled) -> TpuGraph:
        xla = [g for g in self.report.xla_graphs if compiled.hash in g.hashes]
        row = TpuGraph(hash=compiled.hash, num_partitions=compiled.num_partitions, error=compiled.error,
                       xla_graphs=[g.index for g in xla], pids=sorted({g.pid for g in xla}),
                       collectives=[dict(c) for c in compiled.collectives], tpu_hlo_file=compiled.tpu_hlo_file)
        if not xla:
            row.origin = ev.GraphOrigin.LAZY.value
        row.filename, row.lineno, row.function = self._where(compiled.hash, xla)
        result = compiled.result
        if result is None:
            return row
        memory = result.get("memory") or {}
        row.compiled = True
        row.kernels = result.get("kernel_count")
        row.kernel_names = list(result.get("kernels", []))
        for name, key in _TPU_MEMORY_FIELDS:
            setattr(row, name, memory.get(key))
        row.fits = bool(result.get("fits"))
        row.out_of_memory = result.get("out_of_memory")
        for name in ("compile_seconds", "flops", "bytes_accessed", "cost_model_seconds", "hbm_seconds",
                     "devices", "chips"):
            setattr(row, name, result.get(name))
        return row

    def _where(self, digest: str, xla: list[XlaGraph]) -> tuple[str, int, str]:
        """The user line of a graph: its FX graph's first op, or (lazy) the stack that cut it."""
        for graph in xla:
            place = self.dynamo_places.get((graph.compile_id, graph.pid))
            if place is not None:
                return place
        return self.lazy_places.get(digest, (UNKNOWN.filename, 0, UNKNOWN.function))

    def _findings(self, view: TpuView) -> None:
        for row in view.graphs:
            place = f"{row.filename}:{row.lineno} ({row.function})"
            which = (f"XLA graph {row.hash[:12]} (FX graph {', '.join(map(str, row.xla_graphs))})"
                     if row.xla_graphs else f"lazy XLA graph {row.hash[:12]}")
            graph = row.xla_graphs[0] if row.xla_graphs else None
            if row.compiled and not row.fits:
                need = (f"{row.hbm_bytes / _GIB:.2f} GiB" if row.hbm_bytes is not None
                        else "more than it has")
                total = row.hbm_capacity_bytes or view.hbm_capacity_bytes
                capacity = f"{total / _GIB:.0f} GiB" if total else "its HBM"
                self.report.findings.append(Finding(
                    "tpu-does-not-fit",
                    f"{which}, from {place}, does not fit a {view.generation} device's HBM ({capacity}): it needs "
                    f"{need}{' (XLA:TPU: ' + _first_line(row.out_of_memory) + ')' if row.out_of_memory else ''}. "
                    "Shard it over more chips (SPMD, FSDPv2), lower the batch or sequence length, recompute "
                    "activations (gradient checkpointing), or pick a generation with more HBM.",
                    graph=graph,
                ))
            elif not row.compiled and row.error.startswith("XLA:TPU refused"):
                self.report.findings.append(Finding(
                    "tpu-refused",
                    f"{which}, from {place}, does not compile for TPU {view.generation}: {_first_line(row.error)}",
                    graph=graph,
                ))
