"""Every code example of the docs runs, and prints what the page shows (``_pages`` says how)."""

from __future__ import annotations

import pytest

from tests.conftest import requires_xla
from tests.docs import _pages
from tests.docs.conftest import examples_to_run

pytestmark = requires_xla

_BLOCKS = _pages.all_blocks()
_EXAMPLES = sorted(p.name for p in _pages.EXAMPLES.glob("*.py"))
_OUTPUTS = _pages.expected_outputs()
_SHOWN = {"text", "", "json", "{eval-rst}", "{toctree}"}
"""Blocks that show rather than run: output, data, and the site's own directives."""


def test_every_example_file_is_on_a_page() -> None:
    included = _pages.included_examples()
    assert sorted(included) == _EXAMPLES, "docs/examples/ and the pages' {literalinclude}s differ"
    assert set(_OUTPUTS) <= set(_EXAMPLES), f"outputs shown for no example: {sorted(set(_OUTPUTS) - set(_EXAMPLES))}"


@pytest.mark.parametrize("name", examples_to_run())
def test_example_runs_and_prints_what_its_page_shows(docs_runs, name: str) -> None:
    run = docs_runs.result(name)
    assert run.returncode == 0, run.failure()
    if name in _OUTPUTS:
        missing = _pages.missing_lines(_OUTPUTS[name].body, run.stdout)
        assert not missing, f"{_OUTPUTS[name].id} shows what {name} no longer prints:\n{missing}\n--- printed:\n{run.stdout}"


@pytest.mark.parametrize("block", [b for b in _BLOCKS if b.language == "console"], ids=lambda b: b.id)
def test_console_commands_run_and_print_what_the_page_shows(docs_runs, block: _pages.Block) -> None:
    commands = _pages.console_commands(block)
    assert commands, f"{block.id}: a console block without a '$ ' command"
    runs = docs_runs.result(tuple(command for command, _ in commands))
    for (command, shown), run in zip(commands, runs):
        assert run.returncode == 0, f"{block.id}: {run.failure()}"
        missing = _pages.missing_lines(shown, run.stdout)
        assert not missing, f"{block.id}: `{command}` no longer prints:\n{missing}\n--- printed:\n{run.stdout}"
    assert len(runs) == len(commands)


def test_python_blocks_run(docs_runs) -> None:
    """Python written into a page (most pages include ``docs/examples`` files instead)."""
    for block in (b for b in _BLOCKS if b.language == "python"):
        run = docs_runs.result(block.body)
        assert run.returncode == 0, f"{block.id}: {run.failure()}"


@pytest.mark.parametrize("block", [b for b in _BLOCKS if b.language.startswith("{code-block}")], ids=lambda b: b.id)
def test_blocks_not_run_say_why(block: _pages.Block) -> None:
    caption = block.options.get("caption", "")
    assert caption.startswith("Not run"), f"{block.id}: a code-block runs nowhere; give it a ':caption: Not run ...: why'"
    pytest.skip(f"{block.id}: {caption}")


@pytest.mark.parametrize("page", sorted(_pages.EXCLUDED_PAGES))
def test_pages_of_records(page: str) -> None:
    pytest.skip(f"{page}: {_pages.EXCLUDED_PAGES[page]}")


def test_no_other_code_runs_unchecked() -> None:
    unchecked = []
    for block in _BLOCKS:
        language = block.language
        if language in _SHOWN or language in {"console", "python"} or language.startswith(("{code-block}", "{literalinclude}")):
            continue
        if block.page == "README.md" and language == "sh" and all(
            line.startswith(("make ", "pip install ")) or not line.strip() for line in block.body.splitlines()
        ):
            continue  # the install and the two commands: CI runs `make test` on a clean clone
        unchecked.append(f"{block.id} ({language or 'no language'})")
    assert not unchecked, (
        "code blocks no test runs: make them console/python blocks or docs/examples files, or a "
        f"{{code-block}} captioned 'Not run ...: why': {unchecked}"
    )
