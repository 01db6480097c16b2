"""The pod part of a report: XLA graphs a process ran (lazily traced ones too), the collectives
of each, and differences between processes; built from the events of ``_pod``.

What each collective means (``collective_causes.classify_collective``), which frame is the user's (the
process's ``UserCodeRule``) and where a line of Dynamo's generated code came from (``fx_code``
events: ``<eval_with_key>.N:L`` is mapped to the FX node's stack trace) are decided here, when
the report is built.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from typing import Any

from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._build import causes, collective_causes
from xlabridge.diagnostics._frames import UNKNOWN, UserCodeRule
from xlabridge.diagnostics.report import (
    CollectiveGroup,
    Finding,
    ProcessDivergence,
    ProcessEnding,
    Report,
    RunGraph,
    UnevenCompile,
    XlaGraph,
)

_GENERATED = re.compile(r"^<eval_with_key>\.\d+")


def _generated_name(filename: str) -> str | None:
    match = _GENERATED.match(filename)
    return match.group(0) if match else None


class FxLines:
    """The user stacks behind the lines of Dynamo's generated code, for one process."""

    def __init__(self, events: Sequence[ev.Event]) -> None:
        self.lines: dict[str, dict[int, tuple[ev.Frame, ...]]] = {}
        for code in events:
            if isinstance(code, ev.FxCode):
                name = _generated_name(code.filename) or code.filename
                self.lines.setdefault(name, {}).update({line.lineno: line.frames for line in code.lines})

    def expand(self, frames: Sequence[Any]) -> list[ev.Frame]:
        """``frames`` with each frame of generated code replaced by its node's stack trace."""
        out: list[ev.Frame] = []
        for frame in frames:
            name = _generated_name(frame.filename)
            node = self.lines.get(name, {}).get(frame.lineno) if name else None
            out += list(node) if node else [ev.Frame(frame.filename, frame.lineno, frame.function)]
        return out


def user_frame(rule: UserCodeRule, fx: FxLines, stack: Sequence[Any], source: Any = None) -> ev.Frame:
    """The innermost user frame of ``stack`` (generated code mapped back), else the HLO
    metadata's ``source`` line if it is the user's, else ``UNKNOWN``."""
    frame = rule.innermost(fx.expand(stack))
    if frame is UNKNOWN and source is not None and source.file and rule.is_user(source.file):
        frame = ev.Frame(source.file, source.line, source.op_type)
    return frame


def label(pid: int, rank: int | None) -> str:
    """How a process is named in the report: ``rank 1`` where known, else ``pid 1234``."""
    return f"rank {rank}" if rank is not None else f"pid {pid}"


def divergences(processes: Sequence[tuple[str, Sequence[ev.Event], Callable[[str], bool]]],
                stopped: Collection[str] = ()) -> tuple[list, list]:
    """``find_divergences`` over the processes that recorded their runs (two or more).

    A process of ``stopped`` (it died, or still runs) ran nothing past its last graph: the places
    after it are compared among the others only (the report says elsewhere which stopped when)."""
    from xlabridge.pod import ProcessRun, find_divergences
    from xlabridge.pod._divergence import GraphSources
    from xlabridge.pod._lazy import GraphRun, classify_cause

    runs, rules = [], []
    for name, events, is_user in processes:
        recorded = [e for e in events if isinstance(e, ev.LazyRuns)]
        if not recorded:
            continue
        sources = {e.hash: GraphSources.from_dict(e.sources) for e in events
                   if isinstance(e, ev.GraphCollectives) and e.sources}
        runs.append(ProcessRun(
            name,
            tuple(GraphRun(r.step, r.hash, classify_cause(r.cause), r.compiled) for e in recorded for r in e.runs),
            {}, sources,
        ))
        rules.append(is_user)
    if len(runs) < 2:
        return [], []
    found, uneven = find_divergences(runs, is_user=lambda filename: any(rule(filename) for rule in rules))
    last = {run.process: _last_place(run.runs) for run in runs if run.process in stopped}
    kept = []
    for divergence in found:
        place = (divergence.step, divergence.position)
        rest = {name: digest for name, digest in divergence.graphs.items()
                if not (name in last and digest is None and place > last[name])}
        if len(set(rest.values())) > 1:
            kept.append(divergence)
    return kept, uneven


def _last_place(runs: Sequence[Any]) -> tuple[int, int]:
    """``(step, position)`` of the last of a process's graph runs (``(-1, -1)``: none)."""
    place = (-1, -1)
    for run in runs:
        place = (run.step, place[1] + 1) if run.step == place[0] else (run.step, 0)
    return place


