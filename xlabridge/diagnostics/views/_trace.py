"""The report's timeline as Chrome trace-event JSON, which Perfetto (ui.perfetto.dev) and
``chrome://tracing`` open: one process per pid, one thread per kind of span (more where spans
of a kind overlap, so that every span shows), a complete event (``"ph": "X"``) per span.

The findings read from compiled TPU programs (``compiled_for``) are a process of their own, named
with what compiled them: one slice per finding, laid end to end in the cost model's seconds (not a
time measured on a TPU), costliest first; a finding without a cost-model figure is an instant.

The format is the Trace Event Format's JSON object form: ``{"traceEvents": [...]}`` with
``ts`` and ``dur`` in microseconds; metadata events (``"ph": "M"``) name the processes and
threads and order the threads as the HTML timeline's lanes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xlabridge.diagnostics.report import Span, SpanKind
from xlabridge.diagnostics.views._model import where
from xlabridge.diagnostics.views._overview import process_name

if TYPE_CHECKING:
    from xlabridge.diagnostics.report import Report

_MICROSECONDS = 1e6
_TRACKS = 64
"""Thread ids each kind of span may use in a process (a kind's overlapping spans beyond it share its last)."""


def _lanes(report: Report) -> list[str]:
    """Every kind of span in the report: ``SpanKind``'s order, then kinds this xlabridge does not know."""
    known = [kind.value for kind in SpanKind]
    return known + list(dict.fromkeys(span.kind for span in report.timeline if span.kind not in known))


def _tracks(spans: list[Span]) -> list[int]:
    """A track number per span (in ``spans``' order) such that spans of one track never overlap: Perfetto
    drops slices of one thread that overlap without nesting (summed calls laid over single ones)."""
    ends: list[float] = []
    tracks = [0] * len(spans)
    for index in sorted(range(len(spans)), key=lambda i: (spans[i].start, -spans[i].seconds)):
        span = spans[index]
        track = next((t for t, end in enumerate(ends) if end <= span.start), len(ends))
        if track == len(ends):
            ends.append(0.0)
        ends[track] = _end(span)
        tracks[index] = track
    return tracks


def _end(span: Span) -> float:
    """Where a span ends on its track: several calls summed into one span cover the stretch they ran in."""
    if span.until is not None and span.until > span.start:
        return span.until
    return span.start + max(0.0, span.seconds)


def trace_events(report: Report) -> dict[str, Any]:
    """The timeline of ``report`` as a trace-event JSON object (``{"traceEvents": [...]}``): a thread per
    kind of span in each process (a second one, ``execute 2``, where spans of that kind overlap)."""
    order = {kind: number for number, kind in enumerate(_lanes(report))}
    metadata: list[dict[str, Any]] = []
    complete: list[dict[str, Any]] = []
    for sort, pid in enumerate(dict.fromkeys(span.pid for span in report.timeline)):
        metadata.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                         "args": {"name": f"xlabridge: {process_name(report, pid)}"}})
        metadata.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": sort}})
        mine = [span for span in report.timeline if span.pid == pid]
        for kind in sorted(dict.fromkeys(span.kind for span in mine), key=order.__getitem__):
            spans = [span for span in mine if span.kind == kind]
            tracks = _tracks(spans)
            for track in range(min(max(tracks) + 1, _TRACKS)):
                tid = 1 + order[kind] * _TRACKS + min(track, _TRACKS - 1)
                name = kind if not track else f"{kind} {track + 1}"
                metadata.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
                metadata.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                                 "args": {"sort_index": tid}})
            for span, track in zip(spans, tracks):
                complete.append({
                    "name": span.label or span.kind,
                    "cat": span.kind,
                    "ph": "X",
                    "ts": span.start * _MICROSECONDS,
                    "dur": (_end(span) - span.start) * _MICROSECONDS,
                    "pid": pid,
                    "tid": 1 + order[kind] * _TRACKS + min(track, _TRACKS - 1),
                    "args": {"graph": span.graph, "calls": span.calls, "seconds": span.seconds},
                })
    _tpu_findings(report, metadata, complete)
    return {
        "traceEvents": metadata + sorted(complete, key=lambda e: (e["pid"], e["tid"], e["ts"])),
        "displayTimeUnit": "ms",
        "otherData": {"source": "xlabridge report", "clock": "seconds from each process's observation start"},
    }


def _tpu_findings(report: Report, metadata: list[dict[str, Any]], complete: list[dict[str, Any]]) -> None:
    """The findings read from compiled TPU programs as a process of their own (see the module docstring)."""
    found = [f for f in report.findings if f.compiled_for and f.cost_seconds is None]
    if not found:
        return
    pid = max((span.pid for span in report.timeline), default=0) + 1
    metadata.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                     "args": {"name": f"xlabridge: TPU findings, {found[0].compiled_for} (cost model seconds)"}})
    metadata.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
    metadata.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "cost model"}})
    at = 0.0
    for finding in found:
        event = {
            "name": f"{finding.kind}: {where(finding.filename, finding.lineno, finding.function)}",
            "cat": finding.kind, "pid": pid, "tid": 1, "ts": at * _MICROSECONDS,
            "args": {"message": finding.message, "compiled_for": finding.compiled_for,
                     "cost_model_seconds": finding.cost_model_seconds, "count": finding.count},
        }
        if finding.cost_model_seconds:
            event.update({"ph": "X", "dur": finding.cost_model_seconds * _MICROSECONDS})
            at += finding.cost_model_seconds
        else:
            event.update({"ph": "i", "s": "t"})
        complete.append(event)


def write(report: Report, path: Path) -> Path:
    """Write ``trace_events(report)`` as JSON at ``path``; return ``path``."""
    path.write_text(json.dumps(trace_events(report)) + "\n", encoding="utf-8")
    return path
