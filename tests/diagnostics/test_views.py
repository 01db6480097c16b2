"""The text and HTML views of a hand-built report: the same sections, rendered twice.

The HTML is read back with ``html.parser`` (an independent parser), the embedded JSON with
``json`` and ``Report.from_dict``; expected counts come from the report's own segments.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from xlabridge.diagnostics import render_text, write_html
from xlabridge.diagnostics.report import (
    DynamoBreak,
    DynamoGraph,
    HloBreak,
    Recompile,
    RecompileGroup,
    Report,
    Segment,
    SpanKind,
    TimeSplit,
    XlaGraph,
)
from xlabridge.diagnostics.views import _html as html_view
from xlabridge.diagnostics.views import _sections as sections
from xlabridge.diagnostics.views import _text as text_view

_VOID = {"meta", "br", "hr", "img", "input", "link", "col", "area", "base", "wbr", "source"}
_SVG_EMPTY = {"rect", "line", "circle", "path"}  # written as <x .../>, reported as startendtag
EXP2_SUGGESTION = "Use `torch.pow(2.0, x)` instead of `torch.exp2(x)`."
HOSTILE = 'x < y && "q" </script><b>bold</b>'


def _report(cwd: Path, segments: list[list[Segment]] | None = None) -> Report:
    """Two FX graphs, one Dynamo break, one HLO break on aten::exp2, one recompile."""
    segments = segments or [
        [Segment("xla", ["aten::mm", "aten::add"]), Segment("cpu", ["aten::exp2"]), Segment("xla", ["aten::mul"])],
        [Segment("xla", ["aten::sum"])],
    ]
    return Report(
        environment={"torch": "2.9.0", "torch_xla": "2.9.0", "pjrt_device": "CPU", "tpu_type": "v5litepod-8"},
        dynamo_graphs=[DynamoGraph("0/0", 7, "openxla", ends_in_break=True), DynamoGraph("1/0", 3, "openxla")],
        dynamo_breaks=[
            DynamoBreak(
                reason="Unsupported Tensor.item() call\n  Explanation: Dynamo does not trace item()",
                category="tensor-item",
                filename=str(cwd / "pkg" / "model.py"),
                lineno=42,
                function="forward",
                suggestion="Keep it a 0-dim tensor and use it in tensor ops " * 4,
            )
        ],
        recompiles=[
            Recompile(f"0/{n}: tensor 'x' size mismatch at index 0. expected {n}", "/elsewhere/loop.py", 9, "train_step")
            for n in (1, 2, 3)
        ],
        recompile_groups=[RecompileGroup("/elsewhere/loop.py", 9, "train_step", 3,
                                         "0/1: tensor 'x' size mismatch at index 0. expected 1",
                                         "0/3: tensor 'x' size mismatch at index 0. expected 3", "shape-change")],
        time=[TimeSplit(pid=1, wall=10.0, tracing=2.5, xla_compile=1.5, execution=4.0, cpu_fallback=0.5, other=1.5)],
        xla_graphs=[
            XlaGraph(i, f"{i}/0", "forward", fx_ops=sum(len(s.ops) for s in segs),
                     xla_graphs=sum(s.kind == "xla" for s in segs), compiles=2, executions_per_call=2,
                     transfers_per_call=2, bytes_per_call=512, seconds_per_call=0.004, calls=3, segments=segs)
            for i, segs in enumerate(segments)
        ],
        hlo_breaks=[HloBreak("aten::exp2", "cpu-fallback", str(cwd / "pkg" / "layers.py"), 17, "act", EXP2_SUGGESTION)],
        warnings=[HOSTILE],
    )


class _Page(HTMLParser):
    """Checks tag nesting and collects svgs, classed elements inside them and the JSON script."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.svgs: list[dict[str, int]] = []
        self.svg_classes: list[str] = []
        self.titles: list[list[str]] = []
        self.scripts: dict[str, str] = {}
        self.text: list[str] = []
        self._script_id: str | None = None
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "svg":
            self.svgs.append({})
            self.svg_classes.append(attributes.get("class") or "")
            self.titles.append([])
        else:
            self._count_classes(attributes)
        if tag == "script":
            self._script_id = attributes.get("id") or ""
            self.scripts[self._script_id] = ""
        self._in_title = tag == "title" and "svg" in self.stack
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _SVG_EMPTY or "svg" not in self.stack:
            self.errors.append(f"unexpected self-closing <{tag}/>")
        self._count_classes(dict(attrs))

    def _count_classes(self, attributes: dict[str, str | None]) -> None:
        if "svg" in self.stack:
            for css in (attributes.get("class") or "").split():
                self.svgs[-1][css] = self.svgs[-1].get(css, 0) + 1

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()
        self._in_title = False
        if tag == "script":
            self._script_id = None

    def handle_data(self, data: str) -> None:
        if self._script_id is not None:
            self.scripts[self._script_id] += data
        elif self._in_title:
            self.titles[-1].append(data)
        else:
            self.text.append(data)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


