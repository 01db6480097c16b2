"""The views on a demo-shaped report (``demo_like``): the ranked summary first, the
time split with every share, the timeline (text strips and HTML SVG), the recompiles by cause,
FX graph pictures collapsed by place.

Expected values come from the report's own numbers (the findings' costs, the spans, the time
split that ``demo_like`` derives from the spans), worked out here, not from the views.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.diagnostics import demo_like
from xlabridge.diagnostics import render_text, write_html
from xlabridge.diagnostics.report import (
    Finding,
    Report,
    Segment,
    SpanKind,
    TimeSplit,
    XlaGraph,
)
from xlabridge.diagnostics.views import _html as html_view
from xlabridge.diagnostics.views import _text as text_view
from xlabridge.diagnostics.views._overview import JOB_SHARES

LABELS = {"imports": "imports", "tracing": "tracing", "backend_compile": "backend compile", "xla_compile": "XLA compile", "execution": "execution",
          "lazy": "lazy", "eager": "eager", "transfers": "transfers", "cpu_fallback": "CPU fallback", "process_group": "process group",
          "collective_wait": "collective wait", "waiting_for_ranks": "wait for ranks", "exit": "exit", "other": "other"}


@pytest.fixture(scope="module")
def report() -> Report:
    return demo_like.report()


@contextlib.contextmanager
def _elsewhere(directory: Path):
    """Views show paths under the working directory relative to it: render from a directory the
    demo's files are not under, so that the expected paths are the report's own."""
    here = os.getcwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(here)


@pytest.fixture(scope="module")
def text(report: Report, tmp_path_factory: pytest.TempPathFactory) -> str:
    with _elsewhere(tmp_path_factory.mktemp("elsewhere")):
        return render_text(report)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _block(text: str, heading: str) -> list[str]:
    """The lines of the section whose heading starts with ``heading``, up to the next blank line."""
    lines = text.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith(heading))
    end = next((n for n in range(start + 1, len(lines)) if not lines[n].strip()), len(lines))
    return lines[start:end]


def test_the_text_opens_with_the_ranked_findings_and_their_cost(report: Report, text: str) -> None:
    lines = text.splitlines()
    assert lines[0].startswith("xlabridge report: torch 2.9.0")
    assert lines[2].startswith("Fix first: 4 findings, costliest in this run first")
    block = _flat("\n".join(_block(text, "Fix first")))
    wall = demo_like.WALL
    costly = [f for f in report.findings if f.cost_seconds is not None]
    positions = []
    for rank, finding in enumerate(costly, start=1):
        cost = f"{finding.cost_seconds * 1e3:.1f} ms" if finding.cost_seconds < 1 else f"{finding.cost_seconds:.2f} s"
        expected = f"{rank}. {finding.filename}:{finding.lineno} ({finding.function}): {finding.count} "
        assert expected in block, expected
        assert f"{cost} of {wall:.2f} s ({finding.cost_seconds / wall:.0%})" in block, cost
        assert finding.message in block
        positions.append(block.index(expected))
    assert positions == sorted(positions)  # in the report's order: costliest first
    assert "4 recompiles, 2.34 s of 13.48 s (17%): Dynamo and XLA compiles of the recompiled frame" in block
    assert "5 graph breaks" in block and "5 calls through a CPU fallback" in block
    assert f"GB0124 {demo_like.GB_URL}" in block
    # the finding without a cost in time is not in "Fix first", it is under the other findings
    assert "No persistent compilation cache" not in block
    assert "No persistent compilation cache" in _flat("\n".join(_block(text, "Other findings")))


def test_the_summary_counts_the_processes_wall_for_a_finding_of_several() -> None:
    splits = [TimeSplit(pid=1, wall=6.0, tracing=0, xla_compile=0, execution=0, cpu_fallback=0, other=6.0),
              TimeSplit(pid=2, wall=4.0, tracing=0, xla_compile=0, execution=0, cpu_fallback=0, other=4.0)]
    ranked = Report(time=splits, findings=[
        Finding("recompiles", "one process only", cost_seconds=3.0, count=2, filename="/a.py", lineno=3,
                function="f", pid=2),
        Finding("uneven-compile", "both", cost_seconds=1.0, count=1, filename="/a.py", lineno=4, function="g"),
    ])
    block = _flat("\n".join(_block(render_text(ranked), "Fix first")))
    assert "1. /a.py:3 (f): 2 recompiles, 3.00 s of 4.00 s (75%)" in block
    assert "2. /a.py:4 (g): 1 uneven compile, 1.00 s of 10.00 s (10%)" in block


def test_the_time_split_labels_every_share_and_the_tpu_view_is_its_own_line(report: Report, text: str) -> None:
    (split,) = report.time
    block = _block(text, "Time:")
    assert block[0] == f"Time: {split.wall:.2f} s wall, split into exclusive shares"
    # the job's shares have rows only where a process of a torch.distributed job has them
    shown = [share for share in TimeSplit.SHARES if share not in JOB_SHARES or getattr(split, share)]
    rows = {" ".join(line.split()[:-3]): line.split()[-3:] for line in block[2:2 + len(shown)]}
    assert list(rows) == [LABELS[share] for share in shown]
    for share, label in ((s, LABELS[s]) for s in shown):
        value, unit, percent = rows[label]
        seconds = float(value) * (1e-3 if unit == "ms" else 1)
        assert seconds == pytest.approx(getattr(split, share), abs=0.006), share
        assert percent == f"({getattr(split, share) / split.wall:.0%})", share
    tpu = [line for line in block if "TPU view" in line]
    assert tpu == [f"  - TPU view: {report.tpu.seconds:.2f} s after the run, not part of the wall time above "
                   f"(libtpu's own compile time {report.tpu.compile_seconds:.2f} s)"]


def test_every_line_fits_the_width(text: str) -> None:
    assert max(len(line) for line in text.splitlines()) <= text_view.WIDTH


def test_the_text_timeline_marks_each_lane_where_its_spans_are(report: Report, text: str) -> None:
    block = _block(text, "Timeline:")
    strips = {line.split()[0]: line for line in block[2:]}
    # as many columns as the width leaves beside the longest lane name, at most _STRIP
    columns = min(text_view._STRIP, text_view.WIDTH - max(len(kind) for kind in strips) - 17)
    step = demo_like.WALL / columns
    assert f"one column per {step * 1e3:.1f} ms" in block[1]
    # every kind of the demo (a single-process run: no process group, collectives or ranks), in SpanKind's order
    assert list(strips) == [k.value for k in SpanKind if k in demo_like.SHARE_OF]
    for kind, line in strips.items():
        spans = [s for s in report.timeline if s.kind == kind]
        cells = line[line.index("|") + 1:line.rindex("|")]
        assert len(cells) == columns
        full = {c for c in range(columns)
                if sum(max(0.0, min((c + 1) * step, s.start + s.seconds) - max(c * step, s.start)) for s in spans)
                >= step / 2}
        assert {c for c, mark in enumerate(cells) if mark == "█"} == full, kind
        for span in spans:  # every span shows, an instant included
            assert cells[min(int(span.start / step), columns - 1)] != " ", (kind, span.label)
        total = sum(s.seconds for s in spans)
        assert line.split()[-2:] == (f"{total * 1e3:.1f} ms" if total < 1 else f"{total:.2f} s").split()


def test_recompiles_by_cause_name_the_failed_guard_once(report: Report, text: str) -> None:
    block = _flat("\n".join(_block(text, "Recompiles:")))
    assert block.startswith("Recompiles: 4 at 1 location, 1 cause")
    assert "value-specialisation ___stack0 == 4.24, 4.18, 4.22, 4.15" in block
    assert block.count("___stack0") == 1
    assert "# if hidden" not in block and "4.240228176116943" not in block


def test_recompiles_of_two_causes_at_one_place_are_two_rows() -> None:
    from xlabridge.diagnostics.report import Recompile

    recompiles = [Recompile(f"0/{n}: tensor 'x' size mismatch at index 0. expected {n}", "/m.py", 9, "step",
                            category="shape-change") for n in (1, 2)]
    recompiles += [Recompile("0/3: ___check_global_state()", "/m.py", 9, "step", category="global-state")]
    block = _flat("\n".join(_block(render_text(Report(recompiles=recompiles)), "Recompiles:")))
    assert block.startswith("Recompiles: 3 at 1 location, 2 causes")
    assert "/m.py:9 (step) 2 shape-change tensor 'x' size mismatch at index 0. expected 1, 2" in block
    assert "/m.py:9 (step) 1 global-state ___check_global_state()" in block


class _Page(HTMLParser):
    """The parts of the page the checks need: section order, the summary rows, the timeline's spans."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.ranked_rows = 0
        self.spans: list[dict[str, str]] = []
        self.span_titles: list[str] = []
        self.calls_labels: list[str] = []
        self.figures: list[dict[str, str]] = []
        self._in: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "section":
            self.sections.append(a.get("id", ""))
        if tag == "tr" and a.get("class") == "finding":
            self.ranked_rows += 1
        if tag == "g" and a.get("class") == "span":
            self.spans.append({"kind": a["data-kind"], "calls": a["data-calls"]})
        if tag == "rect" and self._in[-1:] == ["span"]:
            self.spans[-1].update(x=a["x"], width=a["width"], fill=a["fill"])
        if tag == "svg" and a.get("class") == "fx-graph":
            self.figures.append(a)
        if tag == "title" and self._in[-1:] == ["span"]:
            self._in.append("title")
            return
        if tag == "text" and "calls" in a.get("class", ""):
            self._in.append("calls")
            return
        if tag == "g" and a.get("class") == "span":
            self._in.append("span")

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if self._in and ((tag == "title" and self._in[-1] == "title") or (tag == "text" and self._in[-1] == "calls")
                         or (tag == "g" and self._in[-1] == "span")):
            self._in.pop()

    def handle_data(self, data: str) -> None:
        if self._in[-1:] == ["title"]:
            self.span_titles.append(data)
        elif self._in[-1:] == ["calls"]:
            self.calls_labels.append(data)


