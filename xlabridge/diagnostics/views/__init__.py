"""Views of a ``Report``: one section model (``sections.build``), rendered as text and as HTML.

``sections.build(report)`` decides what is shown, in which order, with which columns; the
renderers only lay it out (``render_text``: a terminal table read in ten seconds;
``write_html``: a self-contained page with a picture per FX graph and the report's JSON).
The views read the report's data types and nothing else of the diagnostics; whoever shows a
report (the CLI, a user) picks the view.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from xlabridge.diagnostics.views import html, text

if TYPE_CHECKING:
    from xlabridge.diagnostics.report import Report

__all__ = ["render_text", "write_html"]


def render_text(report: Report) -> str:
    """``report`` as terminal text (tables of at most ``text.WIDTH`` columns)."""
    return text.render(report)


def write_html(report: Report, path: str | os.PathLike[str]) -> Path:
    """Write ``report`` as a self-contained HTML page at ``path``; returns the path."""
    return html.write(report, Path(path))