def add_run_graphs(report: Report, pid: int, events: Sequence[ev.Event], rule: UserCodeRule) -> None:
    """The graphs torch_xla's debug file recorded, and the collectives XLA compiled into each."""
    from xlabridge.pod import PartitionedGraph
    from xlabridge.pod._lazy import GraphCause, classify_cause

    first = events[0]
    process = label(pid, first.rank)
    fx = FxLines(events)
    compiled = {e.hash: e for e in (e for e in events if isinstance(e, ev.GraphCollectives))}
    dynamo = {GraphCause.DYNAMO_COMPILE, GraphCause.DYNAMO_EXECUTE}
    for seen in (e for e in events if isinstance(e, ev.LazyGraphSeen)):
        cause = classify_cause(seen.cause)
        where = rule.innermost(fx.expand(seen.frames))
        collectives = compiled.get(seen.hash)
        graph = PartitionedGraph.from_dict(collectives.partitioned) if collectives else None
        totals = graph.totals().values() if graph else ()
        report.run_graphs.append(RunGraph(
            hash=seen.hash, origin="dynamo" if cause in dynamo else "lazy", cause=cause.value,
            cause_text=seen.cause, compiles=seen.compiles, executions=seen.executions,
            filename=where.filename, lineno=where.lineno, function=where.function, module=seen.module,
            num_partitions=graph.num_partitions if graph else 1, collectives=sum(t.count for t in totals),
            collective_bytes=sum(t.bytes for t in totals),
            pid=pid, process=process,
        ))
        row = report.run_graphs[-1]
        if where is UNKNOWN:
            _place_without_frames(row, report, pid, events)
        if graph is None:
            continue
        # a collective with no source line of its own (a backward pass's gradient reduction: its
        # HLO carries no Python stack) is placed at its graph's line
        graph_line = ev.Frame(row.filename, row.lineno, row.function) if row.lineno else UNKNOWN
        groups: dict[tuple, list] = {}
        for collective in graph.collectives:
            cause_row = collective_causes.classify_collective(collective, graph)
            line = user_frame(rule, fx, collective.stack, collective.source)
            own = line is not UNKNOWN and line.lineno > 0
            groups.setdefault((collective.kind.value, cause_row.category, line if own else graph_line, own),
                              []).append((collective, cause_row))
        for (kind, category, line, own), members in groups.items():
            cause_row = members[0][1]
            runs = [c.executions if c.executions is not None else 1 for c, _ in members]
            group = CollectiveGroup(
                hash=seen.hash, module=collectives.module, module_id=collectives.module_id, kind=kind, count=sum(runs),
                bytes=sum(c.bytes * n for (c, _), n in zip(members, runs)),
                replica_groups=[list(g) for g in members[0][0].replica_groups], category=category,
                avoidable=cause_row.avoidable, suggestion=cause_row.suggestion, filename=line.filename,
                lineno=line.lineno, function=line.function,
                op_type=members[0][0].source.op_type if members[0][0].source else "",
                unknown_executions=sum(c.executions is None for c, _ in members), pid=pid,
                place_note="" if own else ("no Python line in its HLO (a backward pass's communication has none): "
                                           "its graph's line" if line.lineno else "no Python line in its HLO"),
            )
            report.collectives.append(group)
            if group.avoidable:
                report.findings.append(Finding(
                    "avoidable-collective",
                    f"{process}: graph {seen.hash[:10]} ({collectives.module}) runs {group.count} {kind} "
                    f"({group.bytes} bytes per device) per run for {place(line)}: {cause_row.suggestion}",
                    count=group.count, category=category, filename=line.filename, lineno=line.lineno,
                    function=line.function, pid=pid,
                ))


def add_divergences(report: Report, processes: Sequence[tuple[int, Sequence[ev.Event], UserCodeRule]]) -> None:
    """Graphs that differ between processes at the same step, and compiles only some did."""
    stopped = {label(p.pid, p.rank) for p in report.processes
               if p.ending in (ProcessEnding.FAILED.value, ProcessEnding.KILLED.value, ProcessEnding.VANISHED.value,
                               ProcessEnding.RUNNING.value)}
    found, uneven = divergences([
        (label(pid, events[0].rank), events, rule.is_user) for pid, events, rule in processes
    ], stopped)
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


def place(frame: ev.Frame) -> str:
    """``file:line (function)`` of ``frame``, or words saying it is unknown."""
    return f"{frame.filename}:{frame.lineno} ({frame.function})" if frame is not UNKNOWN else "an unknown line"


def _place_without_frames(row: RunGraph, report: Report, pid: int, events: Sequence[ev.Event]) -> None:
    """A line for a graph whose stack holds no frame of the user's: autograd runs backward graphs,
    and the bridge's syncs of their pending inputs, with no Python caller. A graph the bridge ran
    takes its FX graph's line (``<eval_with_key>.N`` in its stack names the FX graph; a backward
    graph's line is its forward's); a sync of pending inputs takes the line of the graph that ran
    next."""
    graphs = {g.graph: g for g in report.xla_graphs if g.pid == pid}
    by_code = {e.filename: graphs.get(e.graph) for e in events if isinstance(e, ev.FxCode) and e.graph is not None}
    stacks = {e.hash: e.frames for e in events if isinstance(e, ev.LazyGraphSeen)}

    def fx_graph(digest: str) -> XlaGraph | None:
        return next((by_code[f.filename] for f in reversed(stacks.get(digest, [])) if by_code.get(f.filename)), None)

    graph = fx_graph(row.hash)
    if graph is not None:
        row.filename, row.lineno, row.function = graph.filename, graph.lineno, graph.function
        row.place_note = (f"runs FX graph {graph.index} ({graph.role})"
                          + (": placed at its forward's line, autograd runs it with no Python caller"
                             if graph.role == "backward" else ""))
        return
    runs = [run for e in events if isinstance(e, ev.LazyRuns) for run in e.runs]
    after = next((i for i, run in enumerate(runs) if run.hash == row.hash), None)
    following = next((g for run in runs[after + 1:] if (g := fx_graph(run.hash)) is not None), None) \
        if after is not None and "dynamo" in row.cause_text else None
    if following is not None:
        row.filename, row.lineno, row.function = following.filename, following.lineno, following.function
        row.place_note = (f"the bridge's sync of pending inputs before FX graph {following.index} "
                          f"({following.role}) ran: placed at that graph's line")
    else:
        row.place_note = "torch_xla recorded no Python frame of the user's for it"
