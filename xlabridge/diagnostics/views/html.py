"""The report as one self-contained HTML page: the same sections as the text, with a picture
per FX graph of its segments and the host/device transfers at each cut, and the report's
JSON embedded so that the page alone is enough to read the data back."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import TYPE_CHECKING

from xlabridge.diagnostics.views import sections
from xlabridge.diagnostics.views.sections import Box, Figure, Section, Table

if TYPE_CHECKING:
    from xlabridge.diagnostics.report import Report

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #1d2329; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.8em; }
table { border-collapse: collapse; margin: .6em 0; }
th, td { border: 1px solid #cfd6dd; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #eef2f5; }
code, .where { font-family: ui-monospace, monospace; font-size: .92em; }
.env { color: #4a5661; }
.empty { font-style: italic; color: #4a5661; }
.warnings li { color: #8a4b00; }
figure { margin: 1em 0 1.6em; } figcaption { font-weight: 600; margin-bottom: .3em; }
svg { display: block; max-width: 100%; height: auto; }
svg text { font: 12px ui-monospace, monospace; }
.seg-xla rect { fill: #d7e8fb; stroke: #1f6fbf; }
.seg-cpu rect { fill: #ffe1c2; stroke: #c25e00; }
.flow { stroke: #4a5661; stroke-width: 1.5; }
.transfer circle { fill: #c0392b; } .transfer text { fill: #c0392b; }
.legend { font-size: .9em; color: #4a5661; }
"""

_BOX_HEIGHT, _BOX_GAP, _CHAR_WIDTH, _MARGIN = 44, 56, 7.2, 12

_LEGEND = (
    "Boxes run left to right: blue ones are XLA graphs, orange ones nodes that ran on the CPU; "
    "a red dot marks a host/device transfer at a cut. Hover a box for its ops."
)


def write(report: Report, path: Path) -> Path:
    """Write ``report`` as one HTML page with no external resources; return ``path``.

    All text goes through ``html.escape``; the report's JSON sits in
    ``<script type="application/json" id="xlabridge-report">`` so tools (and
    ``Report.from_dict``) can read the page back.
    """
    body: list[str] = []
    for section in sections.build(report):
        body += _section(section)
    page = "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>xlabridge report</title>",
        f"<style>{_CSS}</style></head><body>",
        *body,
        f'<script type="application/json" id="xlabridge-report">{_json_for_script(report)}</script>',
        "</body></html>",
        "",
    ])
    path.write_text(page, encoding="utf-8")
    return path


def _section(section: Section) -> list[str]:
    if section.key == "environment":
        return [f"<h1>{html.escape(section.title)}</h1>", f'<p class="env">{html.escape(section.summary)}</p>']
    if section.key == "empty":
        return [f'<p class="empty">{html.escape(note)}</p>' for note in section.notes]
    out = [f"<h2>{html.escape(section.title)}</h2>"]
    if section.summary:
        out.append(f"<p>{html.escape(section.summary)}</p>")
    out += [_table(table) for table in section.tables]
    if section.figures:
        out.append(f'<p class="legend">{html.escape(_LEGEND)}</p>')
        out += [_figure(figure) for figure in section.figures]
    if section.notes:
        out.append(f'<ul class="{html.escape(section.key)}">')
        out += [f"<li>{html.escape(note)}</li>" for note in section.notes]
        out.append("</ul>")
    return out


def _table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in table.headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in table.rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure(figure: Figure) -> str:
    """One FX graph as an inline SVG: its segments as boxes with transfer marks at each cut."""
    widths = [max(96.0, _CHAR_WIDTH * len(box.label) + 20) for box in figure.boxes]
    total = _MARGIN * 2 + sum(widths) + _BOX_GAP * max(0, len(widths) - 1)
    height = _BOX_HEIGHT + 2 * _MARGIN + 18
    marker = f"arrow-{figure.graph}"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="fx-graph" data-graph="{figure.graph}" '
        f'width="{total:.0f}" height="{height}" viewBox="0 0 {total:.0f} {height}" role="img" '
        f'aria-label="{html.escape(figure.caption)}">',
        f'<defs><marker id="{marker}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#4a5661"/></marker></defs>',
    ]
    if not figure.boxes:
        parts.append(f'<text x="{_MARGIN}" y="{_MARGIN + 20}">segments not recorded</text>')
    x = float(_MARGIN)
    top, middle = _MARGIN, _MARGIN + _BOX_HEIGHT / 2
    for position, (box, width) in enumerate(zip(figure.boxes, widths)):
        if position:
            parts.append(_cut(figure.boxes[position - 1], box, x - _BOX_GAP, x, middle, marker))
        tooltip = f"{box.label}\n" + "\n".join(box.ops)
        parts.append(
            f'<g class="{"seg-xla" if box.xla else "seg-cpu"}"><title>{html.escape(tooltip)}</title>'
            f'<rect x="{x:.1f}" y="{top}" width="{width:.1f}" height="{_BOX_HEIGHT}" rx="5"/>'
            f'<text x="{x + width / 2:.1f}" y="{middle + 4:.1f}" text-anchor="middle">'
            f"{html.escape(box.label)}</text></g>"
        )
        x += width + _BOX_GAP
    parts.append("</svg>")
    return f"<figure><figcaption>{html.escape(figure.caption)}</figcaption>{''.join(parts)}</figure>"


def _cut(before: Box, after: Box, start: float, end: float, y: float, marker: str) -> str:
    """The arrow between two segments, with a transfer mark where data crosses host/device."""
    arrow = (
        f'<line class="flow" x1="{start + 2:.1f}" y1="{y:.1f}" x2="{end - 2:.1f}" y2="{y:.1f}" '
        f'marker-end="url(#{marker})"/>'
    )
    if before.xla == after.xla:
        return arrow
    direction = "device to host" if before.xla else "host to device"
    mid = (start + end) / 2
    return arrow + (
        f'<g class="transfer"><title>{direction} transfer</title>'
        f'<circle cx="{mid:.1f}" cy="{y:.1f}" r="5"/>'
        f'<text x="{mid:.1f}" y="{y + _BOX_HEIGHT / 2 + 14:.1f}" text-anchor="middle">'
        f'{"D→H" if before.xla else "H→D"}</text></g>'
    )


def _json_for_script(report: Report) -> str:
    """The report JSON, safe inside ``<script>``: ``<``, ``>`` and ``&`` as JSON escapes."""
    text = json.dumps(report.to_dict(), indent=1)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
