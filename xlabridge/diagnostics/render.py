"""Views of a ``Report``: a terminal table read in ten seconds, and a self-contained HTML page.

Both show the same sections in the same order: environment, Dynamo (FX capture: graphs,
breaks, recompiles), HLO lowering (how torch_xla's Dynamo bridge cut each FX graph into
XLA graphs around ops that ran on the CPU), warnings. The HTML page adds a picture per
FX graph of its segments and the host/device transfers at each cut, and carries the
report's JSON so that the page alone is enough to read the data back.
"""

from __future__ import annotations

import html
import json
import os
import textwrap
from collections.abc import Sequence
from pathlib import Path

from xlabridge.diagnostics.report import Report, Segment, XlaGraph

WIDTH = 120
"""Columns the terminal table is laid out for."""

_ENVIRONMENT_KEYS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("torch", ("torch",)),
    ("torch_xla", ("torch_xla",)),
    ("PJRT", ("pjrt_device", "xla_device_type")),
    ("TPU", ("tpu_type",)),
)
"""Header labels and the environment keys each is read from, first present wins."""


# --------------------------------------------------------------------------- terminal


def format_table(report: Report) -> str:
    """The report as plain text of at most ``WIDTH`` columns, most telling facts first."""
    lines = [_environment_line(report)]
    if not (report.dynamo_graphs or report.dynamo_breaks or report.xla_graphs or report.hlo_breaks):
        lines += ["", "no graphs observed"]
    else:
        lines += ["", *_dynamo_lines(report), "", *_hlo_lines(report)]
    if report.recompiles:
        lines += ["", f"Recompiles: {len(report.recompiles)}"]
        for recompile in report.recompiles:
            where = _where(recompile.filename, recompile.lineno, recompile.function)
            lines += _wrap(f"{where}: {_first_line(recompile.reason)}", indent="  ")
    if report.warnings:
        lines += ["", "Warnings:"]
        for warning in report.warnings:
            lines += _wrap(warning, indent="  - ", subsequent="    ")
    return "\n".join(lines)


def _environment_line(report: Report) -> str:
    """``xlabridge report: torch 2.9.0 | torch_xla 2.9.0 | PJRT CPU`` from the known keys."""
    parts = []
    for label, keys in _ENVIRONMENT_KEYS:
        value = next((report.environment[k] for k in keys if report.environment.get(k)), None)
        if value is not None:
            parts.append(f"{label} {value}")
    return "xlabridge report: " + (" | ".join(parts) or "environment not recorded")


def _dynamo_lines(report: Report) -> list[str]:
    """Counts, then one wrapped row per Dynamo graph break."""
    lines = [
        f"Dynamo: {_plural(report.graph_count, 'graph')}, {_plural(report.break_count, 'break')}, "
        f"{_plural(len(report.recompiles), 'recompile')}"
    ]
    if report.dynamo_breaks:
        rows = [
            [
                str(number),
                b.category,
                _where(b.filename, b.lineno, b.function),
                _first_line(b.reason),
                b.suggestion,
            ]
            for number, b in enumerate(report.dynamo_breaks, start=1)
        ]
        lines += _table(["#", "category", "where", "reason", "suggestion"], rows, [3, 22, 34, 30, 0])
    return lines


def _hlo_lines(report: Report) -> list[str]:
    """Per XLA-bridge graph counts, then one wrapped row per HLO lowering break."""
    lines = [
        f"HLO lowering: {_plural(len(report.xla_graphs), 'FX graph')} through the XLA bridge, "
        f"{_plural(report.hlo_break_count, 'break')}"
    ]
    if report.xla_graphs:
        rows = [
            [
                str(g.index),
                g.role,
                str(g.fx_ops),
                str(g.xla_graphs),
                str(g.compiles),
                str(g.executions_per_call),
                str(g.transfers_per_call),
            ]
            for g in report.xla_graphs
        ]
        headers = ["graph", "role", "fx_ops", "xla_graphs", "compiles", "exec/call", "transfers/call"]
        lines += _table(headers, rows, [5, 16, 6, 10, 8, 9, 14])
    if report.hlo_breaks:
        rows = [
            [str(b.graph), b.op, b.category, _where(b.filename, b.lineno, b.function), b.suggestion]
            for b in report.hlo_breaks
        ]
        lines += [""] + _table(["graph", "op", "category", "where", "suggestion"], rows, [5, 24, 14, 34, 0])
    return lines


