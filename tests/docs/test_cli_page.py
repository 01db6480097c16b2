"""``docs/cli.md`` documents every subcommand and option of the ``xlabridge`` command."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.docs import _pages

PAGE = _pages.DOCS / "cli.md"

# Read in a child process: importing ``xlabridge.cli`` here would add ``cli`` to the package's
# names for every later test of this process (tests/test_public_api.py lists those).
_PARSER = """
import argparse, json
from xlabridge import cli
(sub,) = [a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction)]
print(json.dumps({
    name: [a.option_strings or [a.metavar or a.dest] for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    for name, parser in sub.choices.items()
}))
"""


def _subcommands() -> dict[str, list[list[str]]]:
    done = subprocess.run([sys.executable, "-c", _PARSER], capture_output=True, text=True, check=True, cwd=_pages.ROOT)
    return json.loads(done.stdout)


def test_every_subcommand_and_option_is_on_the_cli_page() -> None:
    text = PAGE.read_text(encoding="utf-8")
    missing = []
    for name, options in _subcommands().items():
        heading = f"## `xlabridge {name}`"
        if heading not in text:
            missing.append(f"section {heading}")
        section = text.split(heading, 1)[-1].split("\n## ", 1)[0]
        missing += [f"xlabridge {name} {n}" for names in options for n in names if f"`{n}" not in section]
    assert not missing, f"docs/cli.md does not document: {missing}"
