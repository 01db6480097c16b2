"""The exit of each child process an observed process waits for, written into the child's log.

A launcher (torchrun, a script that starts its ranks with ``subprocess`` or with ``multiprocessing``'s
spawn) waits for its children, and the status it then holds is the only record of how a child that
died without a word ended: SIGKILL (what the kernel's OOM killer sends), a crash. Under ``xlabridge
report`` every observed process's ``subprocess.Popen.wait`` and ``poll`` and multiprocessing's
``popen_fork.Popen.poll`` (which its ``wait`` and its spawn and forkserver children use) call the
original, and once a child's return code is known, a ``process_exit`` is appended to that child's log
in the run's directory, if the child wrote one (it is a Python process of the run). Nothing else
changes: the return code is the original's.

Checked on Python 3.10, 3.11 and 3.12: ``Popen.wait(timeout)`` and ``Popen.poll()`` are public;
``multiprocessing.popen_fork.Popen.poll(flag)`` is multiprocessing's own, unchanged since Python 3.4.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe import recorder as _recorder
from xlabridge.diagnostics._observe.probes import Installation

_RECORDED: set[int] = set()


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _record(directory: Path, pid: int, returncode: int | None) -> None:
    if returncode is None or pid in _RECORDED:
        return
    _RECORDED.add(pid)
    log = directory / f"events-{pid}.jsonl"
    if not log.is_file():
        return
    writer = ev.LogWriter(log, fresh=False)
    try:
        writer.write(ev.ProcessExit(t=time.monotonic(), pid=pid, returncode=returncode,
                                    signal=_signal_name(-returncode) if returncode < 0 else "", waited_by=os.getpid()))
    finally:
        writer.close(ended=False)


def _wrapping(directory: Path) -> Any:
    def wrap(original: Any) -> Any:
        def waited(self: Any, *args: Any, **kwargs: Any) -> Any:
            returncode = original(self, *args, **kwargs)
            _recorder.safely("python.children", "recording a child's exit", _record, directory,
                             getattr(self, "pid", -1), getattr(self, "returncode", None))
            return returncode

        waited.__name__ = getattr(original, "__name__", "waited")
        waited.__doc__ = getattr(original, "__doc__", None)
        return waited

    return wrap


def install(installation: Installation, directory: str | os.PathLike[str]) -> None:
    """Record the exits of the children this process waits for into their logs in ``directory``."""
    import subprocess
    from multiprocessing import popen_fork

    wrap = _wrapping(Path(directory))
    installation.replace(subprocess.Popen, "wait", wrap)
    installation.replace(subprocess.Popen, "poll", wrap)
    installation.replace(popen_fork.Popen, "poll", wrap)
