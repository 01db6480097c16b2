"""Starting and ending an observation: the events that frame it, and the probes' lifetime.

``start`` writes ``process_start`` (environment, the directories the user-code rule needs),
installs the probes for the first active recorder, records their status and starts the
heartbeat (running sums beside the log, the stall watchdog); ``stop`` writes the recorder's
running sums, records what torch_xla's metrics saw outside the observed calls, runs the in-run
cross-checks and the self-test's verdict, writes ``process_end`` and removes the probes after
the last recorder. ``end_abruptly`` is the short end of a process about to die of a signal: its
sums and its ``process_end``, nothing that could wait.
"""

from __future__ import annotations

from xlabridge.diagnostics._observe import (
    environment as _environment,
    fx_programs,
    heartbeat as _heartbeat,
    recorder as _recorder,
)
from xlabridge.diagnostics import _frames
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe.probes import (
    compiled_calls,
    dynamo_compiles,
    dynamo_graphs,
    registry,
    selftest,
    torchtpu,
    xla_eager,
    xla_metrics,
)

_baselines: dict[int, tuple[float, xla_metrics.Snapshot, xla_eager.Baseline]] = {}
_selftest: selftest.Run | None = None


def start(recorder: _recorder.Recorder, *, selftest_run: bool = True, stall_after: float | None = None,
          run_id: str = "") -> None:
    """Begin observing into ``recorder``; with ``stall_after``, report stalls of that many seconds."""
    global _selftest
    stamp = _recorder.stamp()
    recorder.add(ev.ProcessStart(
        **stamp, wall_time=_wall_time(), environment=_recorder.safely(
            "environment", "reading the environment", _environment.environment) or {},
        framework_paths=_frames.framework_paths(), main_file=_frames.program_file(), run_id=run_id,
        parent_pid=_parent_pid(), argv_kind=_recorder.safely("environment", "reading how Python was started",
                                                             argv_kind) or "",
    ))
    _recorder.progress(stamp["t"])
    _baselines[id(recorder)] = (stamp["t"], xla_metrics.Snapshot.take(), xla_eager.Baseline())
    first = not _recorder.active()
    _recorder.attach(recorder)
    if first:
        registry.install()
        if selftest_run and _selftest is None:
            _selftest = _recorder.safely("selftest", "starting the probe self-test", selftest.Run)
    registry.emit_statuses(recorder)
    if recorder.log is not None or stall_after is not None:
        _recorder.safely("heartbeat", "starting the observer's thread", _heartbeat.start, stall_after=stall_after)


def stop(recorder: _recorder.Recorder, *, ended: dict | None = None, ending: ev.Ending = ev.Ending.BLOCK,
         exception: str = "", frames: list[ev.Frame] | None = None) -> None:
    """End observing into ``recorder``; its events are then complete. ``ended``: the stamp of the
    end of the observed time, when the caller did work of its own since (default: now); ``ending``,
    ``exception`` and ``frames``: why it ended (``process_end``)."""
    ended = ended or _recorder.stamp()
    try:
        _recorder.safely("heartbeat", "closing a stall", _heartbeat.settle)
        _recorder.safely("diagnostics", "writing the running sums", _add_sums, recorder)
        _recorder.safely(compiled_calls.INFO.name, "summing calls", compiled_calls.flush, recorder)
        _recorder.safely(dynamo_compiles.INFO.name, "reading compilation metrics", dynamo_compiles.drain,
                         ended=True)
        started, baseline, eager = _baselines.pop(
            id(recorder), (recorder.events[0].t, xla_metrics.Snapshot(), xla_eager.Baseline()))
        _recorder.safely("xla.metrics", "reading totals", _totals, recorder, baseline)
        eager_ops = _recorder.safely(xla_eager.INFO.name, "reading eager ops", xla_eager.event, eager)
        if eager_ops is not None:
            recorder.add(eager_ops)
        _recorder.safely("diagnostics", "cross-checking the probes", registry.cross_check, recorder.events)
        recorder.add(ev.ProcessEnd(
            **ended, start=started,
            environment=_recorder.safely("environment", "reading the environment", _environment.environment) or {},
            main_file=_frames.program_file(), ending=ending, exception=exception, frames=list(frames or []),
        ))
        _apply_selftest()  # may wait for the self-test's child process: after the end is stamped
    finally:
        _recorder.detach(recorder)
        if not _recorder.active():
            registry.restore()
            _recorder.safely("heartbeat", "stopping the observer's thread", _heartbeat.stop)
    # after the observed time, and unobserved: lowering imports JAX, which is not the program's work
    _recorder.safely(torchtpu.INFO.name, "writing TorchTPU's graphs", torchtpu.write_graphs, recorder,
                     _lower_torchtpu if recorder.capture_hlo else None)
    kept = dynamo_graphs.kept_for(recorder)
    _recorder.safely(dynamo_graphs.INFO.name, "lowering Dynamo's graphs for TPU", fx_programs.write, recorder, kept)


