"""The timeline of one process: its events placed on its own clock, as the report's spans.

Starts are seconds from the process's ``process_start``. What the time split counts is placed
here: imports, Dynamo's compilations, the bridge's extractions, each call of a compiled graph
(the summed later calls as their spans: one call each, or, in a long run, several in a row summed
into one span from the first's start ``until`` the last's end), the CPU nodes of a call (at the
call's start: the probe measures their total, not where they fell), XLA compilations (their
events give the seconds and the moment they were seen, so each is drawn to end there),
``torch_xla.sync()`` calls outside the compiled graphs (a site's later ones summed the same way),
and the executions of eager-mode ops that torch_xla kept a sample of.
"""

from __future__ import annotations

from collections.abc import Sequence

from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._build.timesplit import Holes, decoded, merged
from xlabridge.diagnostics.report import Span, SpanKind


def spans(events: Sequence[ev.Event], graph_index: dict[int, int]) -> list[Span]:
    """The spans of one process's ``events``; ``graph_index`` maps its bridge graph numbers to
    the report's ``XlaGraph.index``."""
    start = next((e for e in events if isinstance(e, ev.ProcessStart)), None)
    if start is None:
        return []
    zero, pid = start.t, start.pid
    out: list[Span] = []

    def add(kind: SpanKind, begin: float, seconds: float, label: str, graph: int | None = None, calls: int = 1,
            until: float | None = None) -> None:
        out.append(Span(pid=pid, kind=kind.value, start=begin - zero, seconds=max(seconds, 0.0), label=label,
                        graph=graph, calls=calls, until=until - zero if until is not None else None))

    compiled_code: list[tuple[float, float]] = []
    for event in events:
        if isinstance(event, ev.Imported):
            add(SpanKind.IMPORT, event.start, event.t - event.start, event.module)
        elif isinstance(event, ev.DynamoCompile):
            add(SpanKind.TRACE, event.start, event.t - event.start, f"Dynamo {event.trigger} {event.compile_id}")
            compiled_code.append((event.start, event.t))
        elif isinstance(event, ev.Partitioned):
            add(SpanKind.EXTRACT, event.start, event.t - event.start, f"extract FX graph {graph_index.get(event.graph)}",
                graph_index.get(event.graph))
            compiled_code.append((event.start, event.t))
        elif isinstance(event, ev.XlaCompile) and event.seconds > 0:
            graph = graph_index.get(event.graph) if event.graph is not None else None
            what = f"FX graph {graph}" if graph is not None else "lazy graphs"
            add(SpanKind.XLA_COMPILE, event.t - event.seconds, event.seconds,
                f"XLA compile {what} ({event.phase.value}, {event.count})", graph)
        elif isinstance(event, ev.GraphCalled):
            graph = graph_index.get(event.graph)
            add(SpanKind.EXECUTE, event.start, event.t - event.start, f"FX graph {graph} call {event.call}", graph)
            compiled_code.append((event.start, event.t))
            if event.cpu_fallback_seconds:
                add(SpanKind.CPU_FALLBACK, event.start, event.cpu_fallback_seconds, f"CPU nodes of FX graph {graph}", graph)
        elif isinstance(event, ev.GraphCalls):
            graph = graph_index.get(event.graph)
            placed = 0
            for begin, seconds, calls, end in decoded(event.spans):
                placed += calls
                if calls == 1:
                    add(SpanKind.EXECUTE, begin, seconds, f"FX graph {graph} call", graph)
                    compiled_code.append((begin, begin + seconds))
                else:
                    add(SpanKind.EXECUTE, begin, seconds, f"FX graph {graph}: {calls} calls", graph, calls, end)
            rest = event.calls - placed
            if rest > 0:
                add(SpanKind.EXECUTE, event.t, 0.0, f"FX graph {graph}: {rest} more calls (summed, not placed)", graph, rest)
        elif isinstance(event, ev.BackendCompile):
            add(SpanKind.BACKEND_COMPILE, event.start, event.t - event.start,
                f"{event.backend} compile {event.compile_id} {event.role}".strip())
        elif isinstance(event, ev.CompiledCalls):
            for begin, seconds in event.spans:
                add(SpanKind.EXECUTE, begin, seconds, f"{event.backend} {event.compile_id} {event.role}")
                compiled_code.append((begin, begin + seconds))
            for begin, seconds in event.device_spans:
                add(SpanKind.DEVICE, begin, seconds, f"GPU: {event.backend} {event.compile_id} {event.role}")
            rest = event.calls - len(event.spans)
            if rest > 0:
                add(SpanKind.EXECUTE, event.t, 0.0, f"{event.backend} {event.compile_id} {event.role}: {rest} more "
                    "calls (summed, not placed)", calls=rest)
        elif isinstance(event, ev.SyncCalls):
            for begin, seconds, calls, end in decoded(event.spans):
                add(SpanKind.LAZY, begin, seconds, f"{event.what}()" + (f": {calls} calls" if calls > 1 else ""),
                    calls=calls, until=end if calls > 1 else None)
        elif isinstance(event, ev.DistSetup):
            add(SpanKind.PROCESS_GROUP, event.start, event.t - event.start, f"{event.what} {event.backend}".strip())
        elif isinstance(event, ev.CollectiveWaits):
            for begin, seconds, calls, end in decoded(event.spans):
                add(SpanKind.COLLECTIVE, begin, seconds, event.op + (f": {calls} calls" if calls > 1 else ""),
                    calls=calls, until=end if calls > 1 else None)
        elif isinstance(event, ev.RanksWaited):
            add(SpanKind.RANKS, event.start, event.t - event.start, f"waiting for {event.workers} ranks")
        elif isinstance(event, ev.ExitWork) and event.what != ev.ExitWork.OBSERVER:
            add(SpanKind.EXIT, event.start, event.t - event.start, f"{event.what} shut down")
        elif isinstance(event, ev.Exiting):
            end = next((e for e in reversed(events) if isinstance(e, ev.ProcessEnd)), None)
            if end is not None and end.t > event.t:
                add(SpanKind.EXIT, event.t, end.t - event.t, "interpreter exit")
        elif isinstance(event, ev.EagerOps):
            for begin, stop in merged((begin, begin + seconds) for begin, seconds in event.spans):
                add(SpanKind.EAGER, begin, stop - begin, "eager ops")
            rest = event.executions - len(event.spans)
            if rest > 0:
                add(SpanKind.EAGER, event.t, 0.0, f"{rest} more eager ops (summed, not placed)", calls=rest)
    holes = Holes(compiled_code)
    for event in events:
        if isinstance(event, ev.Sync) and holes.outside(event.start, event.t) > 0.5 * (event.t - event.start):
            add(SpanKind.LAZY, event.start, event.t - event.start, f"{event.what}()")
    out.sort(key=lambda s: (s.start, s.kind))
    return out