@pytest.fixture
def report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Report:
    monkeypatch.chdir(tmp_path)
    return _report(tmp_path)


def test_table_names_every_break_and_count(report: Report) -> None:
    table = text_view.render(report)
    assert render_text(report) == table
    assert str(report).startswith("xlabridge report: 2 Dynamo graph(s), 1 graph break(s), 3 recompile(s)")
    for text in ("pkg/model.py:42 (forward)", "tensor-item", "Unsupported Tensor.item() call",
                 "pkg/layers.py:17 (act)", "aten::exp2", "cpu-fallback",
                 "/elsewhere/loop.py:9 (train_step)", "tensor 'x' size mismatch at index 0",
                 "2 graphs, 1 break, 3 recompiles", "2 FX graphs through the XLA bridge, 1 break",
                 "torch 2.9.0", "torch_xla 2.9.0", "PJRT CPU", "TPU v5litepod-8", HOSTILE):
        assert text in table or text in " ".join(table.split()), text
    assert "Explanation" not in table  # only the first line of a reason
    words = table.split()
    assert "pkg/model.py:42" in words and "pkg/layers.py:17" in words  # under the cwd: relative
    assert "/elsewhere/loop.py:9" in words  # outside it: as recorded
    assert max(len(line) for line in table.splitlines()) <= text_view.WIDTH


def test_time_split_names_every_share_with_seconds_and_percent(report: Report) -> None:
    lines = text_view.render(report).splitlines()
    start = lines.index("Time: 10.00 s wall, split into exclusive shares")
    assert lines[start + 1].split() == ["share", "seconds", "(of", "wall)"]
    # a process of no torch.distributed job: the job's shares (process group, collective wait, wait for
    # ranks) have no row
    rows = {" ".join(line.split()[:-3]): " ".join(line.split()[-3:])
            for line in lines[start + 2:start + 2 + len(TimeSplit.SHARES) - 3]}
    assert rows == {
        "imports": "0.0 ms (0%)", "tracing": "2.50 s (25%)", "backend compile": "0.0 ms (0%)", "XLA compile": "1.50 s (15%)",
        "execution": "4.00 s (40%)", "lazy": "0.0 ms (0%)", "eager": "0.0 ms (0%)", "transfers": "0.0 ms (0%)",
        "CPU fallback": "500.0 ms (5%)", "exit": "0.0 ms (0%)", "other": "1.50 s (15%)",
    }


def test_share_labels_follow_the_time_split() -> None:
    assert [share for share, _ in sections.SHARE_LABELS] == list(TimeSplit.SHARES)
    assert len({label for _, label in sections.SHARE_LABELS}) == len(TimeSplit.SHARES)
    assert set(sections.SHARE_OF_KIND) == {kind.value for kind in SpanKind}
    assert set(sections.SHARE_OF_KIND.values()) == set(TimeSplit.SHARES) - {"other"}


def test_recompiles_of_one_location_and_cause_are_one_row_with_the_failed_guard_once(report: Report) -> None:
    lines = text_view.render(report).splitlines()
    start = lines.index(next(line for line in lines if line.startswith("Recompiles:")))
    assert lines[start] == "Recompiles: 3 at 1 location, 1 cause"
    block = " ".join(" ".join(lines[start + 1:]).split())
    assert block.count("/elsewhere/loop.py:9") == 1
    assert block.count("size mismatch") == 1  # the guard once, its changing value listed
    assert "tensor 'x' size mismatch at index 0. expected 1, 2, 3" in block
    assert "0/1:" not in block  # Dynamo's frame/n prefix is not part of the guard


def test_both_views_render_the_same_sections(report: Report, tmp_path: Path) -> None:
    built = sections.build(report)
    table = text_view.render(report)
    page = _parse(html_view.write(report, tmp_path / "r.html"))
    html_text = " ".join(page.text)
    for section in built:
        if section.title and section.key != "environment":
            assert f"{section.title}:" in table and section.title in html_text, section.title
        for table_model in section.tables:
            for row in table_model.rows:
                assert row[0] in html_text


