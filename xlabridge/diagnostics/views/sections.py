"""The section model: what a report shows, in order, independent of how it is laid out."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from xlabridge.diagnostics.report import Span, SpanKind, TimeSplit

if TYPE_CHECKING:
    from xlabridge.diagnostics.report import (
        Finding,
        Recompile,
        Report,
        TpuGraph,
        XlaGraph,
    )

_ENVIRONMENT_KEYS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("torch", ("torch",)),
    ("torch_xla", ("torch_xla",)),
    ("PJRT", ("pjrt_device", "xla_device_type")),
    ("TPU", ("tpu_type",)),
)
"""Header labels and the environment keys each is read from, first present wins."""

_SHARE_WORDS = {"xla_compile": "XLA compile", "cpu_fallback": "CPU fallback"}
SHARE_LABELS: tuple[tuple[str, str], ...] = tuple(
    (name, _SHARE_WORDS.get(name, name.replace("_", " "))) for name in TimeSplit.SHARES
)
"""``(share, label)`` for each share of ``TimeSplit.SHARES``, in its order."""

SHARE_OF_KIND: dict[str, str] = {
    SpanKind.IMPORT.value: "imports",
    SpanKind.TRACE.value: "tracing",
    SpanKind.EXTRACT.value: "tracing",
    SpanKind.XLA_COMPILE.value: "xla_compile",
    SpanKind.EXECUTE.value: "execution",
    SpanKind.CPU_FALLBACK.value: "cpu_fallback",
    SpanKind.LAZY.value: "lazy",
    SpanKind.TRANSFER.value: "transfers",
}
"""The share of the time split that each kind of span is a part of (tracing: Dynamo and the bridge)."""
SHARE_LABEL_OF_KIND: dict[str, str] = {kind: dict(SHARE_LABELS)[share] for kind, share in SHARE_OF_KIND.items()}

KIND_COLOURS: dict[str, str] = {
    SpanKind.IMPORT.value: "#b07aa1",
    SpanKind.TRACE.value: "#edc948",
    SpanKind.EXTRACT.value: "#9c755f",
    SpanKind.XLA_COMPILE.value: "#e15759",
    SpanKind.EXECUTE.value: "#4e79a7",
    SpanKind.CPU_FALLBACK.value: "#f28e2b",
    SpanKind.LAZY.value: "#76b7b2",
    SpanKind.TRANSFER.value: "#59a14f",
}
"""One colour per kind of span (and per share of the time split, through ``SHARE_OF_KIND``)."""
OTHER_COLOUR = "#bab0ac"
"""The colour of the ``other`` share and of span kinds this xlabridge does not know."""

FIX_FIRST = 5
"""Findings the ranked summary shows; the rest are listed under "Findings"."""


def share_colour(share: str) -> str:
    """The colour of a share of the time split: that of its first kind of span."""
    return next((KIND_COLOURS[k] for k, s in SHARE_OF_KIND.items() if s == share), OTHER_COLOUR)


@dataclasses.dataclass
class Table:
    """Rows under headers; ``caps`` are text column widths (0: the flexible column)."""

    headers: list[str]
    rows: list[list[str]]
    caps: list[int]


@dataclasses.dataclass
class Box:
    """One segment of an FX graph in its picture."""

    xla: bool
    label: str
    ops: list[str]


@dataclasses.dataclass
class Figure:
    """The picture of FX graphs of one place and shape: their segments left to right."""

    graph: int
    caption: str
    boxes: list[Box]
    graphs: list[int] = dataclasses.field(default_factory=list)
    """Every FX graph the picture stands for (``graph`` is the first)."""


@dataclasses.dataclass
class Ranked:
    """One finding of the ranked summary, costliest first."""

    rank: int
    where: str
    what: str
    """``4 recompiles``: its kind and count, in words."""
    cost: str
    """``1.30 s of 13.48 s (10%)``, or why it has no cost in time."""
    share: float | None
    """``cost_seconds`` over the wall time it is part of (``None``: not a cost in time)."""
    cost_words: str
    code: str
    url: str
    message: str


@dataclasses.dataclass
class Lane:
    """The spans of one kind in one process's timeline."""

    kind: str
    colour: str
    spans: list[Span]

    @property
    def seconds(self) -> float:
        return sum(span.seconds for span in self.spans)


