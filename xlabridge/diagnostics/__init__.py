"""Why a compiled model is slow and split: Dynamo graph breaks, HLO lowering breaks,
recompilations, and where the time goes.

Diagnostics flow one way. What observes a run (``_observe``: the session, the recorder, the
probes, the whole-process and pod capture) emits typed events (``events``, the log format);
a ``Report`` (``report``, plain data) is built from events only (``_build``); views render it
(``views``: text, HTML, a Perfetto trace).

``explain(fn)(*args)`` runs ``fn`` once under the xlabridge backend and returns a ``Report``;
``with diagnose() as report:`` collects over a whole training loop compiled with
``backend="xlabridge"`` or ``backend="openxla"``; ``compare(step, *args)`` runs one step
lazily and compiled, side by side, to tell which kind of break costs the time.
``build_report(events)`` makes a report of an event log; ``render_text(report)`` and
``write_html(report, path)`` show one, ``write_trace(report, path)`` exports its timeline for
Perfetto.
"""

from xlabridge.diagnostics import events
from xlabridge.diagnostics._api import diagnose, explain
from xlabridge.diagnostics._build.report import build_report
from xlabridge.diagnostics._compare import Comparison, compare
from xlabridge.diagnostics.report import SCHEMA, Report
from xlabridge.diagnostics.views import render_text, write_html, write_trace

__all__ = [
    "SCHEMA",
    "Comparison",
    "Report",
    "build_report",
    "compare",
    "diagnose",
    "events",
    "explain",
    "render_text",
    "write_html",
    "write_trace",
]
