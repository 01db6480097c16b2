"""The README is the door: short, with the two commands, and a quickstart whose output is real
(its console block is run and compared by ``test_examples``)."""

from __future__ import annotations

import re
import shlex

from tests.docs import _pages

MAKEFILE = _pages.ROOT / "Makefile"


def _demo_command() -> list[str]:
    """``make demo``'s command, with the Makefile's variables as a reader would type them."""
    text = MAKEFILE.read_text(encoding="utf-8")
    recipe = re.search(r"^demo:.*\n\t(?P<command>.+)$", text, re.M)["command"]
    tpu = re.search(r"^DEMO_TPU \?= (\S+)$", text, re.M)[1]
    recipe = recipe.replace("$(PY) -m xlabridge.cli", "xlabridge").replace("$(PY)", "python").replace("$(DEMO_TPU)", tpu)
    return shlex.split(recipe)


def test_readme_is_at_most_150_lines() -> None:
    assert len(_pages.README.read_text(encoding="utf-8").splitlines()) <= 150


def test_readme_gives_the_two_commands() -> None:
    sh = [b.body for b in _pages.blocks(_pages.README) if b.language == "sh"]
    lines = {line.split("#")[0].strip() for body in sh for line in body.splitlines()}
    assert {"make demo", "make test"} <= lines


def test_the_quickstart_output_is_make_demos() -> None:
    """The README and the quickstart page show the output of the command ``make demo`` runs."""
    for page in (_pages.README, _pages.DOCS / "quickstart.md"):
        consoles = [b for b in _pages.blocks(page) if b.language == "console"]
        commands = [shlex.split(c) for b in consoles for c, _ in _pages.console_commands(b)]
        assert _demo_command() in commands, f"{page.name} does not show `make demo`'s command"
