"""The stall watchdog: when no step made progress for ``after`` seconds, where each thread is.

Probes mark progress (``recorder.progress``) where a step moves: a compiled graph's call, a sync, a
Dynamo compilation or a TorchTPU call that ends. The heartbeat thread asks ``Watchdog.check`` a few
times a second; past ``after`` seconds without progress it writes one ``stall`` event: every Python
thread's stack (``sys._current_frames()``) and what the probes know to be under way, and again at
twice, four times... that time while the stall lasts. Probes say
that in two ways, both free on their hot paths: a code object of theirs found on a stack is
described from its frame (``recognize``: the graph an observed call runs), and a probe that keeps
state of what is open says it (``report_state``: the Dynamo compilations begun and not ended).
When progress comes again, a ``stall_end`` closes the stall. What the stacks mean (the user's line,
a collective waited in) is decided when the report is built.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Iterable
from types import CodeType, FrameType

from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe import recorder as _recorder

logger = logging.getLogger(__name__)

_RECOGNIZED: dict[CodeType, Callable[[FrameType], ev.Activity | None]] = {}
_STATES: list[Callable[[], Iterable[ev.Activity]]] = []


def recognize(codes: Iterable[CodeType], describe: Callable[[FrameType], ev.Activity | None]) -> None:
    """A frame running one of ``codes`` on a stalled thread is described by ``describe(frame)``."""
    for code in codes:
        _RECOGNIZED[code] = describe


def report_state(activities: Callable[[], Iterable[ev.Activity]]) -> None:
    """``activities()`` says what a probe knows to be under way (asked at a stall)."""
    _STATES.append(activities)


def frames_of(frame: FrameType | None) -> list[ev.Frame]:
    """``frame`` and its callers, outermost first."""
    frames = []
    while frame is not None:
        frames.append(ev.Frame(frame.f_code.co_filename, frame.f_lineno or 0, frame.f_code.co_name))
        frame = frame.f_back
    frames.reverse()
    return frames


def _described(frame: FrameType, thread: str) -> list[ev.Activity]:
    out = []
    while frame is not None:
        describe = _RECOGNIZED.get(frame.f_code)
        if describe is not None:
            try:
                activity = describe(frame)
            except Exception:  # noqa: BLE001 - a frame that cannot be read says nothing
                logger.debug("describing a stalled frame failed", exc_info=True)
                activity = None
            if activity is not None:
                out.append(ev.Activity(activity.kind, activity.detail, activity.graph, activity.since, thread))
        frame = frame.f_back
    out.reverse()
    return out


def snapshot() -> tuple[list[ev.ThreadStack], list[ev.Activity]]:
    """Every Python thread's stack but the caller's, the main thread first, and what is under way."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    main = threading.main_thread().ident
    me = threading.get_ident()
    threads, activities = [], []
    for ident, frame in sorted(sys._current_frames().items(), key=lambda item: (item[0] != main, item[0])):
        if ident == me:
            continue
        name = names.get(ident, f"thread {ident}")
        threads.append(ev.ThreadStack(name, ident == main, tuple(frames_of(frame))))
        activities += _described(frame, name)
    for state in _STATES:
        try:
            activities += list(state())
        except Exception:  # noqa: BLE001
            logger.debug("reading a probe's state at a stall failed", exc_info=True)
    return threads, activities


class Watchdog:
    """Writes a ``stall`` when no progress came for ``after`` seconds, and again while it lasts at 2,
    4, 8... times that (where a hang is now: a stall found during start-up may become a wait in a
    collective), so at most a few per stall whatever its length."""

    def __init__(self, after: float) -> None:
        self.after = after
        self.stalled_since: float | None = None
        self.next_report = after

    def check(self, now: float) -> None:
        since = _recorder.last_progress()
        self.settle()
        if now - since >= (self.next_report if self.stalled_since is not None else self.after):
            self.stalled_since = since
            self.next_report = 2 * (now - since)
            threads, activities = snapshot()
            _recorder.emit(ev.Stall(**_recorder.stamp(now), since=since, after=self.after, threads=threads,
                                    activities=activities))

    def settle(self) -> None:
        """A stall that progress has ended since it was written: its ``stall_end``."""
        since = _recorder.last_progress()
        if self.stalled_since is not None and since != self.stalled_since:
            _recorder.emit(ev.StallEnd(**_recorder.stamp(since), since=self.stalled_since))
            self.stalled_since = None
