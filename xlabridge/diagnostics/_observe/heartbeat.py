"""The observer's own thread: a few times a second it rewrites each recorder's running sums beside
its log (when they changed: a process killed at any moment loses at most the last ``TICK`` of
them), runs the stall watchdog, and wakes at once when a signal arrives while the main thread is
busy in C code (``ending``), so that a terminating signal still ends the process when it would
have without xlabridge.

One daemon thread per process, started with the first recorder and stopped with the last. It
never runs the program's code and never touches what the program computes.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
import warnings

from xlabridge.diagnostics._observe import ending as _ending, recorder as _recorder, watchdog as _watchdog
from xlabridge.errors import DiagnosticsWarning

logger = logging.getLogger(__name__)

TICK = 0.5
"""Seconds between beats: the running sums on disk are never older than this (plus one rewrite)."""


class _Heartbeat(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="xlabridge-heartbeat", daemon=True)
        self.stopping = threading.Event()
        self.watchdog: _watchdog.Watchdog | None = None
        self.failed = False

    def run(self) -> None:
        while not self.stopping.is_set():
            wakeup = _ending.wakeup_fd()
            if wakeup is None:
                self.stopping.wait(TICK)
            else:
                try:
                    ready, _, _ = select.select([wakeup], [], [], TICK)
                except (OSError, ValueError):  # the pipe was closed: observation ended
                    ready = []
                    self.stopping.wait(TICK)
                if ready:
                    _ending.on_wakeup()
            if not self.stopping.is_set():
                self.beat()

    def beat(self) -> None:
        try:
            for recorder in _recorder.recorders():
                recorder.persist_sums()
            if self.watchdog is not None:
                self.watchdog.check(time.monotonic())
        except Exception as error:  # noqa: BLE001 - the observer's thread must never take the program down
            if not self.failed:
                self.failed = True
                logger.debug("heartbeat failed", exc_info=True)
                warnings.warn(f"xlabridge diagnostics: the observer's thread failed ({type(error).__name__}: "
                              f"{error}); running sums and stall reports may lag", DiagnosticsWarning, stacklevel=1)


_THREAD: _Heartbeat | None = None


def start(*, stall_after: float | None = None) -> None:
    """Run the heartbeat (if it does not run yet); with ``stall_after``, also the stall watchdog."""
    global _THREAD
    if _THREAD is None or not _THREAD.is_alive():
        _THREAD = _Heartbeat()
        _THREAD.start()
    if stall_after is not None and (_THREAD.watchdog is None or stall_after < _THREAD.watchdog.after):
        _THREAD.watchdog = _watchdog.Watchdog(stall_after)


def settle() -> None:
    """Close a stall that progress has ended (observation ends: the heartbeat may not have seen it)."""
    if _THREAD is not None and _THREAD.watchdog is not None:
        _THREAD.watchdog.settle()


def stop() -> None:
    """Stop the heartbeat (the last recorder stopped)."""
    global _THREAD
    thread, _THREAD = _THREAD, None
    if thread is not None and thread is not threading.current_thread():
        thread.stopping.set()
        thread.join(timeout=2 * TICK + 1)


def _forget_in_child() -> None:
    global _THREAD
    _THREAD = None  # a child made by fork has no copy of the thread


os.register_at_fork(after_in_child=_forget_in_child)
