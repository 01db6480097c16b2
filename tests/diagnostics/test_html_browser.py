"""The HTML report in a real browser: headless Chromium renders the demo-shaped report; the DOM
it rendered must hold the ranked summary and a timeline with every span, and its screenshot (the
first screen, 1400x2000) must show them: the summary card's background and the timeline's lanes
with the colour of every kind of span in them.

The checker is shown to fail on pages with the summary or the timeline cut out. Skipped where
Debian's ``chromium`` is not installed (``.ci/run`` installs it).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.diagnostics import demo_like
from xlabridge.diagnostics import write_html
from xlabridge.diagnostics.views import _sections as sections

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
Image = pytest.importorskip("PIL.Image", reason="pillow reads the screenshot")

SUMMARY_BACKGROUND = (0xFF, 0xFA, 0xFA)
"""``#summary``'s background in the page's CSS: only the summary card has it."""
LANE_BAND = (0xF3, 0xF5, 0xF7)
"""``svg.timeline .band``: the background of the timeline's lanes, nowhere else."""


def _chromium(page: Path, work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = work / f"profile-{len(list(work.iterdir()))}"
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--hide-scrollbars", f"--user-data-dir={profile}", "--window-size=1400,2000", *args,
               page.resolve().as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


def render(page: Path, work: Path) -> tuple[str, Path]:
    """The DOM Chromium rendered of ``page`` and a screenshot of its first screen."""
    dom = _chromium(page, work, "--dump-dom").stdout
    png = work / f"{page.stem}.png"
    _chromium(page, work, f"--screenshot={png}")
    return dom, png


class _Dom(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.stack: list[dict[str, str]] = []
        self.summary_rows = 0
        self.timelines = 0
        self.span_rects: list[str] = []

    def _inside(self, **wanted: str) -> bool:
        return any(all(a.get(k) == v for k, v in wanted.items()) for a in self.stack)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = {k: v or "" for k, v in attrs}
        a["tag"] = tag
        if tag == "tr" and "finding" in a.get("class", "") and self._inside(tag="section", id="summary"):
            self.summary_rows += 1
        if tag == "svg" and a.get("class") == "timeline" and self._inside(tag="section", id="timeline"):
            self.timelines += 1
        if tag == "rect" and self._inside(tag="g", **{"class": "span"}) and self._inside(tag="svg", **{"class": "timeline"}):
            self.span_rects.append(a.get("fill", ""))
        if tag not in ("rect", "line", "meta", "br", "path", "circle"):
            self.stack.append(a)

    def handle_endtag(self, tag: str) -> None:
        for n in range(len(self.stack) - 1, -1, -1):
            if self.stack[n]["tag"] == tag:
                del self.stack[n:]
                break


def _rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


def check(dom: str, png: Path, *, spans: int, colours: set[str]) -> list[str]:
    """What the rendered page lacks of the summary and the timeline ([] when both are there)."""
    missing = []
    parsed = _Dom()
    parsed.feed(dom)
    if not parsed.summary_rows:
        missing.append("summary: no ranked finding in the rendered DOM")
    if not parsed.timelines:
        missing.append("timeline: no timeline SVG in the rendered DOM")
    elif len(parsed.span_rects) != spans:
        missing.append(f"timeline: {len(parsed.span_rects)} spans drawn of {spans}")
    image = Image.open(png).convert("RGB")
    width, height = image.size
    pixels = image.load()
    counts: dict[tuple[int, int, int], int] = {}
    band_rows = set()
    for y in range(0, height, 1):
        for x in range(0, width, 2):
            colour = pixels[x, y]
            counts[colour] = counts.get(colour, 0) + 1
            if colour == LANE_BAND:
                band_rows.add(y)
    if len(counts) < 16 or counts.get((255, 255, 255), 0) > 0.97 * (width // 2) * height:
        missing.append("screenshot: blank")
    if counts.get(SUMMARY_BACKGROUND, 0) < 20_000:
        missing.append("summary: not on the first screen")
    if len(band_rows) < 18:
        missing.append("timeline: no lanes on the first screen")
    else:
        seen = {pixels[x, y] for y in band_rows for x in range(width)}
        absent = sorted(c for c in colours if _rgb(c) not in seen)
        if absent:
            missing.append(f"timeline: colours {absent} not drawn in its lanes")
    return missing


def _without(raw: str, section: str) -> str:
    cut, count = re.subn(rf'<section id="{section}".*?</section>', "", raw, flags=re.S)
    assert count == 1, section
    return cut


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path], dict]:
    work = tmp_path_factory.mktemp("browser")
    report = demo_like.report()
    full = write_html(report, work / "report.html")
    raw = full.read_text(encoding="utf-8")
    cut = {}
    for name in ("summary", "timeline"):
        cut[name] = work / f"no-{name}.html"
        cut[name].write_text(_without(raw, name), encoding="utf-8")
    expected = {"spans": len(report.timeline),
                "colours": {sections.KIND_COLOURS[s.kind] for s in report.timeline}}
    return work, {"full": full, **cut}, expected


def test_chromium_renders_the_summary_and_the_timeline_on_the_first_screen(pages) -> None:
    work, paths, expected = pages
    dom, png = render(paths["full"], work)
    assert check(dom, png, **expected) == []
    assert Image.open(png).size == (1400, 2000)


@pytest.mark.parametrize("cut", ["summary", "timeline"])
def test_the_check_fails_without_the_summary_or_the_timeline(pages, cut: str) -> None:
    work, paths, expected = pages
    dom, png = render(paths[cut], work)
    missing = check(dom, png, **expected)
    assert missing and all(line.startswith(f"{cut}:") for line in missing), missing
    assert any("DOM" in line for line in missing) and any("first screen" in line for line in missing)
