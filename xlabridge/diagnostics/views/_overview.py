"""What the report opens on: the findings ranked by their cost in this run ("Fix first"), the time
split with every share, and the timeline of each process (a lane per kind of span), with the
colours both views give each kind of work."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xlabridge.diagnostics.report import SpanKind, TimeSplit
from xlabridge.diagnostics.views._model import (
    Lane,
    Part,
    Ranked,
    Section,
    Table,
    Timeline,
    plural,
    seconds,
    short_path,
    where,
)

if TYPE_CHECKING:
    from xlabridge.diagnostics.report import Finding, Report

_SHARE_WORDS = {"xla_compile": "XLA compile", "cpu_fallback": "CPU fallback", "backend_compile": "backend compile",
                "waiting_for_ranks": "wait for ranks"}
SHARE_LABELS: tuple[tuple[str, str], ...] = tuple(
    (name, _SHARE_WORDS.get(name, name.replace("_", " "))) for name in TimeSplit.SHARES
)
"""``(share, label)`` for each share of ``TimeSplit.SHARES``, in its order."""

JOB_SHARES = ("process_group", "collective_wait", "waiting_for_ranks")
"""Shares only the processes of a ``torch.distributed`` job have: rows shown where some process has them."""

SHARE_OF_KIND: dict[str, str] = {
    SpanKind.IMPORT.value: "imports",
    SpanKind.TRACE.value: "tracing",
    SpanKind.EXTRACT.value: "tracing",
    SpanKind.BACKEND_COMPILE.value: "backend_compile",
    SpanKind.XLA_COMPILE.value: "xla_compile",
    SpanKind.EXECUTE.value: "execution",
    SpanKind.DEVICE.value: "execution",
    SpanKind.CPU_FALLBACK.value: "cpu_fallback",
    SpanKind.LAZY.value: "lazy",
    SpanKind.TRANSFER.value: "transfers",
    SpanKind.EAGER.value: "eager",
    SpanKind.PROCESS_GROUP.value: "process_group",
    SpanKind.COLLECTIVE.value: "collective_wait",
    SpanKind.RANKS.value: "waiting_for_ranks",
    SpanKind.EXIT.value: "exit",
}
"""The share of the time split that each kind of span is a part of (tracing: Dynamo and the bridge)."""
SHARE_LABEL_OF_KIND: dict[str, str] = {kind: dict(SHARE_LABELS)[share] for kind, share in SHARE_OF_KIND.items()}

KIND_COLOURS: dict[str, str] = {
    SpanKind.IMPORT.value: "#b07aa1",
    SpanKind.TRACE.value: "#edc948",
    SpanKind.EXTRACT.value: "#9c755f",
    SpanKind.BACKEND_COMPILE.value: "#d37295",
    SpanKind.XLA_COMPILE.value: "#e15759",
    SpanKind.EXECUTE.value: "#4e79a7",
    SpanKind.DEVICE.value: "#a0cbe8",
    SpanKind.CPU_FALLBACK.value: "#f28e2b",
    SpanKind.LAZY.value: "#76b7b2",
    SpanKind.TRANSFER.value: "#59a14f",
    SpanKind.EAGER.value: "#ff9da7",
    SpanKind.PROCESS_GROUP.value: "#8cd17d",
    SpanKind.COLLECTIVE.value: "#499894",
    SpanKind.RANKS.value: "#79706e",
    SpanKind.EXIT.value: "#d4a6c8",
}
"""One colour per kind of span (and per share of the time split, through ``SHARE_OF_KIND``)."""
OTHER_COLOUR = "#bab0ac"
"""The colour of the ``other`` share and of span kinds this xlabridge does not know."""

FIX_FIRST = 5
"""Findings the ranked summary shows; the rest are listed under "Findings"."""


def share_colour(share: str) -> str:
    """The colour of a share of the time split: that of its first kind of span."""
    return next((KIND_COLOURS[k] for k, s in SHARE_OF_KIND.items() if s == share), OTHER_COLOUR)


def share_cells(split: TimeSplit) -> list[str]:
    """``2.50 s (25%)`` for each share of ``split``, in ``SHARE_LABELS`` order."""
    shares = split.shares()
    return [f"{seconds(getattr(split, key))} ({shares[key]:.0%})" for key, _ in SHARE_LABELS]


def short_process_name(report: Report, pid: int) -> str:
    """``rank 1``, ``launcher`` or ``pid 42``: a process in a table's column."""
    row = next((p for p in report.processes if p.pid == pid), None)
    if row is not None and row.role == "launcher":
        return "launcher"
    return f"rank {row.rank}" if row is not None and row.rank is not None else f"pid {pid}"