@dataclasses.dataclass
class Timeline:
    """One process's run in time: a lane per kind of span, over ``end`` seconds."""

    pid: int
    title: str
    end: float
    lanes: list[Lane]


@dataclasses.dataclass
class Part:
    """One share of a process's wall time, for a stacked bar."""

    label: str
    seconds: float
    fraction: float
    colour: str


@dataclasses.dataclass
class Section:
    """A titled part of the report: a summary line, tables, pictures, notes."""

    key: str
    title: str
    summary: str = ""
    tables: list[Table] = dataclasses.field(default_factory=list)
    figures: list[Figure] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    items: list[Ranked] = dataclasses.field(default_factory=list)
    timelines: list[Timeline] = dataclasses.field(default_factory=list)
    bars: dict[str, list[Part]] = dataclasses.field(default_factory=dict)
    """Title of a stacked bar (one per process) → its parts."""


def plural(count: int, noun: str) -> str:
    """``1 graph``, ``2 graphs``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def first_line(text: str) -> str:
    """The first non-empty line of ``text`` (Dynamo's reasons run to many lines)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def short_path(filename: str) -> str:
    """``filename`` relative to the current directory if it lies under it, else as given."""
    if not filename or filename.startswith("<"):
        return filename
    try:
        path, here = Path(filename).resolve(), Path.cwd().resolve()
    except (OSError, RuntimeError):
        return filename
    return os.path.relpath(path, here) if path.is_relative_to(here) else filename


def where(filename: str, lineno: int, function: str) -> str:
    """``file:line (function)`` with the file relative to the current directory when inside it."""
    place = f"{short_path(filename)}:{lineno}"
    return f"{place} ({function})" if function else place


def seconds(value: float | None) -> str:
    """``1.23 s``, ``45.6 ms``, ``12.3 µs`` (under 0.1 ms), ``-`` for unknown."""
    if value is None:
        return "-"
    if abs(value) >= 1:
        return f"{value:.2f} s"
    if value == 0 or abs(value) >= 1e-4:
        return f"{value * 1e3:.1f} ms"
    return f"{value * 1e6:.1f} µs"


def size(value: float | None) -> str:
    """``1.25 GiB``, ``3.4 MiB``, ``512 B``; ``-`` for unknown."""
    if value is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {unit}" if unit == "GiB" else f"{value / scale:.1f} {unit}"
    return f"{int(value)} B"


def count(value: float | None) -> str:
    """``1.2 G``, ``34.5 M``, ``980``; ``-`` for unknown."""
    if value is None:
        return "-"
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f}"


def environment_line(report: Report) -> str:
    """``torch 2.9.0 | torch_xla 2.9.0 | PJRT CPU`` from the known keys."""
    parts = []
    for label, keys in _ENVIRONMENT_KEYS:
        value = next((report.environment[k] for k in keys if report.environment.get(k)), None)
        if value is not None:
            parts.append(f"{label} {value}")
    return " | ".join(parts) or "environment not recorded"


def share_cells(split: TimeSplit) -> list[str]:
    """``2.50 s (25%)`` for each share of ``split``, in ``SHARE_LABELS`` order."""
    shares = split.shares()
    return [f"{seconds(getattr(split, key))} ({shares[key]:.0%})" for key, _ in SHARE_LABELS]


def _observed(report: Report) -> bool:
    return bool(report.dynamo_graphs or report.dynamo_breaks or report.xla_graphs or report.hlo_breaks)


def process_name(report: Report, pid: int) -> str:
    """``rank 1 (pid 42)`` where the rank is known, else ``pid 42``."""
    rank = next((p.get("rank") for p in report.processes if p.get("pid") == pid), None)
    return f"rank {rank} (pid {pid})" if rank is not None else f"pid {pid}"


