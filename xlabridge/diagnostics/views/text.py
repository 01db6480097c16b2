"""The report as plain text of at most ``WIDTH`` columns, section by section."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from xlabridge.diagnostics.views import sections
from xlabridge.diagnostics.views.sections import Section, Table

if TYPE_CHECKING:
    from xlabridge.diagnostics.report import Report

WIDTH = 120
"""Columns the text is laid out for."""


def render(report: Report) -> str:
    """``report`` as text: a heading line per section, then its tables and notes."""
    lines: list[str] = []
    for section in sections.build(report):
        lines += _section(section)
    return "\n".join(lines).strip("\n")


def _section(section: Section) -> list[str]:
    lines = [""]
    if section.key == "environment":
        return [f"{section.title}: {section.summary}"]
    if section.title:
        lines.append(f"{section.title}: {section.summary}" if section.summary else f"{section.title}:")
    for number, table in enumerate(section.tables):
        if number:
            lines.append("")
        lines += _table(table)
    bullet = "  - " if section.title else ""
    for note in section.notes:
        lines += _wrap(note, indent=bullet, subsequent=" " * len(bullet))
    return lines


def _table(table: Table) -> list[str]:
    """Rows under headers, each cell wrapped to its column; a cap of 0 takes what is left.

    Columns are as wide as their widest cell up to their cap, and the flexible column gets
    the rest of ``WIDTH`` (at least 20), so long suggestions wrap instead of running off.
    """
    indent, gap = "  ", "  "
    headers, rows, caps = table.headers, table.rows, table.caps
    natural = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    widths = [min(n, cap) if cap else n for n, cap in zip(natural, caps)]
    fixed = sum(w for w, cap in zip(widths, caps) if cap)
    left = WIDTH - len(indent) - len(gap) * (len(headers) - 1) - fixed
    widths = [w if cap else max(20, min(w, left)) for w, cap in zip(widths, caps)]
    out = []
    for cells in [headers, *rows]:
        wrapped = [textwrap.wrap(cell, width) or [""] for cell, width in zip(cells, widths)]
        for line_no in range(max(len(w) for w in wrapped)):
            parts = [(w[line_no] if line_no < len(w) else "").ljust(width) for w, width in zip(wrapped, widths)]
            out.append((indent + gap.join(parts)).rstrip())
    return out


def _wrap(text: str, *, indent: str, subsequent: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=subsequent) or [indent.rstrip()]
