"""The section model: what a report shows, in order, independent of how it is laid out."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xlabridge.diagnostics.report import Report, TimeSplit, TpuGraph, XlaGraph

_ENVIRONMENT_KEYS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("torch", ("torch",)),
    ("torch_xla", ("torch_xla",)),
    ("PJRT", ("pjrt_device", "xla_device_type")),
    ("TPU", ("tpu_type",)),
)
"""Header labels and the environment keys each is read from, first present wins."""

SHARE_LABELS = (
    ("tracing", "tracing"),
    ("xla_compile", "XLA compile"),
    ("execution", "execution"),
    ("cpu_fallback", "CPU fallback"),
    ("other", "other"),
)


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
    """The picture of one FX graph: its segments left to right."""

    graph: int
    caption: str
    boxes: list[Box]


@dataclasses.dataclass
class Section:
    """A titled part of the report: a summary line, tables, pictures, notes."""

    key: str
    title: str
    summary: str = ""
    tables: list[Table] = dataclasses.field(default_factory=list)
    figures: list[Figure] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)


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


def _time(report: Report) -> Section | None:
    if not report.time:
        return None
    several = len(report.time) > 1
    headers = (["pid", "wall"] if several else []) + [label for _, label in SHARE_LABELS]
    rows = [([str(t.pid), seconds(t.wall)] if several else []) + share_cells(t) for t in report.time]
    summary = "" if several else f"{seconds(report.time[0].wall)} wall, split into exclusive shares"
    return Section("time", "Time", summary=summary, tables=[Table(headers, rows, [14] * len(headers))])


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
    return Figure(graph.index, caption, boxes)


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
    section.figures = [_figure(g) for g in report.xla_graphs]
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


def _reasons(first: str, last: str, count: int) -> str:
    first, last = first_line(first), first_line(last)
    return first if count == 1 or first == last else f"first: {first} | last: {last}"


def _recompiles(report: Report) -> Section | None:
    if not report.recompiles:
        return None
    return Section(
        "recompiles", "Recompiles",
        summary=f"{len(report.recompiles)} at {plural(len(report.recompile_groups), 'location')}",
        tables=[Table(
            ["where", "count", "category", "reasons"],
            [[where(g.filename, g.lineno, g.function), str(g.count), g.category,
              _reasons(g.first_reason, g.last_reason, g.count)] for g in report.recompile_groups],
            [40, 5, 20, 0],
        )],
    )


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
    """The sections of ``report``, in the order both views show them."""
    out = [Section("environment", "xlabridge report", summary=environment_line(report))]
    time = _time(report)
    if time is not None:
        out.append(time)
    if not _observed(report) and not report.run_graphs:
        out.append(Section("empty", "", notes=["no graphs observed"]))
    elif _observed(report):
        out += [_dynamo(report), _hlo(report)]
    out += [s for s in (_run_graphs(report), _collectives(report), _processes(report)) if s is not None]
    recompiles = _recompiles(report)
    if recompiles is not None:
        out.append(recompiles)
    tpu = _tpu(report)
    if tpu is not None:
        out.append(tpu)
    findings = [f.message for f in report.findings if f.kind != "probe"]
    if findings:
        out.append(Section("findings", "Findings", notes=findings))
    if report.warnings:
        out.append(Section("warnings", "Warnings", notes=list(report.warnings)))
    return out
