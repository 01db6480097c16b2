"""Running sums of what repeats with every step, bounded whatever the number of steps.

A compiled graph called 10,000 times, or ``torch_xla.sync()`` at the end of 10,000 steps, is not
10,000 events: past its first few occurrences (recorded in full), each adds to a sum kept by the
recorder: count, seconds, and ``Spans``, the calls in time with at most ``SPANS`` entries (when
they are full, neighbours are merged pairwise and each entry then stands for twice as many calls),
so that the timeline still covers the whole run. A recorder with a log has its sums rewritten
beside the log while the process runs (``heartbeat``), and appended to it at the end; the events
are cumulative, the latest counts.
"""

from __future__ import annotations

from typing import Any

from xlabridge.diagnostics import events as ev

SPANS = 64
"""Entries of a ``Spans``: the log of a run of any length holds at most this many per graph or site."""


class Spans:
    """Intervals in time order, at most ``SPANS`` entries ``[start, seconds, calls, end]``."""

    __slots__ = ("items", "width")

    def __init__(self) -> None:
        self.items: list[list[float]] = []
        self.width = 1
        """Calls each entry stands for (the last one fills up to it)."""

    def add(self, start: float, seconds: float) -> None:
        items = self.items
        if items and items[-1][2] < self.width:
            last = items[-1]
            last[1] += seconds
            last[2] += 1
            last[3] = start + seconds
            return
        items.append([start, seconds, 1, start + seconds])
        if len(items) > SPANS:
            merged = [[a[0], a[1] + b[1], a[2] + b[2], b[3]] for a, b in zip(items[0::2], items[1::2])]
            if len(items) % 2:
                merged.append(items[-1])
            self.items = merged  # one assignment: a reader in another thread sees the old list or the new
            self.width *= 2

    def encoded(self) -> list[list[float]]:
        """As events carry them: ``[start, seconds]`` for one call, ``[start, seconds, calls, end]`` for several."""
        return [item[:2] if item[2] == 1 else list(item) for item in list(self.items)]


class Tally:
    """One running sum; ``event`` makes its cumulative event."""

    __slots__ = ()

    def event(self, stamp: dict[str, Any]) -> ev.Event:
        raise NotImplementedError


class GraphCallSums(Tally):
    """The later calls of one compiled graph."""

    __slots__ = ("graph", "calls", "seconds", "cpu", "spans")

    def __init__(self, graph: int) -> None:
        self.graph = graph
        self.calls = 0
        self.seconds = 0.0
        self.cpu = 0.0
        self.spans = Spans()

    def add(self, start: float, seconds: float, cpu: float = 0.0) -> None:
        self.calls += 1
        self.seconds += seconds
        self.cpu += cpu
        self.spans.add(start, seconds)

    def event(self, stamp: dict[str, Any]) -> ev.GraphCalls:
        return ev.GraphCalls(**stamp, graph=self.graph, calls=self.calls, seconds=self.seconds,
                             cpu_fallback_seconds=self.cpu, spans=self.spans.encoded(), cumulative=True)


class SyncSums(Tally):
    """The later syncs (or regions, or waits) of one call site."""

    __slots__ = ("site", "what", "frames", "calls", "seconds", "compiles", "compile_seconds", "spans")

    def __init__(self, site: int, what: str, frames: list[ev.Frame]) -> None:
        self.site, self.what, self.frames = site, what, frames
        self.calls = 0
        self.seconds = 0.0
        self.compiles = 0
        self.compile_seconds = 0.0
        self.spans = Spans()

    def add(self, start: float, seconds: float, compiles: int, compile_seconds: float) -> None:
        self.calls += 1
        self.seconds += seconds
        self.compiles += compiles
        self.compile_seconds += compile_seconds
        self.spans.add(start, seconds)

    def event(self, stamp: dict[str, Any]) -> ev.SyncCalls:
        return ev.SyncCalls(**stamp, site=self.site, what=self.what, frames=list(self.frames), calls=self.calls,
                            seconds=self.seconds, compiles=self.compiles, compile_seconds=self.compile_seconds,
                            spans=self.spans.encoded())


class CollectiveSums(Tally):
    """The host's waits in one kind of collective call."""

    __slots__ = ("op", "calls", "seconds", "spans")

    def __init__(self, op: str) -> None:
        self.op = op
        self.calls = 0
        self.seconds = 0.0
        self.spans = Spans()

    def add(self, start: float, seconds: float) -> None:
        self.calls += 1
        self.seconds += seconds
        self.spans.add(start, seconds)

    def event(self, stamp: dict[str, Any]) -> ev.CollectiveWaits:
        return ev.CollectiveWaits(**stamp, op=self.op, calls=self.calls, seconds=self.seconds,
                                  spans=self.spans.encoded())
