"""How each process ended and how far it got, its stalls, and which process stopped when.

From one process's events: its ``process_end`` (why observation ended: exit, with the uncaught
exception if any; a signal), the ``signal`` events of signals it received and handed on, the
``process_exit`` its waiting parent wrote (the exit status, or the signal that ended it), and its
last event. A process without a ``process_end`` either still runs (the reader saw it alive) or
died without a word: SIGKILL, which is what the kernel's OOM killer sends, ``os._exit()``, a crash
in native code. Its report then holds everything its log held up to its death, and its time ends
at its last event.

A ``stall`` becomes a finding at the user's line of the main thread's stack (generated FX code
mapped back to the user's lines), with what the process was doing: the graph it traced, extracted
or ran (the probes' activities), a ``torch.distributed`` collective on its stack.
"""

from __future__ import annotations

import signal as _signal
from collections.abc import Sequence

from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._build.pod import FxLines, label
from xlabridge.diagnostics._build.timesplit import last_t
from xlabridge.diagnostics._frames import UNKNOWN, UserCodeRule
from xlabridge.diagnostics.report import Finding, Process, ProcessEnding

_COLLECTIVE_FILES = ("torch/distributed/distributed_c10d.py", "torch_xla/core/xla_model.py")
"""Where a collective call waits, as a Python frame: torch.distributed's and torch_xla's APIs."""
_COLLECTIVES = frozenset({
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "broadcast", "broadcast_object_list", "reduce",
    "gather", "scatter", "barrier", "monitored_barrier", "send", "recv", "isend", "irecv", "batch_isend_irecv",
    "wait", "rendezvous", "collective_permute", "reduce_scatter_bucketized", "all_gather_bucketized",
})

_OOM_WORDS = ("can't allocate memory", "out of memory", "outofmemory", "resource_exhausted", "memoryerror",
              "cannot allocate memory", "std::bad_alloc")


def _signal_number(name: str) -> int | None:
    try:
        return int(_signal.Signals[name])
    except KeyError:
        return None


def steps(events: Sequence[ev.Event]) -> int:
    """Steps the process completed: its optimizer steps, else its syncs and compile regions outside the
    bridge's extractions, else the calls of its most called compiled graph."""
    stepped = [e.steps for e in events if isinstance(e, ev.OptimizerSteps)]
    if stepped and max(stepped):
        return max(stepped)
    extracting = [(e.start, e.t) for e in events if isinstance(e, ev.Partitioned)]
    kinds = ("torch_xla.sync", "torch_xla.compile")
    syncs = sum(1 for e in events if isinstance(e, ev.Sync) and e.what in kinds
                and not any(start <= e.start and e.t <= end for start, end in extracting))
    syncs += sum(e.calls for e in events if isinstance(e, ev.SyncCalls) and e.what in kinds)
    if syncs:
        return syncs
    calls: dict[int, int] = {}
    for event in events:
        if isinstance(event, ev.GraphCalled):
            calls[event.graph] = calls.get(event.graph, 0) + 1
        elif isinstance(event, ev.GraphCalls):
            calls[event.graph] = calls.get(event.graph, 0) + event.calls
    return max(calls.values(), default=0)


def process_row(pid: int, events: Sequence[ev.Event], rule: UserCodeRule, running: bool) -> Process:
    """The report's row of one process: who, how far, how it ended."""
    start = next((e for e in events if isinstance(e, ev.ProcessStart)), None)
    end = next((e for e in reversed(events) if isinstance(e, ev.ProcessEnd)), None)
    exited = next((e for e in reversed(events) if isinstance(e, ev.ProcessExit)), None)
    received = [e for e in events if isinstance(e, ev.SignalReceived)]
    first = events[0]
    zero = end.start if end is not None else (start.t if start is not None else first.t)
    last = last_t(events)
    row = Process(pid=pid, rank=first.rank, world=first.world,
                  wall_seconds=(end.t - end.start) if end is not None else max(last - zero, 0.0),
                  last_event_seconds=max(last - zero, 0.0), started=start.wall_time if start else None,
                  steps=steps(events), run_id=start.run_id if start else "")
    frames: list[ev.Frame] = []
    if end is not None:
        row.exception, frames = end.exception, list(end.frames)
        if end.ending == ev.Ending.SIGNAL:
            row.signal = end.signal
        elif received:
            row.signal = received[-1].signal
    elif received:
        row.signal, frames = received[-1].signal, list(received[-1].frames)
    if exited is not None:
        status = 128 - exited.returncode if exited.returncode < 0 else exited.returncode
        row.exit_status = status
        if exited.returncode < 0:
            row.signal = exited.signal or row.signal
    elif end is not None and end.ending == ev.Ending.SIGNAL:
        number = _signal_number(end.signal)
        row.exit_status = 128 + number if number is not None else None
    # a process read from torch's structured trace: the trace does not say how it ended
    traced = any(isinstance(e, ev.TraceRead) for e in events)
    row.ending = _ending(row, end, exited, running, traced).value
    row.how = _how(row, end, received)
    place = rule.innermost(frames)
    if place is not UNKNOWN:
        row.filename, row.lineno, row.function = place.filename, place.lineno, place.function
    return row