def _table(headers: list[str], rows: list[list[str]], caps: list[int]) -> list[str]:
    """Rows under headers, each cell wrapped to its column; a cap of 0 takes what is left.

    Columns are as wide as their widest cell up to their cap, and the flexible column gets
    the rest of ``WIDTH`` (at least 20), so long suggestions wrap instead of running off.
    """
    indent, gap = "  ", "  "
    natural = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    widths = [min(n, cap) if cap else n for n, cap in zip(natural, caps)]
    fixed = sum(w for w, cap in zip(widths, caps) if cap)
    left = WIDTH - len(indent) - len(gap) * (len(headers) - 1) - fixed
    widths = [w if cap else max(20, min(w, left)) for w, cap in zip(widths, caps)]
    out = []
    for cells in [headers, *rows]:
        wrapped = [textwrap.wrap(cell, width) or [""] for cell, width in zip(cells, widths)]
        for line_no in range(max(len(w) for w in wrapped)):
            parts = [
                (w[line_no] if line_no < len(w) else "").ljust(width)
                for w, width in zip(wrapped, widths)
            ]
            out.append((indent + gap.join(parts)).rstrip())
    return out


def _wrap(text: str, *, indent: str, subsequent: str | None = None) -> list[str]:
    """``text`` wrapped to ``WIDTH`` with the given first-line and continuation indents."""
    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=indent,
        subsequent_indent=indent if subsequent is None else subsequent,
    ) or [indent.rstrip()]


def _where(filename: str, lineno: int, function: str) -> str:
    """``file:line (function)`` with the file relative to the current directory when inside it."""
    return f"{_short_path(filename)}:{lineno} ({function})" if function else f"{_short_path(filename)}:{lineno}"


def _short_path(filename: str) -> str:
    """``filename`` relative to the current directory if it lies under it, else as given."""
    if not filename or filename.startswith("<"):
        return filename
    try:
        path, here = Path(filename).resolve(), Path.cwd().resolve()
    except (OSError, RuntimeError):
        return filename
    return os.path.relpath(path, here) if path.is_relative_to(here) else filename


def _first_line(text: str) -> str:
    """The first non-empty line of ``text`` (Dynamo's reasons run to many lines)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _plural(count: int, noun: str) -> str:
    """``1 graph``, ``2 graphs``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