def process_name(report: Report, pid: int) -> str:
    """``rank 1 (pid 42)`` where the rank is known, ``launcher (pid 42)`` for a launcher of ranks, else ``pid 42``."""
    row = next((p for p in report.processes if p.pid == pid), None)
    if row is not None and row.role == "launcher":
        return f"launcher (pid {pid})"
    rank = row.rank if row is not None else None
    return f"rank {rank} (pid {pid})" if rank is not None else f"pid {pid}"


def time(report: Report) -> Section | None:
    """The time split: a row per share of ``TimeSplit.SHARES``, a column per process, a stacked bar
    per process (HTML), and the TPU view's compiles after the run on a line of their own."""
    if not report.time:
        return None
    several = len(report.time) > 1
    if several:
        summary = f"{plural(len(report.time), 'process')}, each one's wall time split into exclusive shares"
    else:
        summary = f"{seconds(report.time[0].wall)} wall, split into exclusive shares"
    headers = ["share"] + ([process_name(report, t.pid) for t in report.time] if several else ["seconds (of wall)"])
    rows = [[label] + [share_cells(t)[n] for t in report.time] for n, (key, label) in enumerate(SHARE_LABELS)
            if key not in JOB_SHARES or any(getattr(t, key) for t in report.time)]
    if several:
        rows.insert(0, ["wall"] + [seconds(t.wall) for t in report.time])
    section = Section("time", "Time", summary=summary,
                      tables=[Table(headers, rows, [15] + [max(17, len(h)) for h in headers[1:]])])
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
    "collective-split": ("call through a collective split", "calls through a collective split"),
    "cpu-only-graph": ("graph on the CPU", "graphs on the CPU"),
    "avoidable-collective": ("avoidable collective", "avoidable collectives"),
    "divergence": ("divergence", "divergences"),
    "uneven-compile": ("uneven compile", "uneven compiles"),
    "tpu-does-not-fit": ("graph too big for one TPU device", "graphs too big for one TPU device"),
    "tpu-refused": ("graph XLA:TPU refused", "graphs XLA:TPU refused"),
    "tpu-padding": ("padded array or matmul", "padded arrays and matmuls"),
    "tpu-f32-matmul": ("float32 matmul", "float32 matmuls"),
    "tpu-copy": ("layout copy", "layout copies"),
    "tpu-hbm": ("large array near HBM", "large arrays near HBM"),
    "tpu-uncosted": ("instruction the cost model cannot cost", "instructions the cost model cannot cost"),
    "stall": ("stall", "stalls"),
    "process-ended": ("process that did not end normally", "processes that did not end normally"),
    "compile-skipped": ("request to compile that Dynamo skips", "requests to compile that Dynamo skips"),
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


def _place(report: Report, finding: Finding) -> str:
    if finding.lineno <= 0 and finding.filename.startswith("<"):
        if finding.graph is not None:
            return f"graph {finding.graph}"
        return process_name(report, finding.pid) if finding.pid is not None and len(report.processes) > 1 else "the run"
    return where(finding.filename, finding.lineno, finding.function)