def _ending(row: Process, end: ev.ProcessEnd | None, exited: ev.ProcessExit | None, running: bool,
            traced: bool) -> ProcessEnding:
    if exited is not None and exited.returncode < 0:
        return ProcessEnding.KILLED
    if end is not None and end.ending == ev.Ending.BLOCK and exited is None:
        return ProcessEnding.OBSERVED
    if end is not None and end.ending == ev.Ending.SIGNAL:
        return ProcessEnding.KILLED
    if row.exception or (row.exit_status or 0) != 0:
        return ProcessEnding.FAILED
    if end is not None or exited is not None:
        return ProcessEnding.EXITED
    if traced:
        return ProcessEnding.TRACED
    return ProcessEnding.RUNNING if running else ProcessEnding.VANISHED


def _how(row: Process, end: ev.ProcessEnd | None, received: list[ev.SignalReceived]) -> str:
    status = f" (exit status {row.exit_status})" if row.exit_status is not None else ""
    handled = [e for e in received if e.handler != "default"]
    heard = f"; it received {handled[-1].signal}, handed to {handled[-1].handler}" if handled else ""
    ending = ProcessEnding(row.ending)
    if ending == ProcessEnding.KILLED:
        words = f"ended by {row.signal or 'a signal'}{status}"
        if end is None:
            words += " before it could write a word: everything up to its last event is here"
        if row.signal == "SIGKILL":
            words += "; SIGKILL is what the kernel's OOM killer sends (dmesg on the machine says whether it did)"
        return words
    if ending == ProcessEnding.FAILED:
        if row.exception:
            words = f"raised {row.exception}{status}"
            if any(word in row.exception.lower() for word in _OOM_WORDS):
                words += ": it ran out of memory"
            return words + heard
        if end is None:
            return (f"exited{status} without ending its observation (os._exit(), or a crash in native code): "
                    "everything up to its last event is here" + heard)
        return f"exited{status}" + heard
    if ending == ProcessEnding.EXITED:
        if end is None:
            return f"exited{status} without ending its observation (os._exit())" + heard
        return f"exited{status}" + heard
    if ending == ProcessEnding.RUNNING:
        return "still running when this report was read: the report so far"
    if ending == ProcessEnding.TRACED:
        return "read from torch's structured trace, which does not record how a process ended"
    if ending == ProcessEnding.VANISHED:
        return ("stopped without a word: killed by SIGKILL (the kernel's OOM killer sends it), os._exit(), a crash "
                "in native code, or its machine went away; everything up to its last event is here")
    return "observed in a diagnose() block"


def ending_finding(row: Process, others: Sequence[Process]) -> Finding | None:
    """A finding for a process that did not end normally: how, when, how far it got, and how far
    the other processes of the run went."""
    if row.ending not in (ProcessEnding.FAILED.value, ProcessEnding.KILLED.value, ProcessEnding.VANISHED.value):
        return None
    who = label(row.pid, row.rank)
    message = f"{who} {row.how}. Its last event came {row.last_event_seconds or 0.0:.2f} s after its start"
    if row.steps:
        message += f", after {row.steps} step(s)"
    peers = [p for p in others if p.pid != row.pid]
    if peers:
        went_on = [p for p in peers if p.steps > row.steps]
        stopped_at = _wall(row)
        if went_on:
            message += (f"; {', '.join(f'{label(p.pid, p.rank)} ({p.steps})' for p in went_on)} went on further: on a "
                        "pod they wait for it at their next collective")
        if stopped_at is not None:
            first = min((_start(p) for p in [row, *peers] if _start(p) is not None), default=None)
            if first is not None:
                message += f". It stopped {stopped_at - first:.2f} s into the run"
    return Finding("process-ended", message + ".", count=1, category=row.ending, filename=row.filename or UNKNOWN.filename,
                   lineno=row.lineno, function=row.function or UNKNOWN.function, pid=row.pid)


def _start(row: Process) -> float | None:
    return row.started


def _wall(row: Process) -> float | None:
    if row.started is None or row.last_event_seconds is None:
        return None
    return row.started + row.last_event_seconds


def is_collective(frame: ev.Frame) -> bool:
    """Whether ``frame`` is a ``torch.distributed`` or torch_xla collective call, which waits for the others."""
    return frame.filename.replace("\\", "/").endswith(_COLLECTIVE_FILES) and frame.function in _COLLECTIVES


