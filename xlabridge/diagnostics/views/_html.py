"""The report as one self-contained HTML page: it opens on the ranked findings ("Fix first"),
the time split as a stacked bar and a timeline of each process (one lane per kind of work), then
the same tables as the text, with one picture per FX graph shape and place (its segments and the
host/device transfers at each cut), and the report's JSON embedded so that the page alone is
enough to read the data back."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from xlabridge.diagnostics.views import _sections as sections
from xlabridge.diagnostics.views._sections import Box, Figure, Part, Ranked, Section, Table, Timeline

if TYPE_CHECKING:
    from xlabridge.diagnostics.report import Report

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em auto; max-width: 76em; color: #1d2329;
       padding: 0 1em; }
h1 { font-size: 1.5em; margin: 0 0 .1em; } h2 { font-size: 1.2em; margin: 1.6em 0 .3em; }
h2 .count { font-weight: normal; color: #4a5661; font-size: .85em; margin-left: .5em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #cfd6dd; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #eef2f5; }
code, .where { font-family: ui-monospace, monospace; font-size: .92em; }
.env { color: #4a5661; margin: 0 0 1em; }
.empty { font-style: italic; color: #4a5661; }
.warnings li { color: #8a4b00; }
.card { border: 1px solid #cfd6dd; border-radius: 8px; padding: .2em 1.2em 1em; margin: 1em 0;
        background: #fbfcfd; }
.card h2 { margin-top: .7em; }
#summary { border-color: #e15759; border-width: 2px; background: #fffafa; }
#tpu-summary { border-color: #4e79a7; border-width: 2px; background: #f7fafd; }
#summary table, #tpu-summary table { width: 100%; }
#summary td.rank, #tpu-summary td.rank { font-weight: 700; font-size: 1.1em; text-align: center; width: 1.5em; }
#summary td.cost, #tpu-summary td.cost { width: 16em; }
#summary td.fix, #tpu-summary td.fix { width: 40%; }
#summary .what, #tpu-summary .what { font-weight: 600; }
#summary .costline, #tpu-summary .costline { white-space: nowrap; font-weight: 600; }
#summary .adds, #tpu-summary .adds { font-size: .88em; color: #4a5661; }
.meter { display: block; height: 6px; background: #eef2f5; border-radius: 3px; margin: .3em 0 .2em; }
.meter span { display: block; height: 6px; background: #e15759; border-radius: 3px; }
.codes { font-family: ui-monospace, monospace; font-size: .9em; }
.fix { color: #36414b; }
.swatch { display: inline-block; width: .85em; height: .85em; border-radius: 2px; margin-right: .4em;
          vertical-align: -.05em; }
.legend-row { display: flex; flex-wrap: wrap; gap: .3em 1.2em; font-size: .9em; color: #36414b; margin: .3em 0; }
figure { margin: 1em 0 1.6em; } figcaption { font-weight: 600; margin-bottom: .3em; }
svg { display: block; max-width: 100%; height: auto; }
svg text { font: 12px ui-monospace, monospace; }
svg.timeline text.lane, svg.timeline text.total { font: 12px system-ui, sans-serif; fill: #36414b; }
svg.timeline .axis { stroke: #9aa5af; } svg.timeline text.tick { fill: #4a5661; font-size: 11px; }
svg.timeline .band { fill: #f3f5f7; }
svg.timeline .calls { font-size: 10px; fill: #1d2329; }
svg.shares text { font: 12px system-ui, sans-serif; fill: #fff; }
.seg-xla rect { fill: #d7e8fb; stroke: #1f6fbf; }
.seg-cpu rect { fill: #ffe1c2; stroke: #c25e00; }
.flow { stroke: #4a5661; stroke-width: 1.5; }
.transfer circle { fill: #c0392b; } .transfer text { fill: #c0392b; }
.legend { font-size: .9em; color: #4a5661; }
"""

_BOX_HEIGHT, _BOX_GAP, _CHAR_WIDTH, _MARGIN = 44, 56, 7.2, 12

_LEGEND = (
    "Boxes run left to right: blue ones are XLA graphs (a TorchTPU collective is one of its own), orange "
    "ones nodes that ran on the CPU; a red dot marks a host/device transfer at a cut. Hover a box for its ops."
)

_TIMELINE_LEGEND = (
    "Each lane is one kind of work, placed where it happened on the process's clock; a bar with a count "
    "stands for that many calls summed into one; a thin tick is an instant. Hover a bar for what it was."
)

