"""Observing a whole process, for ``xlabridge report``: started at interpreter start-up; the
event log is written when the process exits, normally or through an uncaught exception."""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path

from xlabridge.diagnostics._observe import pod as _pod, recorder as _recorder, session as _session


def log_path(directory: str | os.PathLike[str], pid: int) -> Path:
    """Where process ``pid`` writes its events: ``events-<pid>.jsonl`` in ``directory``."""
    return Path(directory) / f"events-{pid}.jsonl"


def _write_trace_rows(recorder: _recorder.Recorder) -> None:
    """This process's HLO-lowering rows into torch's trace, where ``TORCH_TRACE`` is set (the command
    appends the rest after the run: ``_trace_artifacts``)."""
    from xlabridge._upstream import torch as upstream_torch

    if "torch" not in sys.modules or not upstream_torch.structured_trace_on():
        return
    from xlabridge.diagnostics import _trace_artifacts
    from xlabridge.diagnostics._build.report import build_report

    _trace_artifacts.write(build_report(recorder.events), (_trace_artifacts.HLO_LOWERING,))


def observe_until_exit(directory: str, *, capture_hlo: bool = False, pod: bool = False) -> None:
    """Observe this process from now on; at exit write its event log into ``directory``.

    ``pod``: also capture its XLA graphs, lazily traced ones included, and their collectives
    (``_pod``; torch_xla must not be imported yet).
    """
    recorder = _recorder.Recorder(log=log_path(directory, os.getpid()), capture_hlo=capture_hlo)
    refused = _pod.unsupported() if pod else None
    capture_dir = _pod.directory(directory, os.getpid()) if pod and refused is None else None
    if capture_dir is not None:
        _pod.start(capture_dir)
    _session.start(recorder)
    if refused is not None:
        _pod.unavailable(recorder, refused)

    def finish() -> None:
        # the observed time ends here: reading the capture is the diagnostics' own work
        ended = _recorder.stamp()
        if capture_dir is not None:
            _recorder.safely(_pod.INFO.name, "reading torch_xla's debug file and XLA's dump", _pod.emit,
                             recorder, capture_dir)
        elif refused is None:
            _recorder.safely(_pod.INFO.name, "checking for SPMD", _pod.hint, recorder)
        _session.stop(recorder, ended=ended)
        _recorder.safely("diagnostics", "writing the event log", recorder.write)
        _recorder.safely("diagnostics", "writing xlabridge's rows into torch's trace", _write_trace_rows, recorder)

    atexit.register(finish)
