"""The pod part of a report: XLA graphs a process ran (lazily traced ones too), the collectives
of each, and differences between processes; built from the events of ``_pod``.

What each collective means (``xlabridge.pod.classify``), which frame is the user's (the
process's ``UserCodeRule``) and where a line of Dynamo's generated code came from (``fx_code``
events: ``<eval_with_key>.N:L`` is mapped to the FX node's stack trace) are decided here, when
the report is built.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._frames import UNKNOWN, UserCodeRule

_GENERATED = re.compile(r"^<eval_with_key>\.\d+")


def _generated_name(filename: str) -> str | None:
    match = _GENERATED.match(filename)
    return match.group(0) if match else None


class FxLines:
    """The user stacks behind the lines of Dynamo's generated code, for one process."""

    def __init__(self, events: Sequence[ev.Event]) -> None:
        self.lines: dict[str, dict[int, tuple[ev.Frame, ...]]] = {}
        for code in events:
            if isinstance(code, ev.FxCode):
                name = _generated_name(code.filename) or code.filename
                self.lines.setdefault(name, {}).update({line.lineno: line.frames for line in code.lines})

    def expand(self, frames: Sequence[Any]) -> list[ev.Frame]:
        """``frames`` with each frame of generated code replaced by its node's stack trace."""
        out: list[ev.Frame] = []
        for frame in frames:
            name = _generated_name(frame.filename)
            node = self.lines.get(name, {}).get(frame.lineno) if name else None
            out += list(node) if node else [ev.Frame(frame.filename, frame.lineno, frame.function)]
        return out


def user_frame(rule: UserCodeRule, fx: FxLines, stack: Sequence[Any], source: Any = None) -> ev.Frame:
    """The innermost user frame of ``stack`` (generated code mapped back), else the HLO
    metadata's ``source`` line if it is the user's, else ``UNKNOWN``."""
    frame = rule.innermost(fx.expand(stack))
    if frame is UNKNOWN and source is not None and source.file and rule.is_user(source.file):
        frame = ev.Frame(source.file, source.line, source.op_type)
    return frame


def label(pid: int, rank: int | None) -> str:
    """How a process is named in the report: ``rank 1`` where known, else ``pid 1234``."""
    return f"rank {rank}" if rank is not None else f"pid {pid}"


def divergences(processes: Sequence[tuple[str, Sequence[ev.Event], Callable[[str], bool]]]) -> tuple[list, list]:
    """``find_divergences`` over the processes that recorded their runs (two or more)."""
    from xlabridge.pod import GraphSources, ProcessRun, find_divergences
    from xlabridge.pod.lazy import GraphRun, classify_cause

    runs, rules = [], []
    for name, events, is_user in processes:
        recorded = [e for e in events if isinstance(e, ev.LazyRuns)]
        if not recorded:
            continue
        sources = {e.hash: GraphSources.from_dict(e.sources) for e in events
                   if isinstance(e, ev.GraphCollectives) and e.sources}
        runs.append(ProcessRun(
            name,
            tuple(GraphRun(r.step, r.hash, classify_cause(r.cause), r.compiled) for e in recorded for r in e.runs),
            {}, sources,
        ))
        rules.append(is_user)
    if len(runs) < 2:
        return [], []
    return find_divergences(runs, is_user=lambda filename: any(rule(filename) for rule in rules))