def test_table_rows_per_xla_graph(report: Report) -> None:
    lines = text_view.render(report).splitlines()
    for graph in report.xla_graphs:
        row = [str(graph.index), graph.role, str(graph.fx_ops), str(graph.xla_graphs), str(graph.compiles)]
        tail = [str(graph.executions_per_call), str(graph.transfers_per_call), str(graph.bytes_per_call)]
        assert any(line.split()[:5] == row and line.split()[7:10] == tail for line in lines), row


def test_table_wraps_long_suggestions_instead_of_cutting_them(report: Report) -> None:
    table = text_view.render(report)
    words = report.dynamo_breaks[0].suggestion.split()
    assert " ".join(table.split()).count(" ".join(words[:6])) >= 1
    assert table.split().count("tensor") >= words.count("tensor")


def test_empty_report_says_so() -> None:
    table = text_view.render(Report())
    assert "no graphs observed" in table
    assert "Dynamo:" not in table


def test_html_is_well_formed_and_self_contained(report: Report, tmp_path: Path) -> None:
    path = write_html(report, tmp_path / "report.html")
    assert path == tmp_path / "report.html"
    page = _parse(path)
    assert page.errors == []
    assert page.stack == []
    raw = path.read_text(encoding="utf-8")
    for external in ("<link", "src=", "@import", "url(http", "https://"):
        assert external not in raw, external


@pytest.mark.parametrize(
    "kinds",
    [
        ["xla"],
        ["xla", "cpu", "xla"],
        ["cpu", "xla"],
        ["xla", "cpu", "cpu", "xla", "cpu", "xla"],
    ],
)
def test_one_svg_per_fx_graph_with_its_boxes(kinds: list[str], tmp_path: Path) -> None:
    segments = [
        Segment(kind, [f"aten::op{i}", "aten::extra"] if kind == "xla" else [f"aten::cpu{i}"])
        for i, kind in enumerate(kinds)
    ]
    report = _report(tmp_path, [segments, [Segment("xla", ["aten::sum"])]])
    page = _parse(html_view.write(report, tmp_path / "r.html"))
    figures = [svg for svg, css in zip(page.svgs, page.svg_classes) if css == "fx-graph"]
    titles_of_figures = [t for t, css in zip(page.titles, page.svg_classes) if css == "fx-graph"]
    assert len(figures) == len(report.xla_graphs)
    first = figures[0]
    cuts = sum(a != b for a, b in zip(kinds, kinds[1:]))
    assert first.get("seg-xla", 0) == kinds.count("xla")
    assert first.get("seg-cpu", 0) == kinds.count("cpu")
    assert first.get("flow", 0) == len(kinds) - 1
    assert first.get("transfer", 0) == cuts
    assert figures[1] == {"seg-xla": 1}
    titles = " ".join(titles_of_figures[0])
    for segment in segments:
        for op in segment.ops:
            assert op in titles
    xla_labels = [f"XLA graph {k} (2 ops)" for k in range(1, kinds.count("xla") + 1)]
    for label in xla_labels:
        assert label in titles


def test_embedded_json_round_trips(report: Report, tmp_path: Path) -> None:
    page = _parse(write_html(report, tmp_path / "r.html"))
    data = json.loads(page.scripts["xlabridge-report"])
    assert Report.from_dict(data) == report


def test_html_escapes_text(report: Report, tmp_path: Path) -> None:
    report.hlo_breaks[0].op = "aten::<exp2>"
    path = write_html(report, tmp_path / "r.html")
    raw = path.read_text(encoding="utf-8")
    assert "<b>bold</b>" not in raw
    assert "aten::<exp2>" not in raw
    assert raw.count("</script>") == 1  # only the closing tag of the JSON block
    page = _parse(path)
    text = "".join(page.text)
    assert HOSTILE in text
    assert "aten::<exp2>" in text
    assert Report.from_dict(json.loads(page.scripts["xlabridge-report"])) == report


def test_empty_report_html(tmp_path: Path) -> None:
    page = _parse(html_view.write(Report(), tmp_path / "empty.html"))
    assert page.errors == []
    assert page.svgs == []
    assert "no graphs observed" in "".join(page.text)
    assert Report.from_dict(json.loads(page.scripts["xlabridge-report"])) == Report()
