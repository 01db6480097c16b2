"""How an observed process ends: the signals it receives, and the exception it exits with.

Under ``xlabridge report`` each process hands SIGTERM (what a preempted TPU VM or an evicted pod
gets) and SIGINT to ``_on_signal`` first, then on to whatever the process had before: the default
action (for SIGTERM: to die of it, after the observation is ended and its log closed: ``terminate``),
Python's ``KeyboardInterrupt``, or the handler found. A signal the process ignores stays ignored.
A handler the program installs later replaces this one, as it would replace the default: the
signal then goes to the program alone, and the heartbeat still notes that it arrived.

Python runs a signal's handler in the main thread between two bytecodes, so a main thread busy in
C code (an XLA compile, a collective waiting for a dead rank) would run it only when that code
returns, where the default action would have ended the process at once. So the handlers are also
reached through Python's wakeup file descriptor, which the heartbeat thread waits on: it ends the
observation and lets the default action take the process then (``terminate``), the exit status
being the signal's as without xlabridge.

The exception a process exits with is the one the interpreter reported last (``sys.last_value``,
set before ``atexit`` handlers run): no hook is installed for it.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from types import FrameType
from typing import Any

from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe import recorder as _recorder, watchdog as _watchdog

logger = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""The signals handed on: the ones that end a training job from outside (preemption, eviction, Ctrl-C)."""

_PRIOR: dict[int, Any] = {}
"""Each signal handled here, and what the process had for it before."""
_ON_TERMINATE: list[Callable[[str, list[ev.Frame]], None]] = []
_WAKEUP: list[int] = []
"""The read end of the wakeup pipe, while installed."""
_TERMINATING = threading.Lock()


def describe(handler: Any) -> str:
    """A signal disposition in words: ``default``, ``ignored``, ``KeyboardInterrupt`` or ``file:line (function)``."""
    if handler == signal.SIG_DFL:
        return "default"
    if handler == signal.SIG_IGN:
        return "ignored"
    if handler is signal.default_int_handler:
        return "KeyboardInterrupt"
    code = getattr(handler, "__code__", None)
    if code is not None:
        return f"{code.co_filename}:{code.co_firstlineno} ({code.co_name})"
    return getattr(handler, "__qualname__", None) or repr(handler)[:200]


def install(on_terminate: Callable[[str, list[ev.Frame]], None]) -> None:
    """Handle SIGTERM and SIGINT as this module says, for the whole process (main thread only).

    ``on_terminate(signal name, frames)`` ends the observation before a signal's default action ends
    the process; it may run in the heartbeat thread.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    _ON_TERMINATE[:] = [on_terminate]
    for signum in SIGNALS:
        prior = signal.getsignal(signum)
        # ignored, or set from C by an extension: not Python's to hand on
        if prior in (signal.SIG_IGN, None) or prior is _on_signal:
            continue
        _PRIOR[signum] = prior
        signal.signal(signum, _on_signal)
    if _PRIOR and not _WAKEUP:
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        if previous != -1:  # the program's own (asyncio's): keep it, and the handlers run in the main thread only
            signal.set_wakeup_fd(previous)
            os.close(read)
            os.close(write)
        else:
            _WAKEUP[:] = [read, write]


def wakeup_fd() -> int | None:
    """The file descriptor the heartbeat waits on for signals (``None``: none installed)."""
    return _WAKEUP[0] if _WAKEUP else None


def _name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _on_signal(signum: int, frame: FrameType | None) -> Any:
    """The handler: note the signal, then do what the process would have done without xlabridge."""
    prior = _PRIOR.get(signum, signal.SIG_DFL)
    frames = _watchdog.frames_of(frame)
    if prior == signal.SIG_DFL:
        terminate(signum, frames)
        return None
    _recorder.safely("signals", "recording a signal", _note, signum, describe(prior), frames)
    return prior(signum, frame)


def _note(signum: int, handler: str, frames: list[ev.Frame]) -> None:
    _recorder.emit(ev.SignalReceived(**_recorder.stamp(), signal=_name(signum), handler=handler, frames=frames))
    for recorder in _recorder.recorders():
        recorder.persist_sums()


def on_wakeup() -> None:
    """In the heartbeat thread: signals arrived. A terminating one whose handler is still this
    module's ends the process now; one the program handles itself is noted."""
    if not _WAKEUP:
        return
    try:
        data = os.read(_WAKEUP[0], 512)
    except (BlockingIOError, OSError):
        return
    main = threading.main_thread().ident
    for signum in dict.fromkeys(data):
        current = signal.getsignal(signum)
        if current is _on_signal:
            if _PRIOR.get(signum) == signal.SIG_DFL:
                frame = sys._current_frames().get(main)
                terminate(signum, _watchdog.frames_of(frame))
            continue  # handed on in the main thread, which notes it
        if signum in SIGNALS and current not in (None, signal.SIG_IGN, signal.SIG_DFL):
            frame = sys._current_frames().get(main)
            _recorder.safely("signals", "recording a signal", _note, signum, describe(current),
                             _watchdog.frames_of(frame))


