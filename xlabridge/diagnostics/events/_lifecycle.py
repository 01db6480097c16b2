"""Events of a process's life beyond its graphs: the signals it received, how it exited (as the
process that waited for it saw it), and its stalls, with the thread stacks and activities they carry.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from xlabridge.diagnostics._fields import field as _field
from xlabridge.diagnostics.events._base import ActivityKind, Event, EventType, Frame


@dataclasses.dataclass(kw_only=True)
class SignalReceived(Event):
    """A signal xlabridge listens for (SIGTERM, SIGINT) arrived, and was handed on to the handler the
    process had before xlabridge: the process does what it would have done without it."""

    type: ClassVar[EventType] = EventType.SIGNAL
    signal: str = _field("its name (``SIGTERM``)")
    handler: str = _field("what it was handed to: ``default`` (the process dies of it), ``KeyboardInterrupt`` "
                          "(Python's SIGINT handler raises it), ``ignored``, or the program's handler as "
                          "``file:line (function)``")
    frames: list[Frame] = _field("where the main thread was when it arrived, outermost first", factory=list)


@dataclasses.dataclass(kw_only=True)
class ProcessExit(Event):
    """How a process exited, as the process that waited for it saw it: ``xlabridge report`` writes it
    into the log of the command it ran, after the command ended (``pid`` is the exited process's; ``t``
    the waiting process's monotonic clock, the same clock on one host)."""

    type: ClassVar[EventType] = EventType.PROCESS_EXIT
    returncode: int = _field("as Python's ``subprocess`` gives it: the exit status, or ``-N`` when signal N ended it")
    signal: str = _field("the name of that signal (``SIGKILL``), if one ended it", "")
    waited_by: int = _field("pid of the process that waited for it", 0)


@dataclasses.dataclass(frozen=True)
class ThreadStack:
    """One thread's Python stack."""

    name: str = _field("the thread's name (``MainThread``)")
    main: bool = _field("whether it is the main thread", False)
    frames: tuple[Frame, ...] = _field("its stack, outermost first", ())


@dataclasses.dataclass(frozen=True)
class Activity:
    """What the probes knew a thread to be doing."""

    kind: ActivityKind = _field("``dynamo-compile``, ``extraction``, ``graph-call``, ``sync`` or ``torchtpu-call``")
    detail: str = _field("which: the compile id, the sync's kind, the call's number", "")
    graph: int | None = _field("the ``bridge_graph`` it is about, if any", None)
    since: float | None = _field("monotonic start, where the probe knows it", None)
    thread: str = _field("the thread's name", "")


@dataclasses.dataclass(kw_only=True)
class Stall(Event):
    """No step made progress for the option's seconds (``xlabridge report --stall-after``): where each
    thread of the process was, and what the probes knew it to be doing. Written when the stall reaches
    ``after`` seconds and again at 2, 4, 8... times that while it lasts (the same ``since``): the latest
    says where a hang is now."""

    type: ClassVar[EventType] = EventType.STALL
    since: float = _field("``t`` of the last progress: the end of a compiled graph's call, a sync, a Dynamo "
                          "compilation or a TorchTPU call (the start of observation before the first)")
    after: float = _field("the option's seconds: how long without progress counts as a stall")
    threads: list[ThreadStack] = _field("every Python thread's stack, the main thread first", factory=list)
    activities: list[Activity] = _field("what the probes knew to be under way", factory=list)


@dataclasses.dataclass(kw_only=True)
class StallEnd(Event):
    """Progress again after a ``stall``: the stall lasted from its ``since`` to ``t``."""

    type: ClassVar[EventType] = EventType.STALL_END
    since: float = _field("the stall's ``since``")
