"""``docs/benchmarks.md`` is generated from the results files, one per benchmark, and so are the
tables of ``docs/guides/mxfp4.md``: neither may drift from them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location("_bench_summarize", Path(__file__).resolve().parents[2] / "tools" / "bench" / "summarize.py")
summarize = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = summarize  # dataclasses look their module up there
_SPEC.loader.exec_module(summarize)


def test_every_results_file_has_its_section() -> None:
    assert not summarize.unlisted(), f"results files without a section in tools/bench/summarize.py: {summarize.unlisted()}"


def test_the_benchmarks_page_is_what_the_results_files_make() -> None:
    assert summarize.PAGE.read_text(encoding="utf-8") == summarize.render(), (
        "docs/benchmarks.md is stale: python tools/bench/summarize.py"
    )


def test_the_mxfp4_guide_s_tables_are_what_the_results_files_make() -> None:
    text = summarize.GUIDE.read_text(encoding="utf-8")
    assert summarize._BLOCK.search(text), "docs/guides/mxfp4.md has no generated table"
    assert text == summarize.render_guide(), "docs/guides/mxfp4.md is stale: python tools/bench/summarize.py"


def test_tpu_figures_say_they_were_compiled_not_run() -> None:
    for section in summarize.render().split("\n## ")[1:]:
        if "TPU" in section.split("\n", 1)[0]:
            assert "not run" in section, section.split("\n", 1)[0]
