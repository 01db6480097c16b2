"""The sections of several processes: the XLA graphs each ran and their collectives (``--pod``), and
every process with how far it got and how it ended, where ranks differed and what one compiled alone."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xlabridge.diagnostics.views._model import Section, Table, byte_size, plural, seconds, where
from xlabridge.diagnostics.views._overview import process_name

if TYPE_CHECKING:
    from xlabridge.diagnostics.report import Report


def run_graphs(report: Report) -> Section | None:
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


def collectives(report: Report) -> Section | None:
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


_NORMAL = ("exited", "observed", "traced")
"""Endings that are no finding: a normal exit, a ``diagnose()`` block's end, a trace that does not say."""


def _abnormal(report: Report) -> bool:
    return any(p.ending not in _NORMAL for p in report.processes)


def processes(report: Report) -> Section | None:
    """Every process, how far it got and how it ended (which rank stopped when), then where processes
    ran different graphs (``--pod``)."""
    several = len(report.processes) > 1 or len({g.pid for g in report.run_graphs}) > 1
    if not several and not report.divergences and not _abnormal(report):
        return None
    ended = [p for p in report.processes if p.ending not in _NORMAL]
    section = Section(
        "processes", "Processes",
        summary=f"{plural(len(report.processes), 'process')}, {len(ended)} did not end normally, "
        f"{plural(len(report.divergences), 'divergence')}, "
        f"{plural(len(report.uneven_compiles) + sum(len(d.compile_ids) for d in report.rank_differences), 'uneven compile')}",
    )
    first = min((p.started for p in report.processes if p.started is not None), default=None)
    graphs = {name: [g for g in report.run_graphs if g.process == name] for name in dict.fromkeys(
        g.process for g in report.run_graphs)}
    rows = []
    for p in report.processes:
        name = f"rank {p.rank}" if p.rank is not None else f"pid {p.pid}"
        mine = graphs.get(name, [])
        stopped = (p.started + p.last_event_seconds - first
                   if first is not None and p.started is not None and p.last_event_seconds is not None else None)
        rows.append([process_name(report, p.pid), p.ending, str(p.steps), seconds(stopped),
                     str(sum(g.executions for g in mine)) if mine else "-", p.how])
    section.tables.append(Table(
        ["process", "ended", "steps", "last event", "graph runs", "how"], rows, [22, 8, 6, 10, 10, 0]))
    section.notes.append("last event: seconds from the run's first process start to the process's last sign of "
                         "life; a process killed without a word stopped then")
    if report.divergences:
        section.tables.append(Table(
            ["step", "graph", "graphs run", "lines only this process has"],
            [[str(d.step), str(d.position),
              ", ".join(f"{name}: {(h or 'none')[:10]}" for name, h in d.graphs.items()),
              " | ".join(f"{name}: {', '.join(lines)}" for name, lines in d.differences.items()) or "-"]
             for d in report.divergences],
            [4, 5, 40, 0],
        ))
    if report.rank_differences:
        section.tables.append(Table(
            ["compiled alone by", "frame", "compiles per rank", "steps", "seconds", "the others meanwhile"],
            [[", ".join(d.ranks), d.code.rsplit("/", 1)[-1], ", ".join(f"{r}: {n}" for r, n in d.compiles.items()),
              ", ".join(map(str, d.steps)) or "-", seconds(d.seconds),
              "; ".join(f"{r} {what}" for r, what in d.others_doing.items())]
             for d in report.rank_differences],
            [17, 30, 20, 6, 8, 0],
        ))
    if report.uneven_compiles:
        section.tables.append(Table(
            ["step", "graph", "hash", "compiled on", "cached on"],
            [[str(u.step), str(u.position), u.hash[:10], ", ".join(u.compiled_on), ", ".join(u.cached_on)]
             for u in report.uneven_compiles],
            [4, 5, 10, 30, 0],
        ))
    if len(graphs) > 1 and not report.divergences:
        section.notes.append("every process ran the same graphs in the same order, as far as each got")
    return section