@pytest.fixture(scope="module")
def page(report: Report, tmp_path_factory: pytest.TempPathFactory) -> tuple[_Page, str]:
    directory = tmp_path_factory.mktemp("html")
    with _elsewhere(directory):
        path = write_html(report, directory / "demo.html")
    raw = path.read_text(encoding="utf-8")
    parsed = _Page()
    parsed.feed(raw)
    return parsed, raw


def test_the_page_opens_on_the_summary_and_the_timeline(page: tuple[_Page, str]) -> None:
    parsed, _ = page
    assert parsed.sections[:3] == ["summary", "time", "timeline"]
    assert parsed.ranked_rows == 3  # the findings with a cost in time


def test_the_timeline_draws_every_span_at_its_start_and_length(report: Report, page: tuple[_Page, str]) -> None:
    parsed, _ = page
    spans = sorted(report.timeline, key=lambda s: list(SpanKind).index(SpanKind(s.kind)))  # lane by lane
    assert len(parsed.spans) == len(spans)
    inner = html_view._WIDTH - html_view._LABELS - html_view._TOTALS
    scale = inner / demo_like.WALL
    fills = {}
    for drawn, span in zip(parsed.spans, spans):
        assert drawn["kind"] == span.kind
        assert float(drawn["x"]) == pytest.approx(html_view._LABELS + span.start * scale, abs=0.01)
        assert float(drawn["width"]) == pytest.approx(max(2.0, span.seconds * scale), abs=0.01)
        assert int(drawn["calls"]) == span.calls
        fills.setdefault(span.kind, set()).add(drawn["fill"])
    assert all(len(colours) == 1 for colours in fills.values())
    assert len({next(iter(c)) for c in fills.values()}) == len(fills)  # one colour per kind, each its own
    assert [s.seconds for s in spans if s.seconds == 0]  # the demo has instants: drawn 2 px wide above
    summed = [s for s in spans if s.calls > 1]
    assert parsed.calls_labels == [f"×{s.calls}" for s in summed]
    for span in spans:
        assert any(t.startswith(f"{span.label}: ") for t in parsed.span_titles), span.label
    assert any("over 4 calls (FX graph 0)" in t for t in parsed.span_titles)