def end_abruptly(recorder: _recorder.Recorder, signal: str, frames: list[ev.Frame]) -> None:
    """The end of a process about to die of ``signal``: its running sums and ``process_end`` written,
    the log closed; nothing that reads torch_xla or waits (the main thread may be stuck in C code)."""
    started = _baselines.get(id(recorder), (recorder.events[0].t if recorder.events else 0.0,))[0]
    _add_sums(recorder)
    recorder.add(ev.ProcessEnd(**_recorder.stamp(), start=started, environment=dict(_start_environment(recorder)),
                               main_file=_frames.program_file(), ending=ev.Ending.SIGNAL, signal=signal,
                               frames=frames))
    recorder.close()


def _start_environment(recorder: _recorder.Recorder) -> dict:
    first = recorder.events[0] if recorder.events else None
    return first.environment if isinstance(first, ev.ProcessStart) else {}


def _add_sums(recorder: _recorder.Recorder) -> None:
    """The recorder's running sums, as they are at its end, into its events."""
    for event in recorder.tally_events():
        recorder.add(event)


def _lower_torchtpu(partition: torchtpu.Partition) -> str:
    """A TorchTPU partition as StableHLO for the TPU view (TorchTPU's own lowering needs a chip)."""
    from xlabridge.torchtpu._lower import lower_to_stablehlo

    return lower_to_stablehlo(partition)


def _totals(recorder: _recorder.Recorder, baseline: xla_metrics.Snapshot) -> None:
    """Transfers over the whole observation, and the XLA compilations no probe attributed."""
    if not xla_metrics.loaded():
        return
    total = xla_metrics.Snapshot.take().since(baseline)
    stamp = _recorder.stamp()
    recorder.add(ev.Transfer(**stamp, to_device=total.to_device, from_device=total.from_device,
                             bytes_to_device=total.bytes_to_device, bytes_from_device=total.bytes_from_device,
                             seconds=total.transfer_seconds))
    attributed = [e for e in recorder.events if isinstance(e, ev.XlaCompile)]
    count = total.compiles - sum(e.count for e in attributed if e.phase != ev.XlaPhase.DYNAMO)
    seconds = total.compile_seconds - sum(e.seconds for e in attributed)
    if count > 0 or seconds > 1e-6:
        recorder.add(ev.XlaCompile(**stamp, graph=None, phase=ev.XlaPhase.OUTSIDE,
                                   count=max(count, 0), seconds=max(seconds, 0.0)))


def _apply_selftest() -> None:
    if _selftest is None:
        return
    result = _selftest.wait()
    if result is None:
        if _selftest.error:
            _recorder.warn("selftest", "checking that every probe fires", _selftest.error)
        return
    infos = {info.name: info for info in registry.PROBES}
    for probe, missing in result.items():
        if missing and probe in infos:
            registry.silent(infos[probe], f"the probe self-test saw {missing} (cached in {_selftest.path})")


def _parent_pid() -> int | None:
    import os

    return os.getppid() if hasattr(os, "getppid") else None


def argv_kind(argv: list[str] | None = None) -> str:
    """How the interpreter was started, from its command line (``sys.orig_argv``): ``script``,
    ``module``, ``command``, ``multiprocessing`` (its spawn or forkserver children run a ``-c`` command
    and carry ``--multiprocessing-fork``), ``stdin`` or empty where unknown."""
    import sys

    argv = list(getattr(sys, "orig_argv", []) if argv is None else argv)
    if not argv:
        return ""
    if "--multiprocessing-fork" in argv or any("from multiprocessing" in arg for arg in argv):
        return "multiprocessing"
    options_with_value = {"-W", "-X", "-Q"}
    rest = iter(argv[1:])
    for arg in rest:
        if arg == "-c" or (arg.startswith("-c") and not arg.startswith("--")):
            return "command"
        if arg == "-m" or (arg.startswith("-m") and not arg.startswith("--")):
            return "module"
        if arg in options_with_value:
            next(rest, None)
            continue
        if arg == "-":
            return "stdin"
        if arg.startswith("-"):
            continue
        return "script"
    return "stdin"


def _wall_time() -> float:
    import time

    return time.time()
