"""``explain``, ``diagnose`` and the backend's reporting functions: the diagnostics from Python."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import tempfile
import time
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
    *, log: str | os.PathLike[str] | None = None, capture_hlo: bool = False, tpu: str | None = None,
    stall_after: float | None = None,
) -> Iterator[Report]:
    """Collect a report over the block: every graph Dynamo compiles inside it, whatever the
    backend, and for XLA graphs how torch_xla's bridge split them and what each call costs.

    The yielded report is filled in when the block exits. ``log``: also write the block's
    events there as JSON lines, as they come (``build_report(events.read_log(log).events)``
    rebuilds the report, also of a process that died inside the block); ``capture_hlo``: save
    each XLA graph's HLO module proto beside ``log``. ``stall_after`` (seconds): when no step
    makes progress for that long (no compiled graph's call, sync, Dynamo compilation or TorchTPU
    call ends), record where each thread is and what it is doing; the report shows each stall as
    a finding at the user's line.
    ``tpu`` (a topology such as ``"v5e:2x2"``): when the block exits, compile each distinct
    XLA graph for that TPU with libtpu on this machine (nothing runs on a TPU) and add the TPU
    view to the report: kernels, HBM per device and whether it fits, compile seconds, the cost
    model's figures. Graphs compiled before the block (at their first call) are not observed:
    enter the block before the first call of the compiled model.
    """
    if not isinstance(capture_hlo, bool):
        raise TypeError(f"diagnose: 'capture_hlo' must be a bool, got {type(capture_hlo).__name__}")
    stall_after = check_stall_after(stall_after, argument="diagnose: 'stall_after'")
    scratch = None
    if tpu is not None:
        tpu = _tpu_pass.check_target(tpu)
        capture_hlo = True
        if log is None:
            scratch = tempfile.TemporaryDirectory(prefix="xlabridge-tpu-view-")
    recorder = _recorder.Recorder(log=log, capture_hlo=capture_hlo, hlo_dir=Path(scratch.name) / "hlo" if scratch else None)
    report = Report()
    _session.start(recorder, stall_after=stall_after)
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
                for event in compiled or []:
                    recorder.add(event)
        finally:
            if scratch is not None:
                scratch.cleanup()
        _recorder.safely("diagnostics", "closing the event log", recorder.close)
        built = _recorder.safely("diagnostics", "building the report", build_report, recorder.events)
        if built is not None:
            _recorder.safely("diagnostics", "writing xlabridge's rows into torch's trace", _trace_artifacts.write, built)
            for field in dataclasses.fields(Report):
                setattr(report, field.name, getattr(built, field.name))


def check_stall_after(value: Any, *, argument: str) -> float | None:
    """``value`` as stall seconds (``None``: no watchdog); ``ValueError`` naming ``argument`` otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{argument} must be a number of seconds > 0, got {value!r}")
    return float(value)


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


