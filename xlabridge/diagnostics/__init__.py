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
``read_run(directory)`` builds the report of a run's event logs (what ``xlabridge report``
wrote); ``read_trace(directory)`` the report of a ``TORCH_TRACE`` directory torch wrote, with or
without xlabridge in the run; ``build_report(events)`` makes a report of events in hand. ``render_text(report)`` and
``write_html(report, path)`` show one, ``write_trace(report, path)`` exports its timeline for
Perfetto.

Names are loaded on first use, so that the modules that only need the event vocabulary
(``events``) or the report's data types (``report``) import nothing else of the diagnostics.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "diagnose": "xlabridge.diagnostics._api",
    "explain": "xlabridge.diagnostics._api",
    "read_run": "xlabridge.diagnostics._api",
    "read_trace": "xlabridge.diagnostics._api",
    "build_report": "xlabridge.diagnostics._build.report",
    "Comparison": "xlabridge.diagnostics._compare",
    "compare": "xlabridge.diagnostics._compare",
    "SCHEMA": "xlabridge.diagnostics.report",
    "Report": "xlabridge.diagnostics.report",
    "render_text": "xlabridge.diagnostics.views",
    "write_html": "xlabridge.diagnostics.views",
    "write_trace": "xlabridge.diagnostics.views",
}
"""Each public name and the module that defines it."""

_MODULES = ("events", "report", "views")

__all__ = sorted([*_NAMES, *_MODULES])


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        value = getattr(importlib.import_module(_NAMES[name]), name)
    elif name in _MODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module 'xlabridge.diagnostics' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