_WIDTH, _LABELS, _TOTALS = 1080.0, 104.0, 78.0
"""Timeline and share bars: the picture's width, the lane labels' column, the lane totals' column."""
_LANE, _LANE_GAP, _AXIS = 18.0, 6.0, 26.0
_MIN_BAR = 2.0
"""The narrowest bar drawn, in pixels: a zero-length span is still a visible tick."""


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
    card = section.key in ("summary", "tpu-summary", "time", "timeline")
    out = [f'<section id="{html.escape(section.key)}"' + (' class="card">' if card else ">")]
    out.append(f"<h2>{html.escape(section.title)}</h2>")
    if section.summary:
        out.append(f"<p>{html.escape(section.summary)}</p>")
    if section.items:
        out.append(_summary(section.items, "cost model (not run)" if section.key == "tpu-summary" else "cost in this run"))
    for title, parts in section.bars.items():
        out.append(_share_bar(title, parts))
    for timeline in section.timelines:
        out.append(_timeline(timeline))
    if section.timelines:
        out.append(_kind_legend(section.timelines))
        out.append(f'<p class="legend">{html.escape(_TIMELINE_LEGEND)}</p>')
    swatches = {p.label: p.colour for parts in section.bars.values() for p in parts}
    out += [_table(table, swatches) for table in section.tables]
    if section.figures:
        out.append(f'<p class="legend">{html.escape(_LEGEND)}</p>')
        out += [_figure(figure) for figure in section.figures]
    if section.notes:
        out.append(f'<ul class="{html.escape(section.key)}">')
        out += [f"<li>{html.escape(note)}</li>" for note in section.notes]
        out.append("</ul>")
    out.append("</section>")
    return out


def _summary(items: list[Ranked], cost_heading: str) -> str:
    """The ranked findings: rank, where, what, cost with a meter of its share, torch's code, the fix."""
    rows = []
    for item in items:
        meter = ""
        if item.share is not None:
            width = max(1.0, min(100.0, item.share * 100))
            meter = f'<span class="meter"><span style="width:{width:.1f}%"></span></span>'
        code = html.escape(item.code)
        if item.url.startswith(("https://", "http://")):  # a link, never a script (the report may come from elsewhere)
            code = f'<a href="{html.escape(item.url)}">{code or "docs"}</a>'
        elif item.url:
            code += f" {html.escape(item.url)}"
        cost_words = f'<span class="adds">{html.escape(item.cost_words)}</span>' if item.cost_words else ""
        rows.append(
            f'<tr class="finding"><td class="rank">{item.rank}</td>'
            f'<td><span class="where">{html.escape(item.where)}</span><br>'
            f'<span class="what">{html.escape(item.what)}</span></td>'
            f'<td class="cost"><span class="costline">{html.escape(item.cost)}</span>{meter}{cost_words}</td>'
            f'<td class="codes">{code}</td><td class="fix">{html.escape(item.message)}</td></tr>'
        )
    return ('<table class="ranked"><thead><tr><th>#</th><th>where</th>'
            f'<th>{html.escape(cost_heading)}</th>'
            f'<th>torch</th><th>what to do</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')


def _share_bar(title: str, parts: list[Part]) -> str:
    """One process's wall time as a stacked bar, a coloured part per share, labelled where wide enough."""
    height, inner = 26, _WIDTH - _LABELS
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="shares" width="{_WIDTH:.0f}" height="{height}" '
           f'viewBox="0 0 {_WIDTH:.0f} {height}" role="img" aria-label="{html.escape(title)}" '
           'shape-rendering="crispEdges">',
           f'<text x="0" y="{height / 2 + 4}" style="fill:#36414b">{html.escape(title.split(":")[0])}</text>']
    x = _LABELS
    for part in parts:
        width = part.fraction * inner
        if width <= 0:
            continue
        tooltip = f"{part.label}: {sections.seconds(part.seconds)} ({part.fraction:.0%})"
        out.append(f'<g class="share"><title>{html.escape(tooltip)}</title><rect x="{x:.1f}" y="0" '
                   f'width="{width:.1f}" height="{height}" fill="{part.colour}"/>')
        words = f"{part.label} {part.fraction:.0%}"
        if width > len(words) * 6.6 + 8:
            out.append(f'<text x="{x + 5:.1f}" y="{height / 2 + 4}">{html.escape(words)}</text>')
        out.append("</g>")
        x += width
    out.append("</svg>")
    return "".join(out)


def _kind_legend(timelines: list[Timeline]) -> str:
    kinds = dict.fromkeys((lane.kind, lane.colour) for t in timelines for lane in t.lanes)
    return '<div class="legend-row">' + "".join(
        f'<span><span class="swatch" style="background:{colour}"></span>{html.escape(kind)} '
        f'<span class="legend">({html.escape(sections.SHARE_LABEL_OF_KIND.get(kind, "other"))})</span></span>'
        for kind, colour in kinds
    ) + "</div>"


def _tick_step(end: float) -> float:
    """A round step giving five to ten ticks over ``end`` seconds."""
    if end <= 0:
        return 1.0
    raw = end / 8
    base = 10 ** math.floor(math.log10(raw))
    return next(base * k for k in (1, 2, 5, 10) if base * k >= raw)


