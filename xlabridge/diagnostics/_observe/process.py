"""Observing a whole process, for ``xlabridge report``: started at interpreter start-up, its events
written to its log as they come. The observation ends at exit, normally or through an uncaught
exception (named in ``process_end``), or when SIGTERM or SIGINT ends the process (``ending``); a
process killed otherwise (SIGKILL, the kernel's OOM killer, ``os._exit``, a crash in native code)
leaves its log as it was at its death, without a ``process_end``; a parent that waits for it
writes how it ended there (``children``)."""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path

from xlabridge import _env
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe import (
    children as _children,
    ending as _ending,
    pod as _pod,
    recorder as _recorder,
    session as _session,
)
from xlabridge.diagnostics._observe.probes import Installation


def log_path(directory: str | os.PathLike[str], pid: int) -> Path:
    """Where process ``pid`` writes its events: ``events-<pid>.jsonl`` in ``directory``."""
    return Path(directory) / f"events-{pid}.jsonl"


def _trace_writers() -> tuple | None:
    """What writing this process's rows into torch's trace needs, imported while the process starts,
    where ``TORCH_TRACE`` is set (``None`` elsewhere: torch keeps a handler on its trace logger even
    without a trace directory). Not at exit: a module imported there may define a dataclass, whose
    methods ``exec`` makes, and CPython forgets at each ``exec`` that the program ended in an uncaught
    KeyboardInterrupt, which makes its exit status 1 instead of death by SIGINT (130 in a shell)."""
    if not _env.get(_env.TORCH_TRACE):
        return None
    from xlabridge._upstream import torch as upstream_torch
    from xlabridge.diagnostics import _trace_artifacts
    from xlabridge.diagnostics._build.report import build_report

    return upstream_torch, _trace_artifacts, build_report


def _write_trace_rows(recorder: _recorder.Recorder, writers: tuple | None) -> None:
    """This process's HLO-lowering rows into torch's trace, where ``TORCH_TRACE`` is set (the command
    appends the rest after the run: ``_trace_artifacts``)."""
    if writers is None:
        return
    upstream_torch, trace_artifacts, build_report = writers
    if "torch" not in sys.modules or not upstream_torch.structured_trace_on():
        return
    trace_artifacts.write(build_report(recorder.events), (trace_artifacts.HLO_LOWERING,))


def observe_until_exit(directory: str, *, capture_hlo: bool = False, pod: bool = False,
                       stall_after: float | None = None, run_id: str = "") -> None:
    """Observe this process from now on, its event log in ``directory``.

    ``pod``: also capture its XLA graphs, lazily traced ones included, and their collectives
    (``_pod``; torch_xla must not be imported yet). ``stall_after``: report a stall of that many
    seconds without progress. ``run_id``: the run this process belongs to (``xlabridge report``'s).
    """
    recorder = _recorder.Recorder(log=log_path(directory, os.getpid()), capture_hlo=capture_hlo)
    writers = _recorder.safely("diagnostics", "preparing to write into torch's trace", _trace_writers)
    refused = _pod.unsupported() if pod else None
    capture_dir = _pod.directory(directory, os.getpid()) if pod and refused is None else None
    if capture_dir is not None:
        _pod.start(capture_dir)
    _session.start(recorder, stall_after=stall_after, run_id=run_id)
    if refused is not None:
        _pod.unavailable(recorder, refused)
    ended: list[bool] = []

    def die(signal: str, frames: list[ev.Frame]) -> None:
        if not ended:
            ended.append(True)
            _session.end_abruptly(recorder, signal, frames)

    def finish() -> None:
        if ended:
            return
        ended.append(True)
        # the observed time ends here: reading the capture is the diagnostics' own work
        stamp = _recorder.stamp()
        # a signal the program's own handler ended the process with, not yet seen by the heartbeat
        _recorder.safely("signals", "reading the signals that arrived", _ending.on_wakeup)
        exception, frames = _ending.exit_exception()
        if capture_dir is not None:
            _recorder.safely(_pod.INFO.name, "reading torch_xla's debug file and XLA's dump", _pod.emit,
                             recorder, capture_dir)
        elif refused is None:
            _recorder.safely(_pod.INFO.name, "checking for SPMD", _pod.hint, recorder)
        _session.stop(recorder, ended=stamp, ending=ev.Ending.EXIT, exception=exception, frames=frames)
        _recorder.safely("signals", "handing the signals back", _ending.uninstall)
        # the observer's own work since the observation ended: not the process's exit (the time split)
        recorder.add(ev.ExitWork(**_recorder.stamp(), start=stamp["t"], what=ev.ExitWork.OBSERVER))
        _recorder.safely("diagnostics", "closing the event log", recorder.close)
        _recorder.safely("diagnostics", "writing xlabridge's rows into torch's trace", _write_trace_rows, recorder,
                         writers)
        _recorder.safely("signals", "keeping the exit status of an interrupted program", _ending.keep_interrupted_exit)

    _recorder.safely("signals", "listening for SIGTERM and SIGINT", _ending.install, die)
    # kept to the end: a launcher waits for its ranks in its own exit handlers, which run before this one's
    _recorder.safely("python.children", "watching for the exits of child processes", _children.install,
                     Installation(), directory)
    atexit.register(finish)