def _time(report: Report) -> Section | None:
    if not report.time:
        return None
    several = len(report.time) > 1
    if several:
        summary = f"{plural(len(report.time), 'process')}, each one's wall time split into exclusive shares"
    else:
        summary = f"{seconds(report.time[0].wall)} wall, split into exclusive shares"
    headers = ["share"] + ([process_name(report, t.pid) for t in report.time] if several else ["seconds (of wall)"])
    rows = [[label] + [share_cells(t)[n] for t in report.time] for n, (_, label) in enumerate(SHARE_LABELS)]
    if several:
        rows.insert(0, ["wall"] + [seconds(t.wall) for t in report.time])
    section = Section("time", "Time", summary=summary,
                      tables=[Table(headers, rows, [12] + [max(17, len(h)) for h in headers[1:]])])
    for split in report.time:
        fractions = split.shares()
        section.bars[f"{process_name(report, split.pid)}: {seconds(split.wall)}"] = [
            Part(label, getattr(split, key), fractions[key], share_colour(key)) for key, label in SHARE_LABELS
        ]
    if report.tpu is not None and not report.tpu.error:
        section.notes.append(
            f"TPU view: {seconds(report.tpu.seconds)} after the run, not part of the wall time above "
            f"(libtpu's own compile time {seconds(report.tpu.compile_seconds)})"
        )
    return section


_KIND_NOUNS = {
    "dynamo-break": ("graph break", "graph breaks"),
    "recompiles": ("recompile", "recompiles"),
    "hlo-break": ("call through a CPU fallback", "calls through a CPU fallback"),
    "cpu-only-graph": ("graph on the CPU", "graphs on the CPU"),
    "avoidable-collective": ("avoidable collective", "avoidable collectives"),
    "divergence": ("divergence", "divergences"),
    "uneven-compile": ("uneven compile", "uneven compiles"),
    "tpu-does-not-fit": ("graph too big for one TPU device", "graphs too big for one TPU device"),
    "tpu-refused": ("graph XLA:TPU refused", "graphs XLA:TPU refused"),
}
"""A finding's kind as a noun, singular and plural (``4 recompiles``)."""


def _what(finding: Finding) -> str:
    singular, several = _KIND_NOUNS.get(finding.kind, (finding.kind, finding.kind))
    return f"{finding.count} {singular if finding.count == 1 else several}"


def _wall_of(report: Report, pid: int | None) -> float:
    """The wall time a finding's cost is part of: its process's, or all processes' together."""
    walls = {t.pid: t.wall for t in report.time}
    if pid is not None and pid in walls:
        return walls[pid]
    return sum(walls.values())


def _place(finding: Finding) -> str:
    if finding.lineno <= 0 and finding.filename.startswith("<"):
        return f"graph {finding.graph}" if finding.graph is not None else "the run"
    return where(finding.filename, finding.lineno, finding.function)


def ranked(report: Report) -> list[Ranked]:
    """The report's findings as the ranked summary shows them, in the report's order (costliest first)."""
    out = []
    for finding in (f for f in report.findings if f.kind != "probe"):
        wall = _wall_of(report, finding.pid)
        if finding.cost_seconds is None:
            cost, share = "no cost in time", None
        else:
            share = finding.cost_seconds / wall if wall > 0 else None
            cost = f"{seconds(finding.cost_seconds)} of {seconds(wall)}" + (f" ({share:.0%})" if share is not None else "")
        out.append(Ranked(len(out) + 1, _place(finding), _what(finding), cost, share, finding.cost, finding.code,
                          finding.url, finding.message))
    return out


def _summary(report: Report) -> Section | None:
    items = ranked(report)
    if not items:
        return None
    costly = [i for i in items[:FIX_FIRST] if i.share is not None]
    total = sum(f.cost_seconds or 0.0 for f in report.findings if f.kind != "probe")
    walls = sum(t.wall for t in report.time)
    summary = f"{plural(len(items), 'finding')}, costliest in this run first"
    if total and walls:
        summary += f"; together {seconds(total)} of {seconds(walls)} (they may overlap)"
    return Section("summary", "Fix first", summary=summary, items=(costly or items)[:FIX_FIRST])