def terminate(signum: int, frames: list[ev.Frame]) -> None:
    """End the observation, then let the signal's default action end the process (once, whichever
    thread comes first; the other returns)."""
    if not _TERMINATING.acquire(blocking=False):
        return
    name = _name(signum)
    try:
        _recorder.safely("signals", "recording a signal", _recorder.emit,
                         ev.SignalReceived(**_recorder.stamp(), signal=name, handler="default", frames=frames))
        for end in _ON_TERMINATE:
            _recorder.safely("signals", f"ending the observation at {name}", end, name, frames)
    finally:
        _default_action(signum)


def _default_action(signum: int) -> None:
    """Restore ``signum``'s default action and raise it: the process ends as it would have."""
    try:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signum, signal.SIG_DFL)
        else:
            _set_default_from_any_thread(signum)
    except (OSError, ValueError, AttributeError) as error:
        logger.debug("cannot restore the default action of %s: %s", signum, error)
        _TERMINATING.release()
        return
    os.kill(os.getpid(), signum)


def _set_default_from_any_thread(signum: int) -> None:
    """C's ``signal(signum, SIG_DFL)``: Python's ``signal.signal`` may only run in the main thread,
    which may be blocked in C code for as long as a hung collective lasts. Python's own record of
    the handler is left stale; the process ends next."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
    libc.signal.restype = ctypes.c_void_p
    libc.signal(signum, None)  # SIG_DFL is the null handler


def exit_exception() -> tuple[str, list[ev.Frame]]:
    """The uncaught exception the interpreter is exiting with (``Type: first line`` and its
    traceback's frames), or ``("", [])``. Read in an ``atexit`` handler."""
    error = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if error is None or isinstance(error, SystemExit):
        return "", []
    message = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {message[0]}" if message else type(error).__name__
    frames = [ev.Frame(f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(error.__traceback__)]
    return text[:500], frames


def keep_interrupted_exit() -> None:
    """Keep the death by SIGINT (130 in a shell) of a program that ended in an uncaught
    KeyboardInterrupt, after this process's exit work.

    CPython notes the uncaught KeyboardInterrupt in a flag it checks after the interpreter's
    finalization; on CPython 3.8 to 3.13 every ``exec`` of source text clears it (``run_eval_code_obj``;
    python/cpython#128130, fixed in 3.14), and exit work that defines a dataclass (an import) execs
    its methods. An ``exec`` that itself ends in KeyboardInterrupt sets the flag again. Called last in
    the exit handler, only when the program's exception is a KeyboardInterrupt."""
    error = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if not isinstance(error, KeyboardInterrupt):
        return
    try:
        exec("raise KeyboardInterrupt")  # noqa: S102 - sets CPython's flag again, see above
    except KeyboardInterrupt:
        pass


def _forget_in_child() -> None:
    """A child made by ``fork`` (a DataLoader's worker) is not the observed process: its signals go
    back to what it had, and it must not write into the wakeup pipe it shares with its parent (the
    parent would take the child's SIGTERM for its own)."""
    try:
        for signum, prior in list(_PRIOR.items()):
            if signal.getsignal(signum) is _on_signal:
                signal.signal(signum, prior)
        if _WAKEUP:
            current = signal.set_wakeup_fd(-1)
            if current != _WAKEUP[1]:
                signal.set_wakeup_fd(current)  # the program's own: left as it is
            for fd in _WAKEUP:
                os.close(fd)
    except (OSError, ValueError):
        logger.debug("resetting the signals of a forked child failed", exc_info=True)
    _PRIOR.clear()
    _WAKEUP.clear()
    _ON_TERMINATE.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def uninstall() -> None:
    """Give the signals back to what the process had (observation ended normally)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum, prior in list(_PRIOR.items()):
        if signal.getsignal(signum) is _on_signal:
            signal.signal(signum, prior)
    _PRIOR.clear()
    if _WAKEUP:
        read, write = _WAKEUP
        _WAKEUP.clear()
        if signal.set_wakeup_fd(-1) != write:
            signal.set_wakeup_fd(write)  # not ours any more: leave it (and its pipe) as it is
            return
        os.close(read)
        os.close(write)