def _timeline(timeline: Timeline) -> str:
    """One process as an SVG: a lane per kind of span, each span a bar at its start and length
    (at least ``_MIN_BAR`` wide), summed calls marked with their count, a time axis under them."""
    inner = _WIDTH - _LABELS - _TOTALS
    scale = inner / timeline.end if timeline.end > 0 else 0.0
    lanes_height = len(timeline.lanes) * (_LANE + _LANE_GAP)
    height = 22 + lanes_height + _AXIS
    out = [f'<figure><figcaption>{html.escape(timeline.title)}</figcaption>'
           f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" data-pid="{timeline.pid}" '
           f'width="{_WIDTH:.0f}" height="{height:.0f}" viewBox="0 0 {_WIDTH:.0f} {height:.0f}" role="img" '
           f'aria-label="{html.escape(timeline.title)}" shape-rendering="crispEdges">']
    y = 8.0
    for lane in timeline.lanes:
        out.append(f'<g class="lane" data-kind="{html.escape(lane.kind)}">'
                   f'<text class="lane" x="0" y="{y + _LANE - 4:.1f}">{html.escape(lane.kind)}</text>'
                   f'<rect class="band" x="{_LABELS:.1f}" y="{y:.1f}" width="{inner:.1f}" height="{_LANE:.0f}"/>')
        for span in lane.spans:
            x = _LABELS + max(0.0, span.start) * scale
            stretch = span.until - span.start if span.until is not None and span.until > span.start else None
            width = max(_MIN_BAR, (stretch if stretch is not None else span.seconds) * scale)
            x = min(x, _LABELS + inner - _MIN_BAR)
            # several calls summed into one span: drawn over the stretch they ran in, as full as they kept it
            opacity = f' fill-opacity="{max(0.35, min(1.0, span.seconds / stretch)):.2f}"' if stretch else ""
            tooltip = f"{span.label}: {sections.seconds(span.seconds)}"
            if span.calls > 1:
                tooltip += f" over {span.calls} calls"
            if stretch is not None:
                tooltip += f" within {sections.seconds(stretch)}"
            if span.graph is not None:
                tooltip += f" (FX graph {span.graph})"
            tooltip += f", at {sections.seconds(span.start)}"
            out.append(f'<g class="span" data-kind="{html.escape(lane.kind)}" data-calls="{span.calls}">'
                       f'<title>{html.escape(tooltip)}</title>'
                       f'<rect x="{x:.2f}" y="{y:.1f}" width="{width:.2f}" height="{_LANE:.0f}" fill="{lane.colour}"{opacity}/>')
            if span.calls > 1 and stretch is None:  # a long run's many summed spans say their counts on hover
                out.append(f'<text class="calls" x="{x + width + 2:.1f}" y="{y + _LANE - 5:.1f}">'
                           f"×{span.calls}</text>")
            out.append("</g>")
        out.append(f'<text class="total" x="{_WIDTH - _TOTALS + 8:.1f}" y="{y + _LANE - 4:.1f}">'
                   f"{html.escape(sections.seconds(lane.seconds))}</text></g>")
        y += _LANE + _LANE_GAP
    axis = y + 2
    out.append(f'<line class="axis" x1="{_LABELS:.1f}" y1="{axis:.1f}" x2="{_LABELS + inner:.1f}" y2="{axis:.1f}"/>')
    step = _tick_step(timeline.end)
    ticks = int(timeline.end / step) + 1 if timeline.end > 0 else 1
    for n in range(ticks):
        x = _LABELS + n * step * scale
        out.append(f'<line class="axis" x1="{x:.1f}" y1="{axis:.1f}" x2="{x:.1f}" y2="{axis + 4:.1f}"/>'
                   f'<text class="tick" x="{x:.1f}" y="{axis + 16:.1f}" text-anchor="middle">'
                   f"{_tick_label(n * step, step)}</text>")
    out.append("</svg></figure>")
    return "".join(out)


def _tick_label(value: float, step: float) -> str:
    if step >= 1:
        return f"{value:.0f} s"
    if step >= 1e-3:
        return f"{value * 1e3:.0f} ms"
    return f"{value * 1e6:.0f} µs"


def _table(table: Table, swatches: dict[str, str] | None = None) -> str:
    """``table`` as HTML; a first cell named in ``swatches`` gets its colour's square."""
    swatches = swatches or {}
    head = "".join(f"<th>{html.escape(h)}</th>" for h in table.headers)

    def cell(column: int, text: str) -> str:
        mark = f'<span class="swatch" style="background:{swatches[text]}"></span>' if not column and text in swatches else ""
        return f"<td>{mark}{html.escape(text)}</td>"

    body = "".join("<tr>" + "".join(cell(n, c) for n, c in enumerate(row)) + "</tr>" for row in table.rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure(figure: Figure) -> str:
    """One FX graph as an inline SVG: its segments as boxes with transfer marks at each cut."""
    widths = [max(96.0, _CHAR_WIDTH * len(box.label) + 20) for box in figure.boxes]
    total = _MARGIN * 2 + sum(widths) + _BOX_GAP * max(0, len(widths) - 1)
    height = _BOX_HEIGHT + 2 * _MARGIN + 18
    marker = f"arrow-{figure.graph}"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="fx-graph" data-graph="{figure.graph}" '
        f'data-graphs="{",".join(map(str, figure.graphs))}" '
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