def _timeline(report: Report) -> Section | None:
    if not report.timeline:
        return None
    section = Section("timeline", "Timeline", summary="what each process did when, one lane per kind of work")
    pids = list(dict.fromkeys(span.pid for span in report.timeline))
    walls = {t.pid: t.wall for t in report.time}
    known = [kind.value for kind in SpanKind]
    for pid in pids:
        spans = [span for span in report.timeline if span.pid == pid]
        kinds = [k for k in known if any(s.kind == k for s in spans)]
        kinds += list(dict.fromkeys(s.kind for s in spans if s.kind not in known))
        end = max([walls.get(pid, 0.0), *(s.start + s.seconds for s in spans)])
        lanes = [Lane(kind, KIND_COLOURS.get(kind, OTHER_COLOUR), [s for s in spans if s.kind == kind])
                 for kind in kinds]
        section.timelines.append(Timeline(pid, f"{process_name(report, pid)}: {seconds(end)}", end, lanes))
    return section


def _dynamo(report: Report) -> Section:
    section = Section(
        "dynamo", "Dynamo",
        summary=f"{plural(report.graph_count, 'graph')}, {plural(report.break_count, 'break')}, "
        f"{plural(len(report.recompiles), 'recompile')}",
    )
    if report.dynamo_graphs:
        section.tables.append(Table(
            ["compile", "backend", "path", "ops", "tracing", "where"],
            [[g.compile_id, g.backend, g.path or "-", str(g.op_count), seconds(g.tracing_seconds),
              where(g.filename, g.lineno, g.function)] for g in report.dynamo_graphs],
            [9, 10, 12, 5, 9, 0],
        ))
    if report.dynamo_breaks:
        section.tables.append(Table(
            ["#", "category", "where", "reason", "suggestion"],
            [[str(n), b.category, where(b.filename, b.lineno, b.function), first_line(b.reason), b.suggestion]
             for n, b in enumerate(report.dynamo_breaks, start=1)],
            [3, 22, 34, 30, 0],
        ))
    return section


def _figure(graph: XlaGraph) -> Figure:
    boxes, count = [], 0
    for segment in graph.segments:
        xla = segment.kind.lower() == "xla"
        if xla:
            count += 1
            label = f"XLA graph {count} ({plural(len(segment.ops), 'op')})"
        else:
            label = ", ".join(segment.ops) or "CPU"
        boxes.append(Box(xla, label, list(segment.ops)))
    caption = f"FX graph {graph.index} ({graph.role}): {graph.fx_ops} ops, {plural(graph.xla_graphs, 'XLA graph')}"
    return Figure(graph.index, caption, boxes, [graph.index])


def _figures(graphs: list[XlaGraph]) -> list[Figure]:
    """One picture per place and shape: FX graphs of one user line, role and segments (a recompiled
    frame's) share one, captioned with their numbers and count."""
    groups: dict[tuple, list[XlaGraph]] = {}
    for graph in graphs:
        shape = tuple((segment.kind, tuple(segment.ops)) for segment in graph.segments)
        groups.setdefault((graph.filename, graph.lineno, graph.function, graph.role, shape), []).append(graph)
    figures = []
    for (filename, lineno, function, role, _), members in groups.items():
        figure = _figure(members[0])
        if len(members) > 1:
            first = members[0]
            known = lineno > 0 or not filename.startswith("<")
            place = f"at {where(filename, lineno, function)}" if known else "with the same segments"
            figure.graphs = [g.index for g in members]
            figure.caption = (
                f"FX graph {', '.join(str(g.index) for g in members)}: {len(members)} {role} graphs {place}: "
                f"{first.fx_ops} ops, {plural(first.xla_graphs, 'XLA graph')} each"
            )
        figures.append(figure)
    return figures