def ranked(report: Report) -> list[Ranked]:
    """The report's findings as the ranked summary shows them, in the report's order (costliest first)."""
    out = []
    for finding in (f for f in report.findings if f.kind != "probe"):
        wall = _wall_of(report, finding.pid)
        compiled = bool(finding.compiled_for) and finding.cost_seconds is None
        if compiled:
            cost, share = (f"{seconds(finding.cost_model_seconds)} by the cost model" if finding.cost_model_seconds
                           is not None else "no cost-model figure"), None
        elif finding.cost_seconds is None:
            cost, share = "no cost in time", None
        else:
            share = finding.cost_seconds / wall if wall > 0 else None
            cost = f"{seconds(finding.cost_seconds)} of {seconds(wall)}" + (f" ({share:.0%})" if share is not None else "")
        message = finding.message
        if finding.filename and not finding.filename.startswith("<"):  # its place as the views write it
            message = message.replace(finding.filename, short_path(finding.filename))
        out.append(Ranked(len(out) + 1, _place(report, finding), _what(finding), cost, share, finding.cost, finding.code,
                          finding.url, message, compiled))
    return out


def summary(report: Report) -> Section | None:
    """"Fix first": the first ``FIX_FIRST`` findings with a cost in time (the first findings when none has one),
    apart from those read from compiled TPU programs (``tpu_summary``)."""
    everything = ranked(report)
    items = [i for i in everything if not i.compiled]
    if not items:
        if not report.time and not everything:
            return None
        return Section("summary", "Fix first", summary="nothing found to fix in this run" if not everything else
                       "nothing measured to fix in this run; what the compiled TPU programs show follows")
    costly = [i for i in items[:FIX_FIRST] if i.share is not None]
    total = sum(f.cost_seconds or 0.0 for f in report.findings if f.kind != "probe")
    walls = sum(t.wall for t in report.time)
    line = f"{plural(len(items), 'finding')}, costliest in this run first"
    if total and walls:
        line += f"; together {seconds(total)} of {seconds(walls)} (they may overlap)"
    return Section("summary", "Fix first", summary=line, items=(costly or items)[:FIX_FIRST])


def tpu_summary(report: Report) -> Section | None:
    """"Fix first on TPU": the first ``FIX_FIRST`` findings read from the compiled TPU programs, costliest by
    XLA's cost model first, below what was measured, labelled with what compiled them."""
    items = [i for i in ranked(report) if i.compiled]
    if not items:
        return None
    label = next((f.compiled_for for f in report.findings if f.compiled_for), "")
    line = (f"{plural(len(items), 'finding')} read from the TPU programs {label}; costliest by XLA's cost model "
            "first (its seconds for one run of each program, not a measured time)")
    return Section("tpu-summary", "Fix first on TPU", summary=line, items=items[:FIX_FIRST])


def timeline(report: Report) -> Section | None:
    """A timeline per process: a lane per kind of span present (``SpanKind``'s order, unknown kinds
    after), over the process's wall time or its last span's end, whichever is later."""
    if not report.timeline:
        if not report.time:
            return None
        return Section("timeline", "Timeline", summary="not recorded (a report of schema /3 or older, or a log "
                       "without the events it is made of)")
    section = Section("timeline", "Timeline", summary="what each process did when, one lane per kind of work")
    pids = list(dict.fromkeys(span.pid for span in report.timeline))
    walls = {t.pid: t.wall for t in report.time}
    known = [kind.value for kind in SpanKind]
    for pid in pids:
        spans = [span for span in report.timeline if span.pid == pid]
        kinds = [k for k in known if any(s.kind == k for s in spans)]
        kinds += list(dict.fromkeys(s.kind for s in spans if s.kind not in known))
        # a span of summed calls reaches to its last call's end (``until``), past its summed seconds
        end = max([walls.get(pid, 0.0), *(max(s.start + s.seconds, s.until or 0.0) for s in spans)])
        lanes = [Lane(kind, KIND_COLOURS.get(kind, OTHER_COLOUR), [s for s in spans if s.kind == kind])
                 for kind in kinds]
        section.timelines.append(Timeline(pid, f"{process_name(report, pid)}: {seconds(end)}", end, lanes))
    return section
