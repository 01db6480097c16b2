"""Views of a ``Report``: one section model (``_sections.build``), rendered as text and as HTML,
and its timeline as a Chrome/Perfetto trace.

``_sections.build(report)`` decides what is shown, in which order, with which columns; the
renderers only lay it out (``render_text``: a terminal table read in ten seconds;
``write_html``: a self-contained page that opens on the ranked findings and a timeline of the
run, with a picture per FX graph and the report's JSON; ``write_trace``: trace-event JSON).
The views read the report's data types and nothing else of the diagnostics; whoever shows a
report (the CLI, a user) picks the view.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from xlabridge.diagnostics.views import _html, _text, _trace

if TYPE_CHECKING:
    from xlabridge.diagnostics.report import Report

__all__ = ["render_text", "write_html", "write_trace"]


def render_text(report: Report) -> str:
    """``report`` as terminal text (tables of at most ``_text.WIDTH`` columns)."""
    return _text.render(report)


def write_html(report: Report, path: str | os.PathLike[str]) -> Path:
    """Write ``report`` as a self-contained HTML page at ``path``; returns the path."""
    return _html.write(report, Path(path))


def write_trace(report: Report, path: str | os.PathLike[str]) -> Path:
    """Write ``report``'s timeline at ``path`` as Chrome trace-event JSON (Perfetto opens it): a process
    per pid, a thread per kind of span, a complete event per span; returns the path."""
    return _trace.write(report, Path(path))