def _hlo(report: Report) -> Section:
    section = Section(
        "hlo", "HLO lowering",
        summary=f"{plural(len(report.xla_graphs), 'FX graph')} through the XLA bridge, "
        f"{plural(report.hlo_break_count, 'break')}",
    )
    if report.xla_graphs:
        section.tables.append(Table(
            ["graph", "role", "fx_ops", "xla_graphs", "compiles", "compile", "exec/call", "transfers/call",
             "bytes/call", "time/call", "calls"],
            [[str(g.index), g.role, str(g.fx_ops), str(g.xla_graphs), str(g.compiles), seconds(g.compile_seconds),
              str(g.executions_per_call), str(g.transfers_per_call), str(g.bytes_per_call),
              seconds(g.seconds_per_call), str(g.calls)] for g in report.xla_graphs],
            [5, 8, 6, 10, 8, 8, 9, 14, 10, 9, 5],
        ))
    if report.hlo_breaks:
        section.tables.append(Table(
            ["graph", "op", "category", "where", "suggestion"],
            [[str(b.graph), b.op, b.category, where(b.filename, b.lineno, b.function), b.suggestion]
             for b in report.hlo_breaks],
            [5, 24, 14, 34, 0],
        ))
    section.figures = _figures(report.xla_graphs)
    return section


def _tpu_graph_label(row: TpuGraph) -> str:
    if row.xla_graphs:
        return ",".join(str(i) for i in row.xla_graphs)
    return "lazy"


def _tpu(report: Report) -> Section | None:
    view = report.tpu
    if view is None:
        return None
    section = Section("tpu", f"TPU view ({view.topology})")
    if view.error:
        section.summary = "nothing compiled"
        section.notes.append(view.error)
        return section
    fits = sum(1 for g in view.graphs if g.fits)
    section.summary = (
        f"{plural(len(view.graphs), 'XLA graph')} {view.label}; {fits} of {len(view.graphs)} fit one device's "
        f"{size(view.hbm_capacity_bytes)} of HBM; the TPU compiles took {seconds(view.seconds)} after the run "
        f"(libtpu's own compile time {seconds(view.compile_seconds)})"
    )
    rows = []
    for g in view.graphs:
        if not g.compiled:
            rows.append([_tpu_graph_label(g), g.hash[:12], "error", "-", "-", "-", "-", "-", "-",
                         where(g.filename, g.lineno, g.function)])
            continue
        rows.append([
            _tpu_graph_label(g), g.hash[:12], str(g.kernels) if g.kernels is not None else "-", size(g.hbm_bytes),
            "yes" if g.fits else "NO", seconds(g.compile_seconds), seconds(g.cost_model_seconds),
            seconds(g.hbm_seconds), count(g.flops), where(g.filename, g.lineno, g.function),
        ])
    if not rows:
        section.notes.append("the run executed no XLA graph to compile")
        return section
    section.tables.append(Table(
        ["graph", "hash", "kernels", "HBM", "fits", "compile", "cost model", "HBM floor", "flops", "where"],
        rows, [10, 12, 7, 10, 4, 9, 10, 9, 8, 0],
    ))
    sharded = [g for g in view.graphs if g.collectives]
    if sharded:
        section.tables.append(Table(
            ["graph", "hash", "devices", "collectives on TPU (count, bytes per device per run)"],
            [[_tpu_graph_label(g), g.hash[:12], str(g.num_partitions),
              "; ".join(f"{c['kind']} x{c['count']} ({size(c['bytes'])})" for c in g.collectives)]
             for g in sharded],
            [6, 12, 7, 0],
        ))
    for g in view.graphs:
        if g.error:
            section.notes.append(f"graph {_tpu_graph_label(g)} ({g.hash[:12]}): {first_line(g.error)}")
    section.notes.append(
        "cost model: XLA's cost analysis, at rates fixed inside libtpu rather than the chip's: it ranks "
        "graphs, it does not predict a step time ('-': the graph holds a custom call it cannot cost); "
        "HBM floor: the bytes it counts at the chip's HBM bandwidth"
    )
    return section


_COMPILE_ID = re.compile(r"^\s*\d+/\d+:\s*")
_SOURCE_COMMENT = re.compile(r"\s{2,}#.*$|\s+#\s.*$")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e-?\d+)?(?![\w.])")


