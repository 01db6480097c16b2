"""The report's timeline as Chrome trace-event JSON, which Perfetto (ui.perfetto.dev) and
``chrome://tracing`` open: one process per pid, one thread per kind of span, a complete event
(``"ph": "X"``) per span.

The format is the Trace Event Format's JSON object form: ``{"traceEvents": [...]}`` with
``ts`` and ``dur`` in microseconds; metadata events (``"ph": "M"``) name the processes and
threads and order the threads as the HTML timeline's lanes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xlabridge.diagnostics.report import SpanKind
from xlabridge.diagnostics.views.overview import process_name

if TYPE_CHECKING:
    from xlabridge.diagnostics.report import Report

_MICROSECONDS = 1e6


def _lanes(report: Report) -> list[str]:
    """Every kind of span in the report: ``SpanKind``'s order, then kinds this xlabridge does not know."""
    known = [kind.value for kind in SpanKind]
    return known + list(dict.fromkeys(span.kind for span in report.timeline if span.kind not in known))


def trace_events(report: Report) -> dict[str, Any]:
    """The timeline of ``report`` as a trace-event JSON object (``{"traceEvents": [...]}``)."""
    lanes = {kind: number for number, kind in enumerate(_lanes(report), start=1)}
    events: list[dict[str, Any]] = []
    pids = list(dict.fromkeys(span.pid for span in report.timeline))
    for sort, pid in enumerate(pids):
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                       "args": {"name": f"xlabridge: {process_name(report, pid)}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": sort}})
        for kind in dict.fromkeys(span.kind for span in report.timeline if span.pid == pid):
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": lanes[kind], "args": {"name": kind}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": lanes[kind],
                           "args": {"sort_index": lanes[kind]}})
    for span in report.timeline:
        events.append({
            "name": span.label or span.kind,
            "cat": span.kind,
            "ph": "X",
            "ts": span.start * _MICROSECONDS,
            "dur": max(0.0, span.seconds) * _MICROSECONDS,
            "pid": span.pid,
            "tid": lanes[span.kind],
            "args": {"graph": span.graph, "calls": span.calls, "seconds": span.seconds},
        })
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"source": "xlabridge report", "clock": "seconds from each process's observation start"},
    }


def write(report: Report, path: Path) -> Path:
    """Write ``trace_events(report)`` as JSON at ``path``; return ``path``."""
    path.write_text(json.dumps(trace_events(report)) + "\n", encoding="utf-8")
    return path
