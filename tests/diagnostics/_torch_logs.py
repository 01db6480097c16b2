"""torch's own account of graph breaks, the reference the report's breaks are checked against: what
``TORCH_LOGS=graph_breaks`` prints, read here with regular expressions of this file's own (not
xlabridge's parser), in process (a handler on torch's ``graph_breaks`` channel) or from a
subprocess's stderr."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
from collections.abc import Iterator

_AT = re.compile(r"Graph break(?: \(user stack suppressed[^)]*\))? in user code at (?P<file>.+):(?P<line>\d+)$", re.M)
_PAGE = re.compile(r"/gb/gb(\d+)\.html")
_PREFIX = re.compile(r"[VIWEC]\d{4} [\d:.]+ +\d+ \S+:\d+\] (?:\[(?P<compile_id>[!\d/]+)\] )?(?:\[[^\]]*\] )*"
                     r"\[__graph_breaks\] ?")


@dataclasses.dataclass(frozen=True)
class LoggedBreak:
    file: str
    line: int
    gb_type: str
    code: str
    compile_id: str = ""
    """The compile id torch's log prefix names (``[1/0]``; from a subprocess's stderr only)."""


def parse(message: str, compile_id: str = "") -> LoggedBreak | None:
    """One graph-break message as torch logs it, or None for another message."""
    at = _AT.search(message)
    if at is None or "Graph Break Reason:" not in message:
        return None
    reason = message.split("Graph Break Reason:", 1)[1]
    lines = reason.splitlines()
    explained = next((i for i, line in enumerate(lines) if line.startswith("  Explanation:")), None)
    above = lines[:explained] if explained is not None else lines[:1]
    gb_type = next((line.strip() for line in reversed(above) if line.strip()), "")
    page = _PAGE.search(reason)
    return LoggedBreak(at["file"], int(at["line"]), gb_type, f"GB{page.group(1)}" if page else "", compile_id)


def from_stderr(text: str) -> list[LoggedBreak]:
    """The breaks of a run's stderr under ``TORCH_LOGS=graph_breaks`` (each message's lines prefixed; a
    prefix is looked for anywhere in a line: a progress bar, such as the Trainer's, leaves its text
    without a newline before the next line torch logs)."""
    messages: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        match = _PREFIX.search(line)
        if not match:
            continue
        body = line[match.end():]
        if body.startswith("Graph break") and " in user code at " in body:
            messages.append((match["compile_id"] or "", []))
        if messages:
            messages[-1][1].append(body)
    return [b for b in (parse("\n".join(m), cid) for cid, m in messages) if b is not None]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def logged_breaks() -> Iterator[list[LoggedBreak]]:
    """The breaks torch logs on its ``graph_breaks`` channel inside the block (filled at its end)."""
    import torch

    found: list[LoggedBreak] = []
    handler = _Collect()
    logger = logging.getLogger("torch._dynamo")
    torch._logging.set_logs(graph_breaks=True)
    logger.addHandler(handler)
    try:
        yield found
    finally:
        logger.removeHandler(handler)
        torch._logging.set_logs()
        found += [b for b in map(parse, handler.messages) if b is not None]


def outside_frameworks(path: str) -> bool:
    """Whether torch's break location is in the user's code by the report's rule (not Python's
    standard library or torch): there the report's line is torch's; elsewhere it is the innermost
    user frame of torch's stack, where the fix goes."""
    import os
    import sysconfig

    import torch

    inside = [sysconfig.get_paths()["stdlib"], os.path.dirname(torch.__file__)]
    return not any(os.path.realpath(path).startswith(os.path.realpath(d) + os.sep) for d in inside) or \
        "site-packages" in os.path.relpath(path, sysconfig.get_paths()["stdlib"]).split(os.sep)[0]


def expected_code(logged: LoggedBreak) -> str:
    """The code torch names for a break; where its message names none (torch 2.8, some breaks on 2.9),
    the one torch's own registry gives its type (``graph_break_registry.json``, read here directly)."""
    if logged.code:
        return logged.code
    import json
    import os

    import torch._dynamo

    with open(os.path.join(torch._dynamo.__path__[0], "graph_break_registry.json"), encoding="utf-8") as file:
        registry = json.load(file)
    return next((code for code, entries in registry.items() if any(e.get("Gb_type") == logged.gb_type for e in entries)), "")
