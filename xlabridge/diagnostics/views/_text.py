"""The report as plain text of at most ``WIDTH`` columns, section by section: the ranked findings
first, the time split, a strip per kind of work over the run, then the tables."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from xlabridge.diagnostics.views import _sections as sections
from xlabridge.diagnostics.views._sections import Ranked, Section, Table, Timeline

if TYPE_CHECKING:
    from xlabridge.diagnostics.report import Report

WIDTH = 120
"""Columns the text is laid out for."""

_STRIP = 90
"""Columns of a timeline strip (each one ``end / _STRIP`` seconds of the process's run), fewer where
a lane's name is long enough to push the strip past ``WIDTH``."""


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
        heading = f"{section.title}: {section.summary}" if section.summary else f"{section.title}:"
        lines += _wrap(heading, indent="", subsequent="  ")
    for item in section.items:
        lines += _ranked(item)
    for timeline in section.timelines:
        lines += _strips(timeline)
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


def _ranked(item: Ranked) -> list[str]:
    """``1. demo.py:39 (forward): 4 recompiles, 1.30 s of 13.48 s (10%): what that adds up``,
    then torch's code and page, then what to do, indented under it."""
    head = f"{item.rank}. {item.where}: {item.what}, {item.cost}"
    if item.cost_words and (item.share is not None or item.compiled):
        head += f": {item.cost_words}"
    lines = _wrap(head, indent="  ", subsequent="       ")
    if item.code or item.url:
        lines += _wrap(" ".join(part for part in (item.code, item.url) if part), indent="     ", subsequent="     ")
    lines += _wrap(item.message, indent="     ", subsequent="     ")
    return lines


def _strips(timeline: Timeline) -> list[str]:
    """One row per lane: a column per ``end / _STRIP`` seconds, full where the lane was busy for
    half of it or more, light where less (an instant still shows)."""
    label = max(len(lane.kind) for lane in timeline.lanes)
    columns = max(10, min(_STRIP, WIDTH - label - 17))  # "  kind |strip| 123.4 ms"
    step = timeline.end / columns if timeline.end > 0 else 1.0
    lines = [f"  {timeline.title}, one column per {sections.seconds(step)}"]
    for lane in timeline.lanes:
        busy = [0.0] * columns
        touched = [False] * columns
        for span in lane.spans:
            # several calls summed into one span: their time spread over the stretch they ran in
            stop = span.until if span.until is not None and span.until > span.start else span.start + span.seconds
            density = span.seconds / (stop - span.start) if stop > span.start else 1.0
            first = min(columns - 1, max(0, int(span.start / step)))
            last = min(columns - 1, max(first, int(stop / step - 1e-9)))
            for column in range(first, last + 1):
                left, right = column * step, (column + 1) * step
                busy[column] += density * max(0.0, min(right, stop) - max(left, span.start))
                touched[column] = True
        cells = "".join("█" if b >= step / 2 else "▏" if t else " " for b, t in zip(busy, touched))
        lines.append(f"  {lane.kind.ljust(label)} |{cells}| {sections.seconds(lane.seconds)}".rstrip())
    return lines
