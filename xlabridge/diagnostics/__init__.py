"""Why a compiled model is slow and split: Dynamo graph breaks, HLO lowering breaks,
recompilations, and where the time goes.

Probes (``_probes``, the only code touching torch/torch_xla internals) emit typed events
(``events``); a ``Report`` is built from events only; views render it as text and HTML.

``explain(fn)(*args)`` runs ``fn`` once under the xlabridge backend and returns a ``Report``;
``with diagnose() as report:`` collects over a whole training loop compiled with
``backend="xlabridge"`` or ``backend="openxla"``; ``compare(step, *args)`` runs one step
lazily and compiled, side by side, to tell which kind of break costs the time.
``build_report(events)`` makes a report of an event log; ``render_text(report)`` and
``write_html(report, path)`` show one, ``write_trace(report, path)`` exports its timeline for Perfetto. ``record_graph`` and ``record_compile_path`` are how a
backend reports what it compiles.
"""

from xlabridge.diagnostics import events
from xlabridge.diagnostics._api import (
    diagnose,
    explain,
    record_compile_path,
    record_graph,
    torchtpu_stand_in,
    tpu_present,
)
from xlabridge.diagnostics._build import build_report
from xlabridge.diagnostics.compare import Comparison, compare
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
    "record_compile_path",
    "record_graph",
    "render_text",
    "torchtpu_stand_in",
    "tpu_present",
    "write_html",
    "write_trace",
]
