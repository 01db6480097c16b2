"""torch_xla's ``PT_XLA_DEBUG_LEVEL=2`` file (``PT_XLA_DEBUG_FILE``) as a list of graph events.

torch_xla appends one block per compilation and one per execution of an XLA graph, lazy or
Dynamo-compiled, each line prefixed with its analysis ("Compilation Analysis: ...")::

    Execution Analysis: Execution Cause
    Execution Analysis:   user torch_xla.sync
    Execution Analysis: Graph Info:
    Execution Analysis:   Graph Hash: 39eddc358f42bc4d5eee77149ff2cb12
    Execution Analysis:   Number of Graph Inputs: 6
    Execution Analysis:   Number of Graph Outputs: 7
    Execution Analysis: Python Frame Triggered Execution:
    Execution Analysis:   sync (/.../torch_xla/torch_xla.py:87)
    Execution Analysis:   <module> (/tmp/train.py:16)

Frames are printed innermost first and cut at ``PT_XLA_DEBUG_MAX_FRAME`` (a line of dots).
A compilation is followed by "Post Compilation Analysis" lines with the graph's input, output,
aliased, intermediate and program sizes in GB. Checked against torch_xla 2.8 and 2.9.
"""

from __future__ import annotations

import dataclasses
import re

from xlabridge.diagnostics.events import Frame

__all__ = ["DebugEvent", "parse_debug_file"]

_LINE = re.compile(r"^(?P<analysis>Compilation|Execution|Post Compilation) Analysis:(?P<body>.*)$")
_FRAME = re.compile(r"^\s*(?P<function>\S+) \((?P<file>.*):(?P<line>\d+)\)\s*$")
_SIZE = re.compile(r"^\s*(?P<what>.+?) size: (?P<gb>[\d.]+) GB")


@dataclasses.dataclass(frozen=True)
class DebugEvent:
    """One compilation or execution of an XLA graph, as torch_xla's debug output gives it."""

    phase: str
    """``compile`` or ``execute``."""
    cause: str
    """torch_xla's words ("user torch_xla.sync", "dynamo is executing a compiled program", ...)."""
    graph_hash: str
    inputs: int
    outputs: int
    frames: tuple[Frame, ...]
    """The triggering Python stack, outermost first (cut at ``PT_XLA_DEBUG_MAX_FRAME``)."""
    truncated: bool
    sizes_gb: dict[str, float] = dataclasses.field(default_factory=dict)
    """For compilations: "Graph input", "Graph output", "Aliased Input", "Intermediate tensor",
    "Compiled program" sizes, in GB as printed."""


def _event(phase: str, lines: list[str]) -> DebugEvent:
    cause, graph_hash, inputs, outputs, frames, truncated = "", "", 0, 0, [], False
    section = ""
    for line in lines:
        stripped = line.strip()
        if stripped in ("Compilation Cause", "Execution Cause", "Graph Info:", "Python Frame Triggered Execution:"):
            section = stripped
        elif section.endswith("Cause") and stripped and not cause:
            cause = stripped
        elif section == "Graph Info:" and ":" in stripped:
            key, _, value = stripped.partition(":")
            if key == "Graph Hash":
                graph_hash = value.strip()
            elif key == "Number of Graph Inputs":
                inputs = int(value)
            elif key == "Number of Graph Outputs":
                outputs = int(value)
        elif section.startswith("Python Frame"):
            match = _FRAME.match(line)
            if match:
                frames.append(Frame(match.group("file"), int(match.group("line")), match.group("function")))
            elif stripped.startswith(".."):
                truncated = True
    return DebugEvent(phase, cause, graph_hash, inputs, outputs, tuple(reversed(frames)), truncated)


def parse_debug_file(text: str) -> list[DebugEvent]:
    """The compilations and executions of a ``PT_XLA_DEBUG_FILE``, in the order they happened."""
    events: list[DebugEvent] = []
    current: tuple[str, list[str]] | None = None

    def close() -> None:
        nonlocal current
        if current and any(line.strip() for line in current[1]):
            events.append(_event(*current))
        current = None

    for raw in text.splitlines():
        match = _LINE.match(raw)
        if not match:
            continue
        analysis, body = match.group("analysis"), match.group("body")
        if analysis == "Post Compilation":
            size = _SIZE.match(body)
            if size and events and events[-1].phase == "compile":
                events[-1].sizes_gb[size.group("what").strip()] = float(size.group("gb"))
            continue
        phase = "compile" if analysis == "Compilation" else "execute"
        if body.strip().startswith("====="):
            # A rule opens and closes each block; the cause line starts a new one.
            continue
        if body.strip() in ("Compilation Cause", "Execution Cause"):
            close()
            current = (phase, [])
        if current is not None:
            if body.strip().startswith("-----"):
                close()
                continue
            current[1].append(body)
    close()
    return events
