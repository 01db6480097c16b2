"""The ranks of a ``torch.distributed`` job compared: who each process is, what one rank compiled
that the others did not, the death that ended the job, and the rank that holds the others up.

Any launcher and process-group backend (torchrun with NCCL or gloo, TorchTPU's): a process is
named by the rank its environment gives (``RANK``), the launcher by its program
(``torch.distributed.run``, ``torchrun``). What one rank compiles alone, the others wait for at
their next collective; NCCL's watchdog ends a job that waits too long. So per rank the Dynamo
compilations of each frame (the frame's code: the same on every rank, where compile ids need not
be) at each step (optimizer steps before it) are compared: those only some ranks made are a
finding, with their cost (the compile seconds of the rank that made them), the breaks and guard
failures behind them, and what the other ranks were doing meanwhile (their timelines, on the wall
clock). Of the processes that died, the first leads: the others' deaths (the launcher's teardown
of the remaining ranks, its ``ChildFailedError``) followed from it and are told as its chain.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Sequence

from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._frames import UNKNOWN, UserCodeRule
from xlabridge.diagnostics.report import Finding, Process, ProcessEnding, RankDifference, Report

LAUNCHER_PROGRAMS = ("torchrun", "torch/distributed/run.py", "torch/distributed/launch.py",
                     "torch/distributed/elastic/agent/server/api.py")
"""How a launcher of ranks shows in its ``argv[0]``: torch's elastic launcher, as ``torchrun`` or
``python -m torch.distributed.run`` (or the older ``torch.distributed.launch``)."""


class Role:
    """What a process is to a distributed job (``Process.role``)."""

    LAUNCHER = "launcher"
    RANK = "rank"
    PROCESS = ""


def role(events: Sequence[ev.Event]) -> str:
    """``launcher``, ``rank`` or ``""`` (a process of its own), from its start event."""
    start = next((e for e in events if isinstance(e, ev.ProcessStart)), None)
    argv = (start.environment.get("argv") if start is not None else None) or []
    program = str(argv[0]).replace("\\", "/") if argv else ""
    if program.endswith(LAUNCHER_PROGRAMS):
        return Role.LAUNCHER
    return Role.RANK if events and events[0].rank is not None else Role.PROCESS


def name(row: Process) -> str:
    """How the report names a process in words: ``rank 1``, ``the launcher``, ``pid 1234``."""
    if row.role == Role.LAUNCHER:
        return "the launcher"
    return f"rank {row.rank}" if row.rank is not None else f"pid {row.pid}"


def helper_parents(by_pid: dict[int, list[ev.Event]]) -> dict[int, int]:
    """Each helper process and the observed process it belongs to: a Python child started with ``-c``
    (torch's checks during a compile: ``python -c`` with the rank's environment) by an observed process,
    folded into the nearest ancestor that is not a helper itself. Spawned workers, scripts and modules
    (a launcher's ranks) are processes of their own."""
    starts = {pid: next((e for e in events if isinstance(e, ev.ProcessStart)), None) for pid, events in by_pid.items()}
    direct = {pid: start.parent_pid for pid, start in starts.items()
              if start is not None and start.argv_kind == "command" and start.parent_pid in starts
              and start.parent_pid != pid}
    parents: dict[int, int] = {}
    for pid in direct:
        owner, seen = direct[pid], {pid}
        while owner in direct and owner not in seen:
            seen.add(owner)
            owner = direct[owner]
        if owner not in direct:
            parents[pid] = owner
    return parents


def fold_helpers(report: Report, by_pid: dict[int, list[ev.Event]]) -> None:
    """Helpers out of the time split, the processes and the timeline: their count and seconds go to
    the process they belong to (their time lies within its time: it waited for them)."""
    parents = helper_parents(by_pid)
    if not parents:
        return
    splits = {split.pid: split for split in report.time}
    for helper, parent in parents.items():
        own = splits.get(helper)
        owner = splits.get(parent)
        if owner is not None:
            owner.helpers += 1
            owner.helper_seconds += own.wall if own is not None else 0.0
    report.time = [split for split in report.time if split.pid not in parents]
    report.processes = [row for row in report.processes if row.pid not in parents]
    report.timeline = [span for span in report.timeline if span.pid not in parents]


def name_launchers(report: Report, by_pid: dict[int, list[ev.Event]]) -> None:
    """A process whose children are ranks is their launcher, whatever its program was called
    (``python -m torch.distributed.run`` starts with ``-m`` as its ``argv[0]``)."""
    parents = {start.parent_pid for events in by_pid.values()
               for start in (e for e in events if isinstance(e, ev.ProcessStart))
               if start.rank is not None and start.parent_pid}
    for row in report.processes:
        if row.pid in parents and row.rank is None:
            row.role = Role.LAUNCHER


# ---------------------------------------------------------------- what one rank compiled alone


@dataclasses.dataclass
class _Compile:
    code: tuple[str, int, str]
    compile_id: str
    step: int | None
    start: float
    end: float
    """Wall clock (``time.time()``), for lining ranks up."""


def _compiles(events: Sequence[ev.Event]) -> list[_Compile]:
    start = next((e for e in events if isinstance(e, ev.ProcessStart)), None)
    offset = (start.wall_time - start.t) if start is not None and start.wall_time else 0.0
    out = []
    for compile_ in (e for e in events if isinstance(e, ev.DynamoCompile) and e.trigger == "dynamo"):
        code = compile_.code
        key = (code.filename, code.lineno, code.function) if code is not None else (
            "", 0, f"frame {compile_.compile_id.split('/')[0]}")
        out.append(_Compile(key, compile_.compile_id, compile_.step, compile_.start + offset, compile_.t + offset))
    return sorted(out, key=lambda c: c.start)


def _ranks(report: Report, processes: Sequence[tuple[int, Sequence[ev.Event], UserCodeRule]]
           ) -> dict[int, tuple[Process, Sequence[ev.Event], UserCodeRule]]:
    """The process of each rank (the first started where several carry one rank: its helpers)."""
    rows = {p.pid: p for p in report.processes}
    found: dict[int, tuple[Process, Sequence[ev.Event], UserCodeRule]] = {}
    for pid, events, rule in processes:
        row = rows.get(pid)
        if row is None or row.role != Role.RANK or row.rank is None:
            continue
        held = found.get(row.rank)
        if held is None or (row.started or 0.0) < (held[0].started or 0.0):
            found[row.rank] = (row, events, rule)
    return found


def add_rank_differences(report: Report, processes: Sequence[tuple[int, Sequence[ev.Event], UserCodeRule]]) -> None:
    """Compilations some ranks made and others did not, as rows and one finding per frame."""
    ranks = _ranks(report, processes)
    if len(ranks) < 2:
        return
    compiles = {rank: _compiles(events) for rank, (_, events, _) in ranks.items()}
    counts = {rank: Counter((c.code, c.step) for c in items) for rank, items in compiles.items()}
    common: Counter = Counter()
    for n, counter in enumerate(counts.values()):
        common = counter.copy() if n == 0 else common & counter
    by_code: dict[tuple[str, int, str], dict[int, list[_Compile]]] = defaultdict(lambda: defaultdict(list))
    for rank, items in compiles.items():
        left = common.copy()
        for item in items:
            if left[(item.code, item.step)] > 0:
                left[(item.code, item.step)] -= 1
                continue
            by_code[item.code][rank].append(item)
    for code, extra in by_code.items():
        _add_difference(report, ranks, compiles, code, extra)


def _add_difference(report: Report, ranks: dict, compiles: dict[int, list[_Compile]], code: tuple[str, int, str],
                    extra: dict[int, list[_Compile]]) -> None:
    doers = sorted(extra)
    others = sorted(set(ranks) - set(doers))
    rank, (row, _, rule) = doers[0], ranks[doers[0]]
    items = extra[rank]
    ids = {c.compile_id for c in items}
    breaks = [b for b in report.dynamo_breaks if b.pid == row.pid and b.compile_id in ids]
    recompiles = [r for r in report.recompiles if r.pid == row.pid and r.compile_id in ids]
    graphs = [g for g in report.dynamo_graphs if g.pid == row.pid and g.compile_id in ids]
    place = _place(breaks, recompiles, graphs, code, rule)
    seconds = sum(c.end - c.start for c in items)
    steps = sorted({c.step for c in items if c.step is not None})
    doing = {f"rank {other}": _doing(report, ranks[other][0], items) for other in others}
    per_rank = {f"rank {r}": sum(1 for c in compiles[r] if c.code == code) for r in sorted(ranks)}
    report.rank_differences.append(RankDifference(
        kind="compile", code=f"{code[0]}:{code[1]} ({code[2]})" if code[0] else code[2],
        ranks=[f"rank {r}" for r in doers], others=[f"rank {r}" for r in others], compiles=per_rank,
        steps=steps, seconds=seconds, compile_ids=sorted(ids),
        breaks=[f"{b.filename}:{b.lineno}: {b.reason}" for b in breaks],
        guards=[r.guard or r.reason for r in recompiles], others_doing=doing,
        filename=place.filename, lineno=place.lineno, function=place.function,
    ))
    why = []
    if breaks:
        why.append(f"{len(breaks)} graph break(s) ({breaks[0].reason} at {breaks[0].filename}:{breaks[0].lineno})")
    if recompiles:
        guard = recompiles[0].guard or recompiles[0].reason
        why.append(f"{len(recompiles)} recompile(s) (guard {guard} failed)")
    at = f" at step{'s' if len(steps) > 1 else ''} {', '.join(map(str, steps))}" if steps else ""
    meanwhile = "; ".join(f"{who} {what}" for who, what in doing.items())
    message = (
        f"{', '.join(f'rank {r}' for r in doers)} alone compiled {code[2]} ({len(items)} compilation(s){at}, "
        f"{seconds:.2f} s{': ' + ' and '.join(why) if why else ''}); "
        f"{', '.join(f'rank {r}' for r in others)} did not. Meanwhile {meanwhile}. The other ranks wait for it at "
        "their next collective (NCCL's watchdog ends a job that waits past its timeout): make every rank take the "
        "same path through the compiled code (no rank-dependent Python branch or host read inside it)"
    )
    report.findings.append(Finding(
        "uneven-compile", message + ".", cost_seconds=seconds,
        cost=f"compile seconds on {', '.join(f'rank {r}' for r in doers)}, which the others wait out",
        count=len(items), category="dynamo", filename=place.filename, lineno=place.lineno, function=place.function,
        pid=row.pid,
    ))


def _place(breaks: list, recompiles: list, graphs: list, code: tuple[str, int, str], rule: UserCodeRule) -> ev.Frame:
    for row in [*breaks, *recompiles, *graphs]:
        if row.filename and row.filename != UNKNOWN.filename and row.lineno:
            return ev.Frame(row.filename, row.lineno, row.function)
    if code[0] and rule.is_user(code[0]):
        return ev.Frame(*code)
    return UNKNOWN


def _doing(report: Report, other: Process, items: list[_Compile]) -> str:
    """What a rank did during ``items`` (wall clock), from its timeline: its busiest kind of span."""
    if other.started is None:
        return "was not timed"
    busy: Counter = Counter()
    for span in (s for s in report.timeline if s.pid == other.pid):
        begin = other.started + span.start
        end = other.started + (span.until if span.until is not None else span.start + span.seconds)
        for item in items:
            overlap = min(end, item.end) - max(begin, item.start)
            if overlap > 0:
                busy[span.kind] += overlap * (span.seconds / max(end - begin, 1e-9))
    total = sum(c.end - c.start for c in items)
    if not busy or busy.most_common(1)[0][1] < 0.1 * total:
        return "did no observed work: waiting (in a collective, or in Python between steps)"
    kind, seconds = busy.most_common(1)[0]
    return f"spent {seconds:.2f} s of it in {_KIND_WORDS.get(kind, kind)}"


_KIND_WORDS = {
    "trace": "Dynamo compilations", "backend-compile": "backend compiles", "execute": "compiled graphs' calls",
    "import": "imports", "collective": "collectives (waiting for the others)", "device": "the device's work",
    "xla-compile": "XLA compilation", "lazy": "torch_xla.sync()",
    "collective-wait": "collectives, waiting for the others", "process-group": "process-group setup",
    "exit": "its exit",
}


# ---------------------------------------------------------------- deaths and hangs across ranks


_DIED = (ProcessEnding.FAILED.value, ProcessEnding.KILLED.value, ProcessEnding.VANISHED.value)


def death_chain(report: Report) -> None:
    """One finding for the first process that died, with the deaths that followed it as its chain.

    Replaces the ``process-ended`` findings of a run where several processes died: the first death
    (by the wall clock of its last event) is the cause; the launcher's error and its teardown of the
    other ranks (SIGTERM) follow from it."""
    ended = [f for f in report.findings if f.kind == "process-ended"]
    rows = {p.pid: p for p in report.processes}
    dead = [rows[f.pid] for f in ended if f.pid in rows and rows[f.pid].ending in _DIED]
    if len(dead) < 2:
        return

    def died_at(row: Process) -> float:
        if row.started is None or row.last_event_seconds is None:
            return float("inf")
        # a launcher's error comes after the rank it reports on: it waits for them
        return row.started + row.last_event_seconds + (1e-6 if row.role == Role.LAUNCHER else 0.0)

    dead.sort(key=died_at)
    first = dead[0]
    lead = next(f for f in ended if f.pid == first.pid)
    chain = []
    for row in dead[1:]:
        after = died_at(row) - died_at(first)
        what = row.how
        if row.role == Role.LAUNCHER:
            kind = row.exception.split(":", 1)[0] if row.exception else ""
            status = f" (exit status {row.exit_status})" if row.exit_status is not None else ""
            what = (f"raised {kind}{status}" if kind else what) + ": it reports the rank that failed, and ends the others"
        elif row.signal == "SIGTERM" and any(p.role == Role.LAUNCHER for p in report.processes):
            what += ": the launcher's teardown of the remaining ranks"
        chain.append(f"{name(row)} {what} ({after:+.2f} s)")
    lead.message = (lead.message.rstrip(".") + ". It died first; what followed from it: " + "; ".join(chain) + ".")
    lead.message = lead.message.replace(f"pid {first.pid}", name(first), 1) if first.rank is not None else lead.message
    report.findings[:] = [f for f in report.findings if f.kind != "process-ended" or f is lead]


_AUTOGRAD_WAIT = ("torch/autograd/graph.py", "_engine_run_backward")
"""Where a rank's main thread waits for its gradients' collectives: DDP's reducer and FSDP2's
reduce-scatter complete inside autograd's engine, which ``backward()`` enters here."""

_LAZY_BACKWARD = "compiling its backward graph (AOTAutograd's, at the first backward())"
_COMPILING = (
    ("torch/_dynamo/convert_frame.py", "_compile", "Dynamo compiling a frame"),
    ("torch/fx/experimental/proxy_tensor.py", "dispatch_trace", "tracing a graph (AOTAutograd's forward and backward)"),
    ("torch/_functorch/_aot_autograd/runtime_wrappers.py", "get_or_compile", _LAZY_BACKWARD),
    ("torch/_dynamo/backends/common.py", "_wrapped_bw_compiler", _LAZY_BACKWARD),
    ("torch/_inductor/compile_fx.py", "compile_fx_inner", "inductor compiling a graph"),
)
"""Frames that run only while torch compiles, with what each compiles. autograd's engine is no proof
of a wait: AOTAutograd runs it on fake tensors to trace the backward graph while Dynamo compiles the
forward (``dispatch_trace`` inside Dynamo's ``_compile``), and compiles that graph from inside it at
the first ``backward()`` (``get_or_compile``, and the wrapper ``aot_autograd(...)`` backends such as
inductor's hand it: ``_wrapped_bw_compiler``). A rank there is still compiling and waits for no other.
A backend that hands ``aot_module_simplified`` its own backward compiler leaves no such frame on torch
2.8 and 2.9; Dynamo's compile callbacks bracket that compile too (a stall's ``dynamo-compile``
activity, ``lazy_backward``)."""


def _compiling(frames: Sequence[ev.Frame], activities: Sequence[ev.Activity]) -> str:
    """What torch was compiling on a stalled thread, in words, or "" where it compiled nothing."""
    compile_ = next((a for a in activities if a.kind == ev.ActivityKind.DYNAMO_COMPILE), None)
    if compile_ is not None:
        return f"Dynamo compiling ({compile_.detail})"
    for frame in frames:  # outermost first: the compile that holds the others
        path = frame.filename.replace("\\", "/")
        words = next((words for filename, function, words in _COMPILING
                      if frame.function == function and path.endswith(filename)), "")
        if words:
            return words
    return ""


def _waits(frames: Sequence[ev.Frame], compiling: str) -> str:
    """Where ``frames`` wait for the other ranks (a collective call, a backward of a distributed model), or "".

    ``compiling``: what the thread was compiling (``_compiling``); a backward() that compiles waits for no one."""
    from xlabridge.diagnostics._build.endings import is_collective

    collective = next((f for f in reversed(frames) if is_collective(f)), None)
    if collective is not None:
        return f"the collective {collective.function}"
    if not compiling and any(f.filename.replace("\\", "/").endswith(_AUTOGRAD_WAIT[0])
                             and f.function == _AUTOGRAD_WAIT[1] for f in frames):
        return "backward(), where DDP's and FSDP's gradient collectives wait for every rank"
    return ""


def holdups(report: Report, processes: Sequence[tuple[int, Sequence[ev.Event], UserCodeRule]]) -> None:
    """A rank stalled outside any collective while the others stall waiting in one: it holds them up.

    Stalls of the launcher (it waits for its ranks by design) are no finding of their own."""
    rows = {p.pid: p for p in report.processes}
    launchers = {pid for pid, row in rows.items() if row.role == Role.LAUNCHER}
    report.findings[:] = [f for f in report.findings if not (f.kind == "stall" and f.pid in launchers)]
    stalls = []
    for pid, events, rule in processes:
        row = rows.get(pid)
        start = next((e for e in events if isinstance(e, ev.ProcessStart)), None)
        if row is None or row.role != Role.RANK or start is None:
            continue
        offset = start.wall_time - start.t
        ends = {e.since: e.t for e in events if isinstance(e, ev.StallEnd)}
        for stall in (e for e in events if isinstance(e, ev.Stall)):
            main = next((t for t in stall.threads if t.main), stall.threads[0] if stall.threads else None)
            frames = list(main.frames) if main is not None else []
            mine = [a for a in stall.activities if main is None or a.thread in ("", main.name)]
            compiling = _compiling(frames, mine)
            until = ends.get(stall.since, stall.t)
            stalls.append((row, stall.since + offset, until + offset, _waits(frames, compiling),
                           rule.innermost(frames), stall, compiling))
    waiting = [s for s in stalls if s[3]]
    for row, since, until, waits, place, stall, compiling in stalls:
        if waits:
            continue
        # waiting at least a stall's length while this rank was elsewhere
        held = [w for w in waiting if w[0].pid != row.pid and min(until, w[2]) - max(since, w[1]) >= stall.after]
        if not held:
            continue
        names = sorted({name(w[0]) for w in held})
        where = f"{place.filename}:{place.lineno} ({place.function})" if place is not UNKNOWN else "an unknown line"
        doing = compiling or "running Python, outside any collective"
        message = (f"{name(row)} holds up {', '.join(names)}: for {until - since:.1f} s it was at {where}, {doing}, "
                   f"while {'they wait' if len(names) > 1 else 'it waits'} in {held[0][3]}"
                   f" (at {held[0][4].filename}:{held[0][4].lineno}). Find why this rank alone is slow there: a "
                   "rank-dependent branch, a recompile, a host read, I/O.")
        if any(f.message == message for f in report.findings):
            continue
        # the holder's own stall, which this one explains (the waiters' stay: where each waits)
        told = {(row.pid, place.lineno)}
        report.findings[:] = [f for f in report.findings
                              if not (f.kind == "stall" and f.category != "rank-holdup" and (f.pid, f.lineno) in told)]
        report.findings.append(Finding(
            "stall", message, cost_seconds=min(until, max(w[2] for w in held)) - max(since, min(w[1] for w in held)),
            cost="seconds the other ranks waited for it", count=1, category="rank-holdup",
            filename=place.filename, lineno=place.lineno, function=place.function, pid=row.pid,
        ))
