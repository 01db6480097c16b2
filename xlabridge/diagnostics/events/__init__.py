"""The events the probes emit, one JSON line each: the only input of a report.

Every event is a dataclass with a ``type`` tag (``EventType``), the process that emitted it
(``pid``; ``rank``/``world`` where known) and ``t``, a monotonic timestamp in seconds
(``time.monotonic()`` of that process; the ``process_start`` event pairs it with the wall
clock, so logs of several processes can be lined up). A log is a file of JSON lines, one
event per line, in the order emitted, as torch's structured trace is: ``write_log`` writes
one, ``read_log`` reads one back. Its first line is the ``process_start`` event, which
carries the log's schema, ``SCHEMA``.

Readers are lenient within a schema version: a field the reader does not know is ignored, a
field the log lacks takes its default, and an event type the reader does not know is skipped
(``read_log`` counts them in ``LogContents.skipped``). A breaking change bumps ``SCHEMA``.

Intervals are given by their end ``t`` and their ``start``; durations are ``t - start``.
Facts are recorded raw (reason texts, stacks as frames, op names): what they mean (causes,
suggestions, which frame is the user's) is decided when a report is built from them, so a
newer xlabridge re-reads an old log with its newer knowledge.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from xlabridge.diagnostics.events._backends import BackendCompile, CompiledCalls, FxProgram, LoweringBreak, TpuSlice
from xlabridge.diagnostics.events._base import (
    Event,
    EventType,
    Frame,
    GraphOrigin,
    HloFormat,
    ProbeState,
    SCHEMA,
    SegmentKind,
    XlaPhase,
    innermost,
)
from xlabridge.diagnostics.events._types import (
    BridgeGraph,
    CompilePath,
    CpuNode,
    DynamoCompile,
    EVENT_CLASSES,
    EagerOps,
    FxCode,
    FxLine,
    GraphBreak,
    GraphCalled,
    GraphCalls,
    GraphCaptured,
    GraphCollectives,
    Imported,
    LazyGraphSeen,
    LazyRun,
    LazyRuns,
    Partitioned,
    ProbeStatus,
    ProcessEnd,
    ProcessStart,
    Recompile,
    SegmentRecord,
    Sync,
    TorchBreak,
    TpuCompiled,
    TpuPass,
    TraceRead,
    Transfer,
    XlaCompile,
    XlaGraphSeen,
)

__all__ = [
    "BackendCompile",
    "BridgeGraph",
    "CompilePath",
    "CompiledCalls",
    "CpuNode",
    "DynamoCompile",
    "EagerOps",
    "EVENT_CLASSES",
    "Event",
    "EventType",
    "Frame",
    "FxCode",
    "FxLine",
    "FxProgram",
    "GraphBreak",
    "GraphCalled",
    "GraphCalls",
    "GraphCaptured",
    "GraphCollectives",
    "GraphOrigin",
    "HloFormat",
    "Imported",
    "LazyGraphSeen",
    "LazyRun",
    "LazyRuns",
    "LoweringBreak",
    "Partitioned",
    "ProbeState",
    "ProbeStatus",
    "ProcessEnd",
    "ProcessStart",
    "Recompile",
    "SCHEMA",
    "SegmentKind",
    "SegmentRecord",
    "Sync",
    "TorchBreak",
    "TpuCompiled",
    "TpuPass",
    "TpuSlice",
    "TraceRead",
    "Transfer",
    "XlaCompile",
    "XlaGraphSeen",
    "XlaPhase",
    "innermost",
    "LogContents",
    "from_dict",
    "iter_lines",
    "read_log",
    "to_dict",
    "write_log",
]


# --------------------------------------------------------------------------- JSON


def to_dict(event: Event) -> dict[str, Any]:
    """The event as JSON-ready data, ``type`` first."""
    return {"type": event.type.value, **_plain(dataclasses.asdict(event))}


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def from_dict(data: dict[str, Any]) -> Event | None:
    """The event of ``to_dict``'s form; ``None`` for an event type this version does not know."""
    try:
        event_type = EventType(data.get("type"))
    except ValueError:
        return None
    cls = EVENT_CLASSES[event_type]
    return _build(cls, data)


def _build(cls: type, data: dict[str, Any]) -> Any:
    """``cls`` from ``data``: unknown keys ignored, nested dataclasses and enums rebuilt."""
    hints = _field_types(cls)
    kwargs = {}
    for field in dataclasses.fields(cls):
        if field.name in data:
            kwargs[field.name] = _convert(hints[field.name], data[field.name])
    return cls(**kwargs)


_NESTED = {"Frame": Frame, "CpuNode": CpuNode, "SegmentRecord": SegmentRecord, "LazyRun": LazyRun, "FxLine": FxLine,
           "LoweringBreak": LoweringBreak}
_ENUMS = {"ProbeState": ProbeState, "SegmentKind": SegmentKind, "XlaPhase": XlaPhase, "GraphOrigin": GraphOrigin,
          "HloFormat": HloFormat}


def _field_types(cls: type) -> dict[str, str]:
    """Each field's annotation as written (``from __future__ import annotations``: strings)."""
    return {field.name: str(field.type) for field in dataclasses.fields(cls)}


def _convert(annotation: str, value: Any) -> Any:
    """Rebuild ``value`` read from JSON for a field annotated ``annotation``."""
    if value is None:
        return None
    for name, cls in _NESTED.items():
        if annotation.startswith(("list[" + name, "tuple[" + name)):
            items = [_build(cls, item) for item in value]
            return items if annotation.startswith("list") else tuple(items)
        if annotation.startswith(name):
            return _build(cls, value)
    for name, enum_cls in _ENUMS.items():
        if annotation.startswith(name):
            return enum_cls(value)
    if annotation.startswith("tuple[") and isinstance(value, list):
        return tuple(value)
    return value


# --------------------------------------------------------------------------- logs


@dataclasses.dataclass
class LogContents:
    """What ``read_log`` found: the events it knows, and how many lines it skipped."""

    events: list[Event]
    skipped: int = 0


def write_log(events: Iterable[Event], path: str | Path) -> Path:
    """Write ``events`` to ``path`` as JSON lines; returns the path."""
    path = Path(path)
    with path.open("w", encoding="utf-8") as out:
        for event in events:
            out.write(json.dumps(to_dict(event)) + "\n")
    return path


def iter_lines(path: str | Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a log, one per non-empty line."""
    with Path(path).open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path}:{number}: not a JSON line ({error.msg})") from None


def read_log(path: str | Path) -> LogContents:
    """Read a log written by ``write_log`` (or a process under ``xlabridge report``).

    Refuses a log of another schema; skips (and counts) event types this version does not know.
    """
    contents = LogContents(events=[])
    for data in iter_lines(path):
        if data.get("type") == EventType.PROCESS_START.value and data.get("schema", SCHEMA) != SCHEMA:
            raise ValueError(f"{path}: event log schema must be {SCHEMA!r}, got {data.get('schema')!r}")
        event = from_dict(data)
        if event is None:
            contents.skipped += 1
        else:
            contents.events.append(event)
    return contents
