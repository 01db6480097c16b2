"""An event as JSON-ready data and back: ``to_dict`` and ``from_dict``.

``from_dict`` is lenient within a schema (a field it does not know is ignored, a field the data
lacks takes its default) and strict about what it keeps: a field of the wrong JSON type (a damaged
line that still parses) makes it raise ``TypeError``, so that a reader can leave that line out and
say so, instead of handing a report builder a number that is a string.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from xlabridge.diagnostics.events._backends import LoweringBreak
from xlabridge.diagnostics.events._base import (
    ActivityKind,
    Ending,
    Event,
    EventType,
    Frame,
    GraphOrigin,
    HloFormat,
    ProbeState,
    SegmentKind,
    XlaPhase,
)
from xlabridge.diagnostics.events._lifecycle import Activity, ThreadStack
from xlabridge.diagnostics.events._types import (
    EVENT_CLASSES,
    CpuNode,
    FxLine,
    LazyRun,
    SegmentRecord,
)


def to_dict(event: Event) -> dict[str, Any]:
    """The event as JSON-ready data, ``type`` first."""
    return {"type": event.type.value, **_plain(event)}


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _plain(value: Any) -> Any:
    """``dataclasses.asdict`` without its deep copies (the result is only serialized), enums as
    their values: an FX graph's code maps hundreds of lines to their stacks, written while the
    first call runs."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value.value if isinstance(value, enum.Enum) else value
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: _plain(getattr(value, name)) for name in _names(type(value))}
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def from_dict(data: dict[str, Any]) -> Event | None:
    """The event of ``to_dict``'s form; ``None`` for an event type this version does not know.

    Raises ``TypeError`` or ``ValueError`` for data that is not such an event (a required field
    missing, a field of the wrong JSON type, an enum value this version does not know).
    """
    try:
        event_type = EventType(data.get("type"))
    except ValueError:
        return None
    return _build(EVENT_CLASSES[event_type], data)


def _build(cls: type, data: Any) -> Any:
    """``cls`` from ``data``: unknown keys ignored, nested dataclasses and enums rebuilt."""
    if not isinstance(data, dict):
        raise TypeError(f"{cls.__name__} must be a JSON object, got {type(data).__name__}")
    kwargs = {}
    for field in dataclasses.fields(cls):
        if field.name in data:
            kwargs[field.name] = _convert(str(field.type), data[field.name], field.name)
    return cls(**kwargs)


_NESTED = {"Frame": Frame, "CpuNode": CpuNode, "SegmentRecord": SegmentRecord, "LazyRun": LazyRun, "FxLine": FxLine,
           "ThreadStack": ThreadStack, "Activity": Activity, "LoweringBreak": LoweringBreak}
_ENUMS = {"ProbeState": ProbeState, "SegmentKind": SegmentKind, "XlaPhase": XlaPhase, "GraphOrigin": GraphOrigin,
          "HloFormat": HloFormat, "Ending": Ending, "ActivityKind": ActivityKind}
_SCALARS: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,)}


def _convert(annotation: str, value: Any, name: str) -> Any:
    """Rebuild ``value`` read from JSON for field ``name`` annotated ``annotation``."""
    if value is None:
        return None
    base = annotation[: -len(" | None")] if annotation.endswith(" | None") else annotation
    for nested, cls in _NESTED.items():
        if base.startswith(("list[" + nested, "tuple[" + nested)):
            _expect(isinstance(value, list), name, "an array", value)
            items = [_build(cls, item) for item in value]
            return items if base.startswith("list") else tuple(items)
        if base == nested:
            return _build(cls, value)
    if base in _ENUMS:
        return _ENUMS[base](value)
    if base in _SCALARS:
        # JSON has no separate booleans and integers for Python: True is an int there
        _expect(isinstance(value, _SCALARS[base]) and (base == "bool" or not isinstance(value, bool)),
                name, base, value)
        return value
    if base.startswith(("list[", "tuple[")):
        _expect(isinstance(value, list), name, "an array", value)
        if base == "list[list[float]]":
            _expect(all(isinstance(item, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                       for x in item) for item in value),
                    name, "an array of arrays of numbers", value)
        return tuple(value) if base.startswith("tuple[") else value
    if base.startswith("dict["):
        _expect(isinstance(value, dict), name, "an object", value)
    return value


def _expect(ok: bool, name: str, wanted: str, value: Any) -> None:
    if not ok:
        raise TypeError(f"field {name!r} must be {wanted}, got {type(value).__name__}")
