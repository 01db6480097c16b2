"""The code blocks of the docs pages and the README, read as the tests run them.

A page's code is one of:

* a file under ``docs/examples/`` included with ``{literalinclude}``: run, from a scratch
  directory; a ```` ```text ```` block right after a ``% output: examples/NAME.py`` comment is
  what it prints;
* a ```` ```console ```` block: each ``$ `` line is a command, run from the repository root in
  order, and the lines after it are what it prints (``...`` stands for lines left out);
* a ```` ```python ```` block: run as a script;
* a ``{code-block}`` whose ``:caption:`` starts with "Not run": shown, not run; the caption says
  why (hardware these machines lack, an install), and the test that skips it repeats the reason;
* in the README (plain Markdown, no directives), a ```` ```sh ```` block of ``make`` and
  ``pip install`` lines: the two commands and the install, which CI runs in its own way.

Output is compared for what it says, not for numbers: numbers with their units, and runs of
whitespace, compare equal (see ``normalize``).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"
README = ROOT / "README.md"

EXCLUDED_PAGES = {
    "docs/guides/torchtpu.md": "records of commands run in .venv-torchtpu (torch 2.15 + torch-tpu): "
    "tests/torchtpu checks each finding the page marks (tested)",
}
"""Pages whose blocks are records rather than examples, and why."""

_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@dataclasses.dataclass(frozen=True)
class Block:
    page: str
    line: int
    info: str
    body: str
    comment: str = ""  # a ``% ...`` comment line right before the block

    @property
    def language(self) -> str:
        info = self.info.strip()
        if info.startswith("{"):
            directive, _, argument = info.partition("}")
            return f"{directive}}}" + (f" {argument.strip()}" if argument.strip() else "")
        return info.split()[0] if info else ""

    @property
    def options(self) -> dict[str, str]:
        out = {}
        for line in self.body.splitlines():
            match = re.match(r"^:(\w[\w-]*):\s*(.*)$", line)
            if not match:
                break
            out[match[1]] = match[2]
        return out

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    found = [README, *sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)]
    return [p for p in found if p.relative_to(ROOT).as_posix() not in EXCLUDED_PAGES]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a page, outermost only, with the comment line before each."""
    lines = path.read_text(encoding="utf-8").splitlines()
    page = path.relative_to(ROOT).as_posix()
    out, i = [], 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, start = match["fence"], i
        i += 1
        while i < len(lines) and not (lines[i].startswith(fence) and not lines[i].strip(fence[0]).strip()):
            i += 1
        previous = lines[start - 1].strip() if start else ""
        comment = previous[1:].strip() if previous.startswith("%") or previous.startswith("<!--") else ""
        comment = comment.removesuffix("-->").removeprefix("!--").strip()
        out.append(Block(page, start + 1, match["info"], "\n".join(lines[start + 1 : i]), comment))
        i += 1
    return out


def all_blocks() -> list[Block]:
    return [block for path in pages() for block in blocks(path)]


def included_examples() -> dict[str, Block]:
    """``docs/examples/NAME.py`` -> the block that includes it (the first, where several do)."""
    out: dict[str, Block] = {}
    for block in all_blocks():
        if block.language.startswith("{literalinclude}"):
            name = block.info.split("}", 1)[1].strip()
            out.setdefault(Path(name).name, block)
    return out


def expected_outputs() -> dict[str, Block]:
    """``NAME.py`` -> the ```text block that shows what ``docs/examples/NAME.py`` prints."""
    return {
        Path(block.comment.removeprefix("output:").strip()).name: block
        for block in all_blocks()
        if block.comment.startswith("output:") and block.language == "text"
    }


def console_commands(block: Block) -> list[tuple[str, str]]:
    """Each ``$ `` command of a console block and the output shown after it."""
    out: list[tuple[str, list[str]]] = []
    for line in block.body.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out:
            out[-1][1].append(line)
    return [(command, "\n".join(shown)) for command, shown in out]


_NUMBER = re.compile(
    r"(?<![\w.])[-+−]?\d[\d,]*(\.\d+)?(e[-+]?\d+)?( ?(µs|ms|ns|s|KiB|MiB|GiB|kB|KB|MB|GB|TB|k|M|B|x|×|%))?(?!\w)"
)


_ITEM = re.compile(r"^\s+\d+\. ")


def normalize(text: str) -> str:
    """``text`` with every number (and its unit) as ``#`` and every run of whitespace as one space."""
    return " ".join(_NUMBER.sub("#", text).split())


def missing_lines(shown: str, printed: str) -> list[str]:
    """The parts of ``shown`` that ``printed`` does not contain.

    ``shown`` is cut at its ``...`` lines and before each item of a numbered list (``  2. ...``);
    each part must appear in ``printed``, numbers and whitespace aside. The parts may appear in
    any order: a ranking by cost (the report's findings) may change its order from run to run.
    """
    parts: list[list[str]] = [[]]
    for line in shown.splitlines():
        if line.strip() == "...":
            parts.append([])
        elif _ITEM.match(line):
            parts.append([line])
        else:
            parts[-1].append(line)
    haystack = normalize(printed)
    return ["\n".join(part) for part in parts if normalize("\n".join(part)) and normalize("\n".join(part)) not in haystack]
