"""``explain``, ``diagnose`` and the backend's reporting functions: the diagnostics from Python."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from xlabridge._upstream import torch as upstream_torch
from xlabridge.diagnostics._observe import (
    pod as _pod, recorder as _recorder, session as _session, torch_trace, tpu_pass as _tpu_pass,
)
from xlabridge.diagnostics import _trace_artifacts, events as ev
from xlabridge.diagnostics._build.report import build_report
from xlabridge.diagnostics.report import Report


@contextlib.contextmanager
def diagnose(
    *, log: str | os.PathLike[str] | None = None, capture_hlo: bool = False, tpu: str | None = None
) -> Iterator[Report]:
    """Collect a report over the block: every graph Dynamo compiles inside it, whatever the
    backend, and for XLA graphs how torch_xla's bridge split them and what each call costs.

    The yielded report is filled in when the block exits. ``log``: also write the block's
    events there as JSON lines (``build_report(events.read_log(log).events)`` rebuilds
    the report); ``capture_hlo``: save each XLA graph's HLO module proto beside ``log``.
    ``tpu`` (a topology such as ``"v5e:2x2"``): when the block exits, compile each distinct
    XLA graph for that TPU with libtpu on this machine (nothing runs on a TPU) and add the TPU
    view to the report: kernels, HBM per device and whether it fits, compile seconds, the cost
    model's figures. Graphs compiled before the block (at their first call) are not observed:
    enter the block before the first call of the compiled model.
    """
    if not isinstance(capture_hlo, bool):
        raise TypeError(f"diagnose: 'capture_hlo' must be a bool, got {type(capture_hlo).__name__}")
    scratch = None
    if tpu is not None:
        tpu = _tpu_pass.check_target(tpu)
        capture_hlo = True
        if log is None:
            scratch = tempfile.TemporaryDirectory(prefix="xlabridge-tpu-view-")
    recorder = _recorder.Recorder(log=log, capture_hlo=capture_hlo, hlo_dir=Path(scratch.name) / "hlo" if scratch else None)
    report = Report()
    _session.start(recorder)
    try:
        yield report
    finally:
        _session.stop(recorder)
        try:
            if tpu is not None:
                compiled = _recorder.safely(
                    "tpu", "compiling the run's graphs for TPU", _tpu_pass.run, list(recorder.events),
                    target=tpu, base=recorder.base, save_tpu_hlo=scratch is None,
                )
                recorder.events += compiled or []
        finally:
            if scratch is not None:
                scratch.cleanup()
        _recorder.safely("diagnostics", "writing the event log", recorder.write)
        built = _recorder.safely("diagnostics", "building the report", build_report, recorder.events)
        if built is not None:
            _recorder.safely("diagnostics", "writing xlabridge's rows into torch's trace", _trace_artifacts.write, built)
            for field in dataclasses.fields(Report):
                setattr(report, field.name, getattr(built, field.name))


def explain(fn: Callable[..., Any], *, backend: str = "xlabridge", tpu: str | None = None) -> Callable[..., Report]:
    """``explain(fn)(*args, **kwargs)`` compiles ``fn`` afresh, runs it once, returns the report.

    Like ``torch._dynamo.explain``, it resets Dynamo's caches first so that every graph of
    ``fn`` is compiled, and so observed, during the call. ``tpu="v5e:2x2"`` adds the TPU view
    (see ``diagnose``).
    """
    if not callable(fn):
        raise TypeError(f"explain: 'fn' must be callable, got {type(fn).__name__}")
    if not isinstance(backend, str):
        raise TypeError(f"explain: 'backend' must be a backend name such as 'xlabridge', got {backend!r}")
    if tpu is not None:
        _tpu_pass.check_target(tpu)

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Report:
        upstream_torch.dynamo_reset()
        with diagnose(tpu=tpu) as report:
            torch.compile(fn, backend=backend)(*args, **kwargs)
        return report

    return run


TPU_LOG = "events-tpu.jsonl"
"""The TPU view's events, beside a run's process logs (``read_run`` with ``tpu`` writes it)."""


def read_run(directory: str | os.PathLike[str], *, tpu: str | None = None, progress: Callable[[str], None] | None = None) -> Report:
    """The report of a run: every event log in ``directory`` (one per process, as ``xlabridge
    report --events DIR`` keeps them), each read once and merged, process ids kept apart.

    ``tpu`` (a topology such as ``"v5e:2x2"``): first compile the run's graphs for that TPU with
    libtpu on this machine and write their events beside the logs (``TPU_LOG``, replacing an
    earlier one, so that a run can be read again for another topology). ``progress`` receives a
    line saying what is being compiled. A directory whose processes left no log gives a report
    that says so.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(f"read_run: 'directory' must be a directory of event logs, got {str(directory)!r}")
    if tpu is not None:
        tpu = _tpu_pass.check_target(tpu)
    logs = sorted(directory.glob("events-*.jsonl"))
    process_logs = [path for path in logs if path.name != TPU_LOG]
    merged: list[ev.Event] = []
    skipped = 0
    for path in process_logs if tpu is not None else logs:
        contents = ev.read_log(path)
        merged += contents.events
        skipped += contents.skipped
    if tpu is not None:
        if progress is not None:
            progress(f"compiling {len(_tpu_pass.graphs_to_compile(merged))} XLA graph(s) for TPU {tpu} with libtpu "
                     "(after the run, nothing runs on a TPU)")
        compiled = _tpu_pass.run(merged, target=tpu, base=directory)
        ev.write_log(compiled, directory / TPU_LOG)
        merged += compiled
    report = build_report(merged)
    report.warnings += [note for note in _pod.notes(merged) if note not in report.warnings]
    if not process_logs:
        report.warnings.append("no Python process of the command reported: is it a Python program?")
    if skipped:
        report.warnings.append(f"{skipped} events of types this xlabridge does not know were skipped")
    return report