def test_fx_graphs_of_one_place_and_shape_are_one_picture(report: Report, page: tuple[_Page, str]) -> None:
    parsed, raw = page
    groups: dict[tuple, list[int]] = {}
    for g in report.xla_graphs:
        key = (g.filename, g.lineno, g.role, tuple((s.kind, tuple(s.ops)) for s in g.segments))
        groups.setdefault(key, []).append(g.index)
    assert [f["data-graphs"] for f in parsed.figures] == [",".join(map(str, g)) for g in groups.values()]
    assert len(parsed.figures) == 4 < len(report.xla_graphs)
    assert ("FX graph 1, 4, 6, 8, 10: 5 forward graphs at /work/main/xlabridge/examples/demo.py:41 "
            "(torch_dynamo_resume_in_forward_at_39)") in raw


def test_graphs_of_one_place_with_different_segments_keep_their_own_pictures(tmp_path: Path) -> None:
    graphs = [XlaGraph(i, "0/0", "forward", 2, len(segs), segments=segs, filename="/m.py", lineno=3, function="f")
              for i, segs in enumerate([[Segment("xla", ["aten::mm"])],
                                        [Segment("xla", ["aten::mm"]), Segment("cpu", ["aten::exp2"])],
                                        [Segment("xla", ["aten::mm"])]])]
    parsed = _Page()
    parsed.feed(write_html(Report(xla_graphs=graphs), tmp_path / "r.html").read_text(encoding="utf-8"))
    assert [f["data-graphs"] for f in parsed.figures] == ["0,2", "1"]


