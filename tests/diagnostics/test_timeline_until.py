"""Spans of summed calls (a long run's later calls of one graph, ``Span.until``) in the three
timeline renderings: drawn over the stretch the calls ran in, as full as they kept it, and the
timeline reaching their end. The expected cells, pixels and microseconds are worked out here from
the spans' numbers, independently of the views' code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from xlabridge.diagnostics import render_text, write_html, write_trace
from xlabridge.diagnostics.report import Process, Report, Span, TimeSplit
from xlabridge.diagnostics.views import _html as html_view

PID = 7
WALL = 10.0
SUMMED = Span(PID, "execute", 2.0, 2.0, "FX graph 0 calls 2-101", 0, calls=100, until=6.0)  # 2 s of calls in 4 s
SINGLE = Span(PID, "execute", 8.0, 1.0, "FX graph 1 call 1", 1)


def _report(*spans: Span, wall: float | None = WALL) -> Report:
    time = [TimeSplit(pid=PID, wall=wall, tracing=0.0, xla_compile=0.0, execution=0.0, cpu_fallback=0.0, other=wall)] if wall is not None else []
    return Report(processes=[Process(pid=PID)], timeline=list(spans), time=time)


def _strip(text: str, kind: str) -> str:
    line = next(line for line in text.splitlines() if line.strip().startswith(f"{kind} ") and "|" in line)
    return line[line.index("|") + 1:line.rindex("|")]


def test_the_text_spreads_summed_calls_over_their_stretch_at_their_density() -> None:
    sparse = Span(PID, "execute", 2.0, 1.0, "FX graph 0 calls 2-101", 0, calls=100, until=6.0)  # a quarter busy
    cells = _strip(render_text(_report(sparse, SINGLE)), "execute")
    step = WALL / len(cells)
    for column, mark in enumerate(cells):
        left, right = column * step, (column + 1) * step
        in_summed = left < sparse.until and right > sparse.start
        single_overlap = max(0.0, min(right, 9.0) - max(left, 8.0))
        if single_overlap >= step / 2:
            expected = "█"
        elif in_summed or single_overlap > 0:
            expected = "▏"  # calls that kept their stretch a quarter busy never fill a cell
        else:
            expected = " "
        assert mark == expected, (column, left, right)


def test_summed_calls_that_kept_their_stretch_busy_fill_it() -> None:
    dense = Span(PID, "execute", 2.0, 3.6, "FX graph 0 calls 2-101", 0, calls=100, until=6.0)  # 90% busy
    cells = _strip(render_text(_report(dense)), "execute")
    step = WALL / len(cells)
    inside = [c for c in range(len(cells)) if c * step >= 2.0 - 1e-9 and (c + 1) * step <= 6.0 + 1e-9]
    assert inside and all(cells[c] == "█" for c in inside)
    assert set(cells[:int(2.0 / step)]) == {" "} and set(cells[int(6.0 / step) + 1:]) == {" "}


def test_a_process_without_a_wall_time_is_drawn_to_its_last_summed_call() -> None:
    late = Span(PID, "execute", 2.0, 1.0, "FX graph 0 calls 2-11", 0, calls=10, until=12.0)
    text = render_text(_report(late, wall=None))
    assert f"pid {PID}: 12.00 s" in text
    cells = _strip(text, "execute")
    assert cells[-1] == "▏"  # the last call ended at the timeline's end
    assert cells[0] == " "


def _drawn(raw: str) -> list[dict[str, str]]:
    """Each timeline span of the page: its ``<g>``'s attributes, its title and its rectangle's."""
    out = []
    for match in re.finditer(r'<g class="span"([^>]*)><title>([^<]*)</title><rect([^>]*)/>(<text class="calls")?',
                             raw):
        attributes = dict(re.findall(r'([\w-]+)="([^"]*)"', match.group(1) + match.group(3)))
        attributes["title"], attributes["count_label"] = match.group(2), match.group(4) is not None
        out.append(attributes)
    return out


def test_the_page_draws_summed_calls_over_their_stretch_as_full_as_they_kept_it(tmp_path: Path) -> None:
    raw = write_html(_report(SUMMED, SINGLE), tmp_path / "r.html").read_text(encoding="utf-8")
    summed, single = _drawn(raw)
    inner = html_view._WIDTH - html_view._LABELS - html_view._TOTALS
    scale = inner / WALL
    assert float(summed["x"]) == pytest.approx(html_view._LABELS + 2.0 * scale, abs=0.01)
    assert float(summed["width"]) == pytest.approx(4.0 * scale, abs=0.01)
    assert float(summed["fill-opacity"]) == pytest.approx(0.5, abs=0.01)
    assert summed["data-calls"] == "100" and not summed["count_label"]
    assert "over 100 calls within 4.00 s" in summed["title"]
    assert float(single["width"]) == pytest.approx(1.0 * scale, abs=0.01) and "fill-opacity" not in single


def test_the_trace_gives_summed_calls_their_stretch_and_another_graph_inside_it_a_track_of_its_own(
        tmp_path: Path) -> None:
    inside = Span(PID, "execute", 3.0, 0.5, "FX graph 1 call 1", 1)
    trace = json.loads(write_trace(_report(SUMMED, inside), tmp_path / "t.json").read_text(encoding="utf-8"))
    complete = {e["name"]: e for e in trace["traceEvents"] if e["ph"] == "X"}
    summed, other = complete[SUMMED.label], complete[inside.label]
    assert (summed["ts"], summed["dur"]) == pytest.approx((2.0e6, 4.0e6))
    assert summed["args"] == {"graph": 0, "calls": 100, "seconds": 2.0}
    assert (other["ts"], other["dur"]) == pytest.approx((3.0e6, 0.5e6))
    assert summed["tid"] != other["tid"]  # overlapping slices of one thread must nest: the other graph's is apart
    threads = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {threads[summed["tid"]], threads[other["tid"]]} == {"execute", "execute 2"}