def read_trace(
    directory: str | os.PathLike[str], *, tpu: str | None = None, progress: Callable[[str], None] | None = None
) -> Report:
    """The report of a run that torch's structured trace recorded (``TORCH_TRACE=DIR python
    train.py``, xlabridge not needed in the run): every log in ``directory`` (one per process, as
    torch writes them, several ranks merged, process ids kept apart), read as the probes would have
    seen it: Dynamo's graphs, its graph breaks as torch recorded them (type, code, hints, user line),
    recompiles with the guard that failed, compile times, and for TorchTPU its partitions. What a
    trace cannot hold (execution times, HLO lowering breaks of torch_xla) the report's warnings say.

    ``tpu`` (a topology such as ``"v5e:2x2"``): compile the StableHLO TorchTPU wrote into the trace
    (``torchtpu_stablehlo_graph``, on a TPU) for that TPU with libtpu on this machine.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(f"read_trace: 'directory' must be a TORCH_TRACE directory, got {str(directory)!r}")
    if tpu is not None:
        tpu = _tpu_pass.check_target(tpu)
    with tempfile.TemporaryDirectory(prefix="xlabridge-trace-") as scratch:
        events = torch_trace.read(directory, hlo_dir=Path(scratch) / "hlo" if tpu is not None else None)
        if tpu is not None:
            if progress is not None:
                progress(f"compiling {len(_tpu_pass.graphs_to_compile(events))} TorchTPU program(s) for TPU {tpu} "
                         "with libtpu (compiled, not run)")
            events += _tpu_pass.run(events, target=tpu, base=Path(scratch), save_tpu_hlo=False)
        report = build_report(events)
    if not torch_trace.logs(directory):
        report.warnings.append(f"no torch trace log ({torch_trace.LOG_PATTERN}) in {directory}: was TORCH_TRACE "
                               "set to it before torch was imported?")
    return report
