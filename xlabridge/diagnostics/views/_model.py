"""The section model's types (what a view lays out) and how numbers and places are written in it."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from xlabridge.diagnostics.report import Span


@dataclasses.dataclass
class Table:
    """Rows under headers; ``caps`` are text column widths (0: the flexible column)."""

    headers: list[str]
    rows: list[list[str]]
    caps: list[int]


@dataclasses.dataclass
class Box:
    """One segment of an FX graph in its picture."""

    xla: bool
    label: str
    ops: list[str]


@dataclasses.dataclass
class Figure:
    """The picture of FX graphs of one place and shape: their segments left to right."""

    graph: int
    caption: str
    boxes: list[Box]
    graphs: list[int] = dataclasses.field(default_factory=list)
    """Every FX graph the picture stands for (``graph`` is the first)."""


@dataclasses.dataclass
class Ranked:
    """One finding of the ranked summary, costliest first."""

    rank: int
    where: str
    what: str
    """``4 recompiles``: its kind and count, in words."""
    cost: str
    """``1.30 s of 13.48 s (10%)``, or why it has no cost in time."""
    share: float | None
    """``cost_seconds`` over the wall time it is part of (``None``: not a cost in time)."""
    cost_words: str
    code: str
    url: str
    message: str
    compiled: bool = False
    """Read from compiled TPU programs: ``cost`` is the cost model's seconds, not a cost in this run."""


@dataclasses.dataclass
class Lane:
    """The spans of one kind in one process's timeline."""

    kind: str
    colour: str
    spans: list[Span]

    @property
    def seconds(self) -> float:
        return sum(span.seconds for span in self.spans)


@dataclasses.dataclass
class Timeline:
    """One process's run in time: a lane per kind of span, over ``end`` seconds."""

    pid: int
    title: str
    end: float
    lanes: list[Lane]


@dataclasses.dataclass
class Part:
    """One share of a process's wall time, for a stacked bar."""

    label: str
    seconds: float
    fraction: float
    colour: str


@dataclasses.dataclass
class Section:
    """A titled part of the report: a summary line, tables, pictures, notes."""

    key: str
    title: str
    summary: str = ""
    tables: list[Table] = dataclasses.field(default_factory=list)
    figures: list[Figure] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    items: list[Ranked] = dataclasses.field(default_factory=list)
    timelines: list[Timeline] = dataclasses.field(default_factory=list)
    bars: dict[str, list[Part]] = dataclasses.field(default_factory=dict)
    """Title of a stacked bar (one per process) → its parts."""


def plural(count: int, noun: str) -> str:
    """``1 graph``, ``2 graphs``, ``2 processes``."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {noun}es" if noun.endswith(("s", "sh", "ch", "x")) else f"{count} {noun}s"


def first_line(text: str) -> str:
    """The first non-empty line of ``text`` (Dynamo's reasons run to many lines)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def short_path(filename: str) -> str:
    """``filename`` relative to the current directory if it lies under it, else as given."""
    if not filename or filename.startswith("<"):
        return filename
    try:
        path, here = Path(filename).resolve(), Path.cwd().resolve()
    except (OSError, RuntimeError):
        return filename
    return os.path.relpath(path, here) if path.is_relative_to(here) else filename


def where(filename: str, lineno: int, function: str) -> str:
    """``file:line (function)`` with the file relative to the current directory when inside it."""
    place = f"{short_path(filename)}:{lineno}"
    return f"{place} ({function})" if function else place


def seconds(value: float | None) -> str:
    """``1.23 s``, ``45.6 ms``, ``12.3 µs`` (under 0.1 ms), ``-`` for unknown."""
    if value is None:
        return "-"
    if abs(value) >= 1:
        return f"{value:.2f} s"
    if value == 0 or abs(value) >= 1e-4:
        return f"{value * 1e3:.1f} ms"
    return f"{value * 1e6:.1f} µs"


def size(value: float | None) -> str:
    """``1.25 GiB``, ``3.4 MiB``, ``512 B``; ``-`` for unknown."""
    if value is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {unit}" if unit == "GiB" else f"{value / scale:.1f} {unit}"
    return f"{int(value)} B"


def count(value: float | None) -> str:
    """``1.2 G``, ``34.5 M``, ``980``; ``-`` for unknown."""
    if value is None:
        return "-"
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f}"


def byte_size(value: int) -> str:
    """``512 B``, ``2.0 KiB``, ``3.5 MiB``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value} B"
