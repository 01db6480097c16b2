"""Where the probes send their events, and who receives them.

A ``Recorder`` keeps the events of one ``diagnose()`` block (or of one process run under
``xlabridge report``), and with a log writes each to it as it comes (``events.LogWriter``), so
that a process killed at any moment leaves everything it saw. Probes call ``emit``; every active
recorder gets the event. What repeats with every step goes to ``tally`` instead: each recorder
keeps its own running sums (``tally``), which the heartbeat rewrites beside the log while the
process runs and the session appends to it at the end. Probes mark the steps' progress
(``progress``), which the stall watchdog reads. With no recorder active, ``active()`` is false
and the probes do nothing but call the originals.

``safely`` runs a probe's bookkeeping: an exception there becomes one ``DiagnosticsWarning``
naming the probe and a ``probe_status`` event (state ``failed``), and the user's run goes on
as if nothing observed it.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, TypeVar

from xlabridge import _env
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe.tally import Tally
from xlabridge.errors import DiagnosticsWarning

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Recorder:
    """The events of one observation, in memory and, with ``log``, on disk as they come (JSON lines).

    ``capture_hlo`` asks the bridge probe to save each XLA graph's HLO module proto in
    ``hlo_dir`` (default: beside ``log``, ``<log>.hlo/<pid>-g<graph>-<n>.hlo.pb``), for views
    that compile or read them; ``hlo_file`` names in the events are relative to ``base``, the
    directory that holds the log (or ``hlo_dir``).
    """

    def __init__(
        self,
        *,
        log: str | os.PathLike[str] | None = None,
        capture_hlo: bool = False,
        hlo_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.events: list[ev.Event] = []
        self.log = Path(log) if log is not None else None
        if hlo_dir is not None:
            self.hlo_dir: Path | None = Path(hlo_dir)
        elif self.log is not None:
            self.hlo_dir = self.log.with_name(self.log.name + ".hlo")
        else:
            self.hlo_dir = None
        if capture_hlo and self.hlo_dir is None:
            raise ValueError("diagnose: capture_hlo=True needs log=PATH (the HLO files are written beside the log)")
        self.capture_hlo = capture_hlo
        self.warned: set[str] = set()
        self.tallies: dict[Hashable, Tally] = {}
        self.changes = 0
        """Additions to the tallies so far (the heartbeat rewrites the sums when it moved)."""
        self.persisted = 0
        self._writer: ev.LogWriter | None = None
        if self.log is not None:
            try:
                self._writer = ev.LogWriter(self.log)
            except OSError as error:
                self._stream_failed(error)

    @property
    def base(self) -> Path | None:
        """The directory ``hlo_file`` names are relative to."""
        return self.hlo_dir.parent if self.hlo_dir is not None else None

    def add(self, event: ev.Event) -> None:
        self.events.append(event)
        if self._writer is not None:
            try:
                self._writer.write(event)
            except OSError as error:  # a full disk must not stop the user's run
                self._stream_failed(error)
            except (TypeError, ValueError) as error:  # a value JSON cannot hold: that event only is not written
                warn("diagnostics", f"writing a {event.type.value} event to the log", error)

    def _stream_failed(self, error: BaseException) -> None:
        """Writing as events come failed: the log is written whole at the end instead (what a
        process killed before then saw is lost), said once."""
        self._writer = None
        warnings.warn(f"xlabridge diagnostics: cannot write the event log {self.log} as the run goes "
                      f"({type(error).__name__}: {error}); it is written when observation ends",
                      DiagnosticsWarning, stacklevel=3)

    def tally_events(self) -> list[ev.Event]:
        """The cumulative events of the running sums, as of now."""
        now = stamp()
        return [tally.event(now) for tally in list(self.tallies.values())]

    def persist_sums(self) -> None:
        """Rewrite the sums beside the log if they changed since the last time (the heartbeat's work)."""
        changes = self.changes
        if self._writer is None or changes == self.persisted:
            return
        self.persisted = changes
        try:
            self._writer.rewrite_sums(self.tally_events())
        except OSError as error:
            self._stream_failed(error)

    def hlo_path(self, name: str) -> tuple[Path, str]:
        """Where to write the HLO file ``name``, and its name relative to ``base``."""
        assert self.hlo_dir is not None
        self.hlo_dir.mkdir(parents=True, exist_ok=True)
        return self.hlo_dir / name, f"{self.hlo_dir.name}/{name}"

    def close(self) -> Path | None:
        """End the log (when one was given): the sums beside it go, as they are in it now; a log
        that could not be written as events came is written whole."""
        if self.log is None:
            return None
        if self._writer is not None:
            try:
                self._writer.close()
                return self.log
            except OSError as error:
                self._stream_failed(error)
        return ev.write_log(self.events, self.log)

    def forget_log(self) -> None:
        """In a child made by ``fork``: the log is the parent's, this copy writes nothing to it."""
        if self._writer is not None:
            self._writer.forget()
            self._writer = None


_ACTIVE: list[Recorder] = []


def active() -> bool:
    """Whether any recorder is receiving events."""
    return bool(_ACTIVE)


def recorders() -> list[Recorder]:
    """The active recorders, oldest first."""
    return list(_ACTIVE)


def attach(recorder: Recorder) -> None:
    _ACTIVE.append(recorder)


def detach(recorder: Recorder) -> None:
    if recorder in _ACTIVE:
        _ACTIVE.remove(recorder)


def _rank_and_world() -> tuple[int | None, int | None]:
    """From ``torch.distributed`` once initialized, else from the launcher's ``RANK``/``WORLD_SIZE``."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    rank, world = _env.get(_env.RANK), _env.get(_env.WORLD_SIZE)
    return (int(rank) if rank and rank.isdigit() else None, int(world) if world and world.isdigit() else None)


def stamp(t: float | None = None) -> dict[str, Any]:
    """The fields every event carries: ``t`` (now, unless given), pid, rank and world."""
    rank, world = _rank_and_world()
    return {"t": time.monotonic() if t is None else t, "pid": os.getpid(), "rank": rank, "world": world}


def emit(event: ev.Event) -> None:
    """Hand ``event`` to every active recorder."""
    for recorder in _ACTIVE:
        recorder.add(event)


def tally(key: Hashable, make: Callable[[], Tally], *values: Any) -> None:
    """Add ``values`` to the running sum ``key`` of every active recorder (``make()`` starts one)."""
    for recorder in _ACTIVE:
        sums = recorder.tallies.get(key)
        if sums is None:
            sums = recorder.tallies[key] = make()
        sums.add(*values)  # type: ignore[attr-defined]
        recorder.changes += 1


_last_progress = time.monotonic()


def progress(t: float) -> None:
    """A step made progress at ``t`` (a compiled graph's call, a sync, a compilation ended)."""
    global _last_progress
    _last_progress = t


def last_progress() -> float:
    """When a step last made progress (when this module was loaded, before the first)."""
    return _last_progress


def _forget_logs_in_child() -> None:
    for recorder in _ACTIVE:
        recorder.forget_log()


os.register_at_fork(after_in_child=_forget_logs_in_child)


def warn(probe: str, what: str, error: BaseException | str) -> None:
    """Report, once per message, that ``probe`` failed at ``what``; the run goes on."""
    detail = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    message = (
        f"xlabridge diagnostics: probe {probe!r} failed while {what} ({detail}); "
        "the model runs unchanged, but the report lacks what this probe sees"
    )
    logger.debug("%s", message, exc_info=not isinstance(error, str))
    fresh = [r for r in _ACTIVE if message not in r.warned]
    for recorder in fresh:
        recorder.warned.add(message)
        recorder.add(ev.ProbeStatus(**stamp(), probe=probe, state=ev.ProbeState.FAILED, reason=message))
    if fresh:
        warnings.warn(message, DiagnosticsWarning, stacklevel=3)


def safely(probe: str, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
    """``fn(*args, **kwargs)``; on an exception, ``warn`` and return ``None``."""
    try:
        return fn(*args, **kwargs)
    except Exception as error:  # a bug or an upstream change in the bookkeeping must not stop the user's run
        warn(probe, what, error)
        return None