def guard(reason: str) -> str:
    """The guard that failed, shortly: without Dynamo's ``frame/n:``, the source comment it appends
    and the digits past three significant ones (``___stack0 == 4.24``)."""
    text = _SOURCE_COMMENT.sub("", _COMPILE_ID.sub("", first_line(reason))).strip()
    return _NUMBER.sub(lambda m: f"{float(m.group()):.3g}" if "." in m.group() else m.group(), text)


def _guards(reasons: list[str]) -> str:
    """The failed guards of one cause, once: ``___stack0 == 4.24, 4.18, 4.22, 4.15`` when only one
    number changes between them, else the first with how many others there were."""
    guards = list(dict.fromkeys(guard(r) for r in reasons))
    if len(guards) == 1:
        return guards[0]
    numbers = [_NUMBER.findall(g) for g in guards]
    varying = {i for i in range(len(numbers[0])) if len({tuple(n)[i] for n in numbers}) > 1}
    if len(varying) == 1:
        index = varying.pop()
        values = list(dict.fromkeys(n[index] for n in numbers))
        shown = values if len(values) <= 4 else [*values[:3], "…", values[-1]]
        match = list(_NUMBER.finditer(guards[0]))[index]
        listed = ", ".join(shown) + (f" ({len(values)} values)" if len(values) > 4 else "")
        return guards[0][: match.start()] + listed + guards[0][match.end():]
    return f"{guards[0]} (and {plural(len(guards) - 1, 'other guard')})"


def _cause_key(recompile: Recompile) -> tuple:
    shape = _NUMBER.sub("#", guard(recompile.reason))
    return (recompile.filename, recompile.lineno, recompile.function, recompile.category, shape)


def _recompiles(report: Report) -> Section | None:
    if not report.recompiles:
        return None
    groups: dict[tuple, list[Recompile]] = {}
    for recompile in report.recompiles:
        groups.setdefault(_cause_key(recompile), []).append(recompile)
    locations = {key[:3] for key in groups}
    section = Section(
        "recompiles", "Recompiles",
        summary=f"{len(report.recompiles)} at {plural(len(locations), 'location')}, "
        f"{plural(len(groups), 'cause')}",
        tables=[Table(
            ["where", "count", "cause", "guard that failed"],
            [[where(*key[:3]), str(len(members)), key[3], _guards([r.reason for r in members])]
             for key, members in groups.items()],
            [40, 5, 20, 0],
        )],
    )
    for category in dict.fromkeys(key[3] for key in groups):
        suggestion = next((r.suggestion for r in report.recompiles if r.category == category and r.suggestion), "")
        if suggestion:
            section.notes.append(f"{category}: {suggestion}")
    return section


