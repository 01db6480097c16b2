"""The diagnostics report as plain data, and its JSON form.

A ``Report`` is built from events by ``xlabridge.diagnostics.build_report`` (the only way one is
made); views (``xlabridge.diagnostics.views``) render it. This package imports nothing else of
the diagnostics: the data stands apart from how it is built and shown.

The JSON form is versioned by ``SCHEMA`` (``xlabridge.report/4``); ``docs/report-schema.md``
documents every field and is generated from these types and the events'
(``python -m xlabridge.diagnostics._schema_doc``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xlabridge.diagnostics._fields import field as _field
from xlabridge.diagnostics.report._pod import (
    CollectiveGroup,
    CompileRequest,
    ProcessDivergence,
    RankDifference,
    RunGraph,
    UnevenCompile,
)
from xlabridge.diagnostics.report._rows import (
    DynamoBreak,
    DynamoGraph,
    Finding,
    HloBreak,
    ProbeReport,
    Process,
    Recompile,
    RecompileGroup,
    Segment,
    TimeSplit,
    XlaGraph,
)
from xlabridge.diagnostics.report._timeline import Span
from xlabridge.diagnostics.report._tpu import TpuBreak, TpuGraph, TpuSlice, TpuView

SCHEMA = "xlabridge.report/4"
TRACE_SOURCE = "TORCH_TRACE"
"""``environment["source"]`` of a report read from torch's structured trace (``read_trace``), not observed."""
_READABLE_SCHEMAS = ("xlabridge.report/2", "xlabridge.report/3", SCHEMA)
"""Schemas ``from_dict`` reads: /3 added the TPU view (``tpu``), /4 the ranked findings' costs and places,
the timeline, the time split's ``imports``, ``lazy`` and ``transfers`` and the XLA graphs' lines; an older
report reads with their defaults."""


@dataclasses.dataclass
class Report:
    """Everything observed over one ``explain`` call, ``diagnose`` block or CLI run."""

    environment: dict[str, Any] = _field("versions, PJRT device, TPU type, argv, compilation cache", factory=dict)
    processes: list[Process] = _field("each process: who it was, how far it got, how it ended", factory=list)
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
    rank_differences: list[RankDifference] = _field("Dynamo compilations some ranks of a torch.distributed job made "
                                                    "and the others did not", factory=list)
    compile_requests: list[CompileRequest] = _field("each request to compile: torch.compile, Module.compile(), the "
                                                    "decorator, torch._dynamo.optimize", factory=list)
    findings: list[Finding] = _field("conclusions worth acting on, ranked: the costliest in this run first", factory=list)
    timeline: list[Span] = _field("what each process did when (imports, tracing, compiles, calls, syncs)", factory=list)
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

    # ------------------------------------------------------------------ JSON

    def to_dict(self) -> dict[str, Any]:
        """The report in the shape of schema ``xlabridge.report/4``."""
        rows = dataclasses.asdict
        return {
            "schema": SCHEMA,
            "environment": dict(self.environment),
            "processes": [rows(p) for p in self.processes],
            "probes": [rows(p) for p in self.probes],
            "time": [rows(t) for t in self.time],
            "dynamo": {
                "graph_count": self.graph_count,
                "break_count": self.break_count,
                "graphs": [rows(g) for g in self.dynamo_graphs],
                "breaks": [rows(b) for b in self.dynamo_breaks],
                "recompiles": [rows(r) for r in self.recompiles],
                "recompile_groups": [rows(g) for g in self.recompile_groups],
                "requests": [rows(r) for r in self.compile_requests],
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
                "rank_differences": [rows(d) for d in self.rank_differences],
            },
            "findings": [rows(f) for f in self.findings],
            "timeline": [rows(s) for s in self.timeline],
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
            tpu.breaks = build(TpuBreak, tpu.breaks)  # type: ignore[arg-type]
            tpu.slices = build(TpuSlice, tpu.slices)  # type: ignore[arg-type]
        return cls(
            tpu=tpu,
            environment=dict(data.get("environment", {})),
            processes=build(Process, data.get("processes", [])),
            probes=build(ProbeReport, data.get("probes", [])),
            time=build(TimeSplit, data.get("time", [])),
            dynamo_graphs=build(DynamoGraph, dynamo.get("graphs", [])),
            dynamo_breaks=build(DynamoBreak, dynamo["breaks"]),
            recompiles=build(Recompile, dynamo["recompiles"]),
            recompile_groups=build(RecompileGroup, dynamo.get("recompile_groups", [])),
            compile_requests=build(CompileRequest, dynamo.get("requests", [])),
            xla_graphs=graphs,
            hlo_breaks=build(HloBreak, hlo["breaks"]),
            run_graphs=build(RunGraph, data.get("pod", {}).get("graphs", [])),
            collectives=build(CollectiveGroup, data.get("pod", {}).get("collectives", [])),
            divergences=build(ProcessDivergence, data.get("pod", {}).get("divergences", [])),
            uneven_compiles=build(UnevenCompile, data.get("pod", {}).get("uneven_compiles", [])),
            rank_differences=build(RankDifference, data.get("pod", {}).get("rank_differences", [])),
            findings=build(Finding, data.get("findings", [])),
            timeline=build(Span, data.get("timeline", [])),
            warnings=list(data.get("warnings", [])),
        )

    def __str__(self) -> str:
        # The tables are a view's job (``xlabridge.diagnostics.render_text``); this is their headline.
        tpu = f", {len(self.tpu.graphs)} compiled for TPU {self.tpu.topology}" if self.tpu else ""
        return (f"xlabridge report: {self.graph_count} Dynamo graph(s), {self.break_count} graph break(s), "
                f"{len(self.recompiles)} recompile(s), {len(self.xla_graphs)} XLA graph(s) through the bridge, "
                f"{self.hlo_break_count} HLO lowering break(s){tpu}, {len(self.findings)} finding(s) "
                "(xlabridge.diagnostics.render_text(report) for the tables)")