def read_run(directory: str | os.PathLike[str], *, tpu: str | None = None, progress: Callable[[str], None] | None = None,
             run: str | None = None) -> Report:
    """The report of a run: every event log in ``directory`` (one per process, as ``xlabridge
    report --events DIR`` keeps them), each read once and merged, process ids kept apart.

    Also the report so far of a run that goes on, and of processes that died: what each log holds
    up to its end, its running sums, and what a process's ``--pod`` capture recorded. A log is read
    as far as it can be (each line that cannot be, named in the report's warnings). Logs of another
    run in the same directory are left out, named in a warning: ``run`` (a run id) picks the run,
    else the newest one is read.

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
    read: dict[Path, ev.LogContents] = {}
    problems: list[str] = []
    for path in process_logs:
        try:
            read[path] = ev.read_log(path)
        except OSError as error:
            problems.append(f"{path}: not read ({error.strerror or error})")
    chosen, others = _one_run(read, run)
    merged: list[ev.Event] = []
    skipped, unknown = 0, []
    for path in chosen:
        contents = read[path]
        merged += contents.events + _recovered(directory, contents.events)
        skipped += contents.skipped
        unknown += [kind for kind in contents.unknown_types if kind not in unknown]
        problems += contents.warnings
    if tpu is not None:
        if progress is not None:
            progress(f"compiling {len(_tpu_pass.graphs_to_compile(merged))} XLA graph(s) for TPU {tpu} with libtpu "
                     "(after the run, nothing runs on a TPU)")
        compiled = _tpu_pass.run(merged, target=tpu, base=directory)
        ev.write_log(compiled, directory / TPU_LOG)
        merged += compiled
    elif (directory / TPU_LOG).is_file():
        merged += ev.read_log(directory / TPU_LOG).events
    report = build_report(merged, running=_running(merged))
    report.warnings += [note for note in _pod.notes(merged) if note not in report.warnings]
    if not chosen:
        report.warnings.append("no Python process of the command reported: is it a Python program?")
    report.warnings += others + problems
    if skipped:
        report.warnings.append(f"{skipped} events of types this xlabridge does not know were skipped "
                               f"({', '.join(unknown)})")
    return report


def _one_run(logs: dict[Path, ev.LogContents], run: str | None) -> tuple[list[Path], list[str]]:
    """The logs of one run (``run``, else the newest), and a warning naming the others' files.

    A log whose ``process_start`` could not be read cannot say its run: it is read with the others."""
    runs: dict[str, list[Path]] = {}
    started: dict[str, float] = {}
    unknown = []
    for path, contents in logs.items():
        start = next((e for e in contents.events if isinstance(e, ev.ProcessStart)), None)
        if start is None:
            unknown.append(path)
            continue
        runs.setdefault(start.run_id, []).append(path)
        started[start.run_id] = max(started.get(start.run_id, 0.0), start.wall_time)
    if run is None:
        if len(runs) <= 1:
            return sorted(logs), []
        chosen = max(runs, key=lambda key: started[key])
    else:
        chosen = run
    warnings = []
    for other, paths in runs.items():
        if other == chosen:
            continue
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started[other])) if started[other] else "unknown"
        warnings.append(f"{', '.join(p.name for p in sorted(paths))}: another run's logs (run {other or 'unnamed'}, "
                        f"started {when}) in the same directory: left out; read them from a directory of their own")
    return sorted(runs.get(chosen, []) + unknown), warnings


def _recovered(directory: Path, events: list[ev.Event]) -> list[ev.Event]:
    """What the ``--pod`` capture of a process that did not reach its exit recorded (its own exit
    reads it into its log)."""
    start = next((e for e in events if isinstance(e, ev.ProcessStart)), None)
    if start is None or any(isinstance(e, (ev.ProcessEnd, ev.LazyRuns)) for e in events):
        return []
    capture = _pod.directory(directory, start.pid)
    if not capture.is_dir():
        return []
    own = [e for e in events if not isinstance(e, ev.ProcessExit)]  # written by its parent, on the parent's time
    stamp = {"t": max(e.t for e in own), "pid": start.pid, "rank": own[-1].rank, "world": own[-1].world}
    return _recorder.safely(_pod.INFO.name, "reading the capture of a process that did not exit",
                            _pod.recovered_events, capture, stamp) or []


def _running(events: list[ev.Event]) -> set[int]:
    """The processes of ``events`` without a ``process_end`` that still run on this machine."""
    import platform

    ended = {e.pid for e in events if isinstance(e, (ev.ProcessEnd, ev.ProcessExit))}
    here = platform.node()
    return {e.pid for e in events if isinstance(e, ev.ProcessStart) and e.pid not in ended
            and e.environment.get("host") == here and _alive(e.pid, e.wall_time)}


def _alive(pid: int, started: float) -> bool:
    """Whether process ``pid`` runs and is the one that started near ``started`` (wall clock): a
    pid is reused once its process is gone. A zombie (dead, not yet waited for) is not alive."""
    stat = Path(f"/proc/{pid}/stat")
    if not stat.parent.parent.joinpath("stat").is_file():  # no /proc: the pid exists, that is all
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime"))
    except (OSError, IndexError, StopIteration, ValueError):
        return False
    if fields[0] in ("Z", "X"):
        return False
    began = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    return started - 120.0 <= began <= started + 2.0


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