def byte_size(value: int) -> str:
    """``512 B``, ``2.0 KiB``, ``3.5 MiB``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value} B"


def _run_graphs(report: Report) -> Section | None:
    if not report.run_graphs:
        return None
    lazy = [g for g in report.run_graphs if g.origin == "lazy"]
    several = len({g.pid for g in report.run_graphs}) > 1
    return Section(
        "run_graphs", "XLA graphs run",
        summary=f"{plural(len(report.run_graphs), 'graph')} ({len(lazy)} traced lazily), "
        f"{sum(g.executions for g in report.run_graphs)} executions, "
        f"{plural(sum(g.compiles for g in report.run_graphs), 'compile')}",
        tables=[Table(
            (["process"] if several else []) + ["graph", "origin", "cause", "compiles", "runs", "devices",
                                                 "collectives", "where"],
            [([g.process] if several else []) + [
                g.hash[:10], g.origin, g.cause, str(g.compiles), str(g.executions), str(g.num_partitions),
                f"{g.collectives} ({byte_size(g.collective_bytes)})" if g.collectives else "-",
                where(g.filename, g.lineno, g.function)] for g in report.run_graphs],
            ([8] if several else []) + [10, 6, 17, 8, 5, 7, 18, 0],
        )],
    )


def _collectives(report: Report) -> Section | None:
    if not report.collectives:
        return None
    avoidable = [c for c in report.collectives if c.avoidable]
    section = Section(
        "collectives", "Collectives",
        summary=f"{sum(c.count for c in report.collectives)} per run of their graphs over "
        f"{plural(len({c.hash for c in report.collectives}), 'graph')}, "
        f"{byte_size(sum(c.bytes for c in report.collectives))} per device; "
        f"{sum(c.count for c in avoidable)} likely avoidable",
        tables=[Table(
            ["graph", "kind", "count", "bytes", "groups", "where", "cause"],
            [[c.hash[:10], c.kind, str(c.count), byte_size(c.bytes),
              " ".join("{" + ",".join(map(str, g)) + "}" for g in c.replica_groups) or "all",
              where(c.filename, c.lineno, c.function), c.category + (" (avoidable)" if c.avoidable else "")]
             for c in report.collectives],
            [10, 18, 5, 9, 16, 0, 30],
        )],
    )
    for category in dict.fromkeys(c.category for c in avoidable):
        section.notes.append(f"{category}: {next(c.suggestion for c in avoidable if c.category == category)}")
    return section


def _processes(report: Report) -> Section | None:
    if len({g.pid for g in report.run_graphs}) < 2 and not report.divergences:
        return None
    names = dict.fromkeys(g.process for g in report.run_graphs)
    section = Section(
        "processes", "Processes",
        summary=f"{plural(len(names), 'process')}, {plural(len(report.divergences), 'divergence')}, "
        f"{plural(len(report.uneven_compiles), 'uneven compile')}",
        tables=[Table(
            ["process", "graphs", "runs", "compiles"],
            [[name, str(len(gs)), str(sum(g.executions for g in gs)), str(sum(g.compiles for g in gs))]
             for name in names for gs in [[g for g in report.run_graphs if g.process == name]]],
            [10, 6, 6, 8],
        )],
    )
    if report.divergences:
        section.tables.append(Table(
            ["step", "graph", "graphs run", "lines only this process has"],
            [[str(d.step), str(d.position),
              ", ".join(f"{name}: {(h or 'none')[:10]}" for name, h in d.graphs.items()),
              " | ".join(f"{name}: {', '.join(lines)}" for name, lines in d.differences.items()) or "-"]
             for d in report.divergences],
            [4, 5, 40, 0],
        ))
    if report.uneven_compiles:
        section.tables.append(Table(
            ["step", "graph", "hash", "compiled on", "cached on"],
            [[str(u.step), str(u.position), u.hash[:10], ", ".join(u.compiled_on), ", ".join(u.cached_on)]
             for u in report.uneven_compiles],
            [4, 5, 10, 30, 0],
        ))
    if not report.divergences:
        section.notes.append("every process ran the same graphs in the same order")
    return section


def build(report: Report) -> list[Section]:
    """The sections of ``report``, in the order both views show them: the ranked findings and
    where the time went first, then the tables."""
    out = [Section("environment", "xlabridge report", summary=environment_line(report))]
    summary = _summary(report)
    out += [s for s in (summary, _time(report), _timeline(report)) if s is not None]
    if not _observed(report) and not report.run_graphs:
        out.append(Section("empty", "", notes=["no graphs observed"]))
    elif _observed(report):
        out += [_dynamo(report), _hlo(report)]
    out += [s for s in (_run_graphs(report), _collectives(report), _processes(report), _recompiles(report),
                        _tpu(report)) if s is not None]
    shown = {item.rank for item in summary.items} if summary is not None else set()
    rest = [item for item in ranked(report) if item.rank not in shown]
    if rest:
        out.append(Section("findings", "Findings" if not shown else "Other findings",
                           notes=[_finding_note(item) for item in rest]))
    if report.warnings:
        out.append(Section("warnings", "Warnings", notes=list(report.warnings)))
    return out


def _finding_note(item: Ranked) -> str:
    cost = f" ({item.cost})" if item.share is not None else ""
    code = f" [{item.code}]" if item.code else ""
    return f"{item.where}: {item.what}{cost}{code}: {item.message}"