def stall_findings(events: Sequence[ev.Event], rule: UserCodeRule, graph_index: dict[int, int]) -> list[Finding]:
    """One finding per stall: how long no step made progress, where the main thread was, doing what.

    A stall is reported again while it lasts: one that ended is placed where it was first seen (what
    held the step up), one that did not (a hang, to the process's end) where it was seen last."""
    reports: dict[float, list[ev.Stall]] = {}
    for stall in (e for e in events if isinstance(e, ev.Stall)):
        reports.setdefault(stall.since, []).append(stall)
    if not reports:
        return []
    ends = {e.since: e.t for e in events if isinstance(e, ev.StallEnd)}
    fx = FxLines(events)
    has_end = any(isinstance(e, ev.ProcessEnd) for e in events)
    last = last_t(events)
    found = []
    for since, seen in reports.items():
        seen.sort(key=lambda e: e.t)
        resumed = ends.get(since)
        stall, other = (seen[0], seen[-1]) if resumed is not None else (seen[-1], seen[0])
        main, frames, place = _main_place(stall, fx, rule)
        until = resumed if resumed is not None else max(last, seen[-1].t)
        seconds = until - since
        after = ("then the step went on" if resumed is not None
                 else "until the process ended" if has_end else "until its last event (it ended or was read then)")
        also = ""
        if other is not stall:
            _, _, elsewhere = _main_place(other, fx, rule)
            if elsewhere != place:
                also = (f" ({'later' if other.t > stall.t else 'first'} seen at "
                        f"{elsewhere.filename}:{elsewhere.lineno} ({elsewhere.function}))")
        where = f"{place.filename}:{place.lineno} ({place.function})" if place is not UNKNOWN else "an unknown line"
        collective = any(is_collective(f) for f in frames)
        found.append(Finding(
            "stall",
            f"no step made progress for {seconds:.1f} s (stall after {stall.after:g} s), {after}: the main thread "
            f"was at {where}{also}{_doing(stall, main, frames, graph_index)}",
            cost_seconds=seconds, cost="seconds without progress", count=1,
            category="collective" if collective else (stall.activities[-1].kind.value if stall.activities else "python"),
            filename=place.filename, lineno=place.lineno, function=place.function, pid=stall.pid,
        ))
    return found


def _main_place(stall: ev.Stall, fx: FxLines, rule: UserCodeRule) -> tuple[ev.ThreadStack | None, list[ev.Frame],
                                                                             ev.Frame]:
    """The stall's main thread, its frames (generated code mapped back) and their innermost user frame."""
    main = next((t for t in stall.threads if t.main), stall.threads[0] if stall.threads else None)
    frames = fx.expand(main.frames) if main is not None else []
    return main, frames, rule.innermost(frames)


_NESTING = (ev.ActivityKind.DYNAMO_COMPILE, ev.ActivityKind.EXTRACTION, ev.ActivityKind.GRAPH_CALL,
            ev.ActivityKind.TORCHTPU_CALL, ev.ActivityKind.SYNC)
"""How activities nest, outermost first: a Dynamo compile holds nothing of the others, a graph's first
call holds the bridge's syncs."""


def _doing(stall: ev.Stall, main: ev.ThreadStack | None, frames: list[ev.Frame], graph_index: dict[int, int]) -> str:
    parts = []
    mine = [a for a in stall.activities if main is None or a.thread in ("", main.name)] or list(stall.activities)
    for activity in sorted(mine, key=lambda a: _NESTING.index(a.kind)):
        graph = f"FX graph {graph_index.get(activity.graph, activity.graph)}" if activity.graph is not None else ""
        parts.append({
            ev.ActivityKind.DYNAMO_COMPILE: f"Dynamo compiling ({activity.detail})",
            ev.ActivityKind.EXTRACTION: f"in the first call of {graph}: the bridge partitioning, tracing and "
                                        "XLA-compiling it",
            ev.ActivityKind.GRAPH_CALL: f"running {graph} ({activity.detail})",
            ev.ActivityKind.SYNC: f"inside {activity.detail}(): the step's lazy graph traced, compiled or run",
            ev.ActivityKind.TORCHTPU_CALL: f"running TorchTPU's {graph} ({activity.detail})",
        }[activity.kind])
    collective = next((f for f in reversed(frames) if is_collective(f)), None)
    if collective is not None:
        parts.append(f"waiting in the collective {collective.function} ({collective.filename.rsplit('/', 1)[-1]}): "
                     "another rank has not reached it (it is slower, stalled, or gone)")
    return ("; " + "; ".join(parts)) if parts else ""