def test_the_page_is_self_contained_and_its_json_reads_back(report: Report, page: tuple[_Page, str]) -> None:
    _, raw = page
    for loads in ("<link", "src=", "@import"):
        assert loads not in raw, loads
    assert re.findall(r"url\((?!#)", raw) == []  # only the page's own markers
    data = re.search(r'<script type="application/json" id="xlabridge-report">(.*?)</script>', raw, re.S).group(1)
    assert Report.from_dict(json.loads(data)) == report


def test_a_run_without_findings_or_timeline_says_so_where_they_would_be() -> None:
    split = TimeSplit(pid=1, wall=2.0, tracing=0.5, xla_compile=0.5, execution=0.5, cpu_fallback=0.0, other=0.5)
    lines = render_text(Report(time=[split])).splitlines()
    assert lines[2] == "Fix first: nothing found to fix in this run"
    assert next(line for line in lines if line.startswith("Timeline:")).startswith("Timeline: not recorded")
    assert "Fix first" not in render_text(Report())  # no run, nothing to say


def test_a_finding_names_its_file_relative_to_the_current_directory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    filename = str(tmp_path / "pkg" / "m.py")
    finding = Finding("dynamo-break", f"Dynamo graph break at {filename}:3 (f): x.item()", cost_seconds=0.5,
                      filename=filename, lineno=3, function="f", pid=1)
    split = TimeSplit(pid=1, wall=2.0, tracing=0.5, xla_compile=0, execution=0, cpu_fallback=0, other=1.5)
    block = _flat("\n".join(_block(render_text(Report(time=[split], findings=[finding])), "Fix first")))
    assert "1. pkg/m.py:3 (f): 1 graph break, 500.0 ms of 2.00 s (25%)" in block
    assert "Dynamo graph break at pkg/m.py:3 (f): x.item()" in block and str(tmp_path) not in block


def test_only_web_pages_become_links(tmp_path: Path) -> None:
    split = TimeSplit(pid=1, wall=2.0, tracing=0, xla_compile=0, execution=0, cpu_fallback=0, other=2.0)
    findings = [Finding("dynamo-break", "a", cost_seconds=1.0, code="GB0001", url="javascript:alert(1)", pid=1),
                Finding("dynamo-break", "b", cost_seconds=0.5, code="GB0002", url="https://example.org/gb0002", pid=1)]
    raw = write_html(Report(time=[split], findings=findings), tmp_path / "r.html").read_text(encoding="utf-8")
    body = raw[: raw.index('<script type="application/json"')]
    assert 'href="javascript' not in body and 'href="https://example.org/gb0002">GB0002</a>' in body