# --------------------------------------------------------------------------- HTML

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #1d2329; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.8em; }
table { border-collapse: collapse; margin: .6em 0; }
th, td { border: 1px solid #cfd6dd; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #eef2f5; }
code, .where { font-family: ui-monospace, monospace; font-size: .92em; }
.env { color: #4a5661; }
.empty { font-style: italic; color: #4a5661; }
.warning { color: #8a4b00; }
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


def write_html(report: Report, path: Path) -> Path:
    """Write ``report`` as one HTML page with no external resources; return ``path``.

    All text goes through ``html.escape``; the report's JSON sits in
    ``<script type="application/json" id="xlabridge-report">`` so tools (and
    ``Report.from_dict``) can read the page back.
    """
    body = [
        "<h1>xlabridge report</h1>",
        f'<p class="env">{html.escape(_environment_line(report).removeprefix("xlabridge report: "))}</p>',
    ]
    if not (report.dynamo_graphs or report.dynamo_breaks or report.xla_graphs or report.hlo_breaks):
        body.append('<p class="empty">no graphs observed</p>')
    else:
        body += _html_dynamo(report) + _html_hlo(report)
    if report.recompiles:
        body.append(f"<h2>Recompiles ({len(report.recompiles)})</h2>")
        body.append(
            _html_table(
                ["where", "reason"],
                [[_where(r.filename, r.lineno, r.function), _first_line(r.reason)] for r in report.recompiles],
            )
        )
    if report.warnings:
        body.append("<h2>Warnings</h2><ul>")
        body += [f'<li class="warning">{html.escape(w)}</li>' for w in report.warnings]
        body.append("</ul>")
    page = "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            "<title>xlabridge report</title>",
            f"<style>{_CSS}</style></head><body>",
            *body,
            f'<script type="application/json" id="xlabridge-report">{_json_for_script(report)}</script>',
            "</body></html>",
            "",
        ]
    )
    path.write_text(page, encoding="utf-8")
    return path


def _html_dynamo(report: Report) -> list[str]:
    """The Dynamo section: counts and the table of breaks."""
    out = [
        "<h2>Dynamo</h2>",
        f"<p>{_plural(report.graph_count, 'graph')}, {_plural(report.break_count, 'break')}, "
        f"{_plural(len(report.recompiles), 'recompile')}</p>",
    ]
    if report.dynamo_breaks:
        rows = [
            [str(n), b.category, _where(b.filename, b.lineno, b.function), _first_line(b.reason), b.suggestion]
            for n, b in enumerate(report.dynamo_breaks, start=1)
        ]
        out.append(_html_table(["#", "category", "where", "reason", "suggestion"], rows))
    return out


def _html_hlo(report: Report) -> list[str]:
    """The HLO lowering section: per-graph counts, the break table, one picture per FX graph."""
    out = [
        "<h2>HLO lowering</h2>",
        f"<p>{_plural(len(report.xla_graphs), 'FX graph')} through the XLA bridge, "
        f"{_plural(report.hlo_break_count, 'break')}</p>",
    ]
    if report.xla_graphs:
        headers = ["graph", "role", "fx_ops", "xla_graphs", "compiles", "exec/call", "transfers/call"]
        rows = [
            [str(g.index), g.role, str(g.fx_ops), str(g.xla_graphs), str(g.compiles),
             str(g.executions_per_call), str(g.transfers_per_call)]
            for g in report.xla_graphs
        ]
        out.append(_html_table(headers, rows))
    if report.hlo_breaks:
        rows = [
            [str(b.graph), b.op, b.category, _where(b.filename, b.lineno, b.function), b.suggestion]
            for b in report.hlo_breaks
        ]
        out.append(_html_table(["graph", "op", "category", "where", "suggestion"], rows))
    if report.xla_graphs:
        out.append(
            '<p class="legend">Boxes run left to right: blue ones are XLA graphs, orange ones ops '
            "that ran on the CPU; a red dot marks a host/device transfer at a cut. Hover a box "
            "for its ops.</p>"
        )
        out += [_svg_figure(graph) for graph in report.xla_graphs]
    return out


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """An escaped HTML table."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _svg_figure(graph: XlaGraph) -> str:
    """One FX graph as an inline SVG: its segments as boxes with transfer marks at each cut."""
    caption = (
        f"FX graph {graph.index} ({graph.role}): {graph.fx_ops} ops, "
        f"{_plural(graph.xla_graphs, 'XLA graph')}"
    )
    labels = _segment_labels(graph.segments)
    widths = [max(96.0, _CHAR_WIDTH * len(label) + 20) for label in labels]
    total = _MARGIN * 2 + sum(widths) + _BOX_GAP * max(0, len(widths) - 1)
    height = _BOX_HEIGHT + 2 * _MARGIN + 18
    marker = f"arrow-{graph.index}"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="fx-graph" data-graph="{graph.index}" '
        f'width="{total:.0f}" height="{height}" viewBox="0 0 {total:.0f} {height}" role="img" '
        f'aria-label="{html.escape(caption)}">',
        f'<defs><marker id="{marker}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#4a5661"/></marker></defs>',
    ]
    if not graph.segments:
        parts.append(f'<text x="{_MARGIN}" y="{_MARGIN + 20}">segments not recorded</text>')
    x = float(_MARGIN)
    top, middle = _MARGIN, _MARGIN + _BOX_HEIGHT / 2
    for position, (segment, label, width) in enumerate(zip(graph.segments, labels, widths)):
        if position:
            parts.append(_svg_cut(graph.segments[position - 1], segment, x - _BOX_GAP, x, middle, marker))
        css = "seg-xla" if _is_xla(segment) else "seg-cpu"
        tooltip = f"{label}\n" + "\n".join(segment.ops)
        parts.append(
            f'<g class="{css}"><title>{html.escape(tooltip)}</title>'
            f'<rect x="{x:.1f}" y="{top}" width="{width:.1f}" height="{_BOX_HEIGHT}" rx="5"/>'
            f'<text x="{x + width / 2:.1f}" y="{middle + 4:.1f}" text-anchor="middle">'
            f"{html.escape(label)}</text></g>"
        )
        x += width + _BOX_GAP
    parts.append("</svg>")
    return f"<figure><figcaption>{html.escape(caption)}</figcaption>{''.join(parts)}</figure>"


def _svg_cut(before: Segment, after: Segment, start: float, end: float, y: float, marker: str) -> str:
    """The arrow between two segments, with a transfer mark where data crosses host/device."""
    arrow = (
        f'<line class="flow" x1="{start + 2:.1f}" y1="{y:.1f}" x2="{end - 2:.1f}" y2="{y:.1f}" '
        f'marker-end="url(#{marker})"/>'
    )
    if _is_xla(before) == _is_xla(after):
        return arrow
    direction = "device to host" if _is_xla(before) else "host to device"
    mid = (start + end) / 2
    mark = (
        f'<g class="transfer"><title>{direction} transfer</title>'
        f'<circle cx="{mid:.1f}" cy="{y:.1f}" r="5"/>'
        f'<text x="{mid:.1f}" y="{y + _BOX_HEIGHT / 2 + 14:.1f}" text-anchor="middle">'
        f'{"D→H" if _is_xla(before) else "H→D"}</text></g>'
    )
    return arrow + mark


def _segment_labels(segments: Sequence[Segment]) -> list[str]:
    """``XLA graph k (n ops)`` for XLA segments, numbered from 1; the op names for CPU ones."""
    labels, count = [], 0
    for segment in segments:
        if _is_xla(segment):
            count += 1
            labels.append(f"XLA graph {count} ({_plural(len(segment.ops), 'op')})")
        else:
            labels.append(", ".join(segment.ops) or "CPU")
    return labels


def _is_xla(segment: Segment) -> bool:
    """Whether ``segment`` ran as an XLA graph (``kind == "xla"``); anything else ran on the CPU."""
    return segment.kind.lower() == "xla"


def _json_for_script(report: Report) -> str:
    """The report JSON, safe inside ``<script>``: ``<``, ``>`` and ``&`` as JSON escapes."""
    text = json.dumps(report.to_dict(), indent=1)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
