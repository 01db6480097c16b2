"""Lazily traced graphs and collectives of one process, from torch_xla's and XLA's own records.

What torch_xla compiles and executes outside ``torch.compile`` (graphs cut at
``torch_xla.sync()`` or a host read) it tells only its debug file, and the partitioned module of
an SPMD graph XLA writes only to its dump; both read their switches once, when they start. So
under ``xlabridge report`` the start-up hook sets them for each process, in a directory of its
own (``pod-<pid>`` beside the event logs: XLA numbers dumped modules per process and torch_xla
appends to its debug file), before torch_xla is imported (``start``). At exit, ``emit`` reads
that capture (``xlabridge.pod.read_capture``) into events: a ``lazy_graph`` per distinct graph,
``lazy_runs`` (every execution, in order), an ``xla_graph`` per lazily traced graph (its
pre-partition module saved beside the log with ``--capture-hlo``) and ``collectives`` per graph
whose compiled module the dump holds.

It costs where the run does not: source lines (``XLA_HLO_DEBUG``) at tracing, the dump's file
writes at each compilation. Hence opt-in (``xlabridge report --pod``), and automatic where a run
is multi-process (``WORLD_SIZE`` > 1). An SPMD run observed without it is told so (``hint``).

A user's own ``--xla_dump_to`` directory keeps receiving XLA's dump, with every option they gave
(``xlabridge.pod.plan_capture``); where the capture must add or lift something there, it says so
once (``DiagnosticsWarning``) and in the report (the environment's ``xla_capture`` notes, which
``notes`` turns into the report's warnings). The processes of a multi-process run each dump into
a directory of their own inside it (``rank-<RANK>``), as XLA would write them over each other;
other processes found to share it (``emit``) have their collectives left out, with a note.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

from xlabridge import _env
from xlabridge.diagnostics._observe import recorder as _recorder
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe.probes import ProbeInfo, Status, xla_metrics

INFO = ProbeInfo(
    name="xla.capture",
    surface="PT_XLA_DEBUG_LEVEL=2 with PT_XLA_DEBUG_FILE, XLA_FLAGS --xla_dump_to (text and proto), "
    "XLA_HLO_DEBUG=1: set at start-up, read at exit",
    checked="torch_xla 2.9.0",
    patch=False,
    why="torch_xla reports lazily traced graphs (cause, hash, frames) only to its debug file, and XLA "
    "the partitioned module of an SPMD graph only to its dump; both are switched on before they start",
    sees="lazily traced graphs (cause, compiles, executions, the line that cut them), the collectives of "
    "each graph, and differences between processes",
)

_NOTES: list[str] = []
"""What this process's capture changed in what the user configured, or could not read (``summary``)."""
_DUMP: list[Path] = []


SUPPORTED_FROM = (2, 9)
"""torch_xla release the capture is read for. torch_xla 2.8.1's XLA dump names every module
``module_0000.*`` (found running the pod report tests on 2.8.1), so graphs cannot be joined to
the modules XLA compiled for them."""


def unsupported() -> str | None:
    """Why this process's torch_xla cannot be captured, or None (read without importing it)."""
    from importlib import metadata

    try:
        version = metadata.version("torch_xla")
    except metadata.PackageNotFoundError:
        return None  # nothing to capture; the report says torch_xla is absent
    release = tuple(int(part) for part in version.split("+")[0].split(".")[:2] if part.isdigit())
    if release < SUPPORTED_FROM:
        return (f"torch_xla {version}'s XLA dump numbers every module 0000, so its graphs cannot be joined to "
                f"their modules; the capture is read for torch_xla {'.'.join(map(str, SUPPORTED_FROM))} and later")
    return None


def unavailable(recorder: _recorder.Recorder, reason: str) -> None:
    """Record that the capture was asked for and cannot run here."""
    recorder.add(_status(ev.ProbeState.UNAVAILABLE, reason))


def wanted() -> bool:
    """Whether this process should be captured: ``--pod``, or a multi-process run."""
    if _env.get(_env.POD) == "1":
        return True
    world = _env.get(_env.WORLD_SIZE) or ""
    return world.isdigit() and int(world) > 1


def directory(report_dir: str | os.PathLike[str], pid: int) -> Path:
    """Where process ``pid`` keeps its capture: ``pod-<pid>`` in the report's directory."""
    return Path(report_dir) / f"pod-{pid}"


def _shared_dump_name() -> str | None:
    """This process's directory inside a dump directory that the processes of the run share."""
    world = _env.get(_env.WORLD_SIZE) or ""
    if not (world.isdigit() and int(world) > 1):
        return None
    rank = _env.get(_env.RANK) or ""
    return f"rank-{rank}" if rank.isdigit() else f"pid-{os.getpid()}"


def start(capture_dir: Path) -> None:
    """Switch the capture on for this process; call before torch_xla is imported.

    A parent process's capture (inherited through the environment) gives way to this process's;
    the user's own dump stays theirs (``xlabridge.pod.plan_capture``).
    """
    from xlabridge.diagnostics._observe import environment as _environment
    from xlabridge.errors import DiagnosticsWarning
    from xlabridge.pod import plan_capture

    plan = plan_capture(capture_dir, subdirectory=_shared_dump_name())
    for name, value in plan.environment.items():
        _env.put(name, value)
    _DUMP[:] = [plan.dump]
    _NOTES[:] = plan.notes
    _environment.add_part("xla_capture", summary)
    if plan.notes:
        warnings.warn("xlabridge report --pod: " + "; ".join(plan.notes), DiagnosticsWarning, stacklevel=2)


def summary() -> dict | None:
    """Where this process's capture has XLA dump, the ``XLA_FLAGS`` XLA reads, and the notes (the
    report's environment)."""
    if not _DUMP:
        return None
    return {"dump": str(_DUMP[0]), "xla_flags": _env.get(_env.XLA_FLAGS) or "", "notes": list(_NOTES)}


def notes(events: Iterable[ev.Event]) -> list[str]:
    """The notes of each process's capture (``summary``) in ``events``, as report warnings."""
    latest: dict[int, list[str]] = {}
    for event in events:
        if isinstance(event, (ev.ProcessStart, ev.ProcessEnd)) and event.environment.get("xla_capture"):
            latest[event.pid] = event.environment["xla_capture"].get("notes", [])
    return [f"pid {pid}: --pod: {note}" for pid, found in latest.items() for note in found]


def _sharing(capture_dir: Path) -> tuple[Path, list[int]]:
    """This process's dump directory, and the other processes of the report whose XLA dumped there
    too and that ran graphs (a launcher that never ran one does not count): their modules are not
    told apart."""
    from xlabridge.pod._capture import dump_directory

    mine, _ = dump_directory(capture_dir)
    others = []
    for other in capture_dir.parent.glob("pod-*"):
        debug = other / "pt_xla_debug.txt"
        if other == capture_dir or not debug.exists() or debug.stat().st_size == 0:
            continue
        if dump_directory(other)[0] == mine and other.name[len("pod-"):].isdigit():
            others.append(int(other.name[len("pod-"):]))
    return mine, sorted(others)


def _status(state: ev.ProbeState, reason: str = "") -> ev.ProbeStatus:
    status = Status(INFO, state, reason)
    return status.event(_recorder.stamp())


def _save_lazy_hlo(recorder: _recorder.Recorder, module, graph_hash: str) -> str | None:
    """The module torch_xla handed XLA (pre-partition, with its shardings), saved beside the log."""
    from xlabridge.pod._hlo_proto import module_proto

    before = module.before_optimizations()
    if before is None:
        return None
    path, name = recorder.hlo_path(f"{os.getpid()}-lazy-{graph_hash[:16]}.hlo.pb")
    path.write_bytes(module_proto(before))
    return name


def emit(recorder: _recorder.Recorder, capture_dir: Path) -> None:
    """Read this process's capture into ``recorder`` (at exit: the files are complete)."""
    dump, sharing = _sharing(capture_dir)
    if sharing:
        _NOTES.append(f"processes {', '.join(map(str, sharing))} dumped into {dump} too, where XLA numbers "
                      "modules per process: this process's collectives are not reported (give each process its "
                      "own --xla_dump_to)")

    def save(module, graph_hash: str) -> str | None:
        if not recorder.capture_hlo:
            return None
        return _recorder.safely(INFO.name, "saving a lazy graph's HLO", _save_lazy_hlo, recorder, module, graph_hash)

    events = capture_events(capture_dir, _recorder.stamp(), modules=not sharing, save_hlo=save)
    if events is None:
        executed = xla_metrics.loaded() and xla_metrics.Snapshot.take().executions > 0
        recorder.add(_status(ev.ProbeState.SILENT, "torch_xla executed graphs, but its debug file recorded none")
                     if executed else _status(ev.ProbeState.OK))
        return
    for event in events:
        recorder.add(event)
    recorder.add(_status(ev.ProbeState.OK))


def recovered_events(capture_dir: Path, stamp: dict) -> list[ev.Event]:
    """The capture of a process that did not reach its exit (killed, or still running), read by
    whoever reads the run's directory; nothing if it recorded no graph."""
    _, sharing = _sharing(capture_dir)
    return capture_events(capture_dir, stamp, modules=not sharing) or []


def capture_events(capture_dir: Path, stamp: dict, *, modules: bool = True,
                   save_hlo: Callable[..., str | None] | None = None) -> list[ev.Event] | None:
    """The events of one process's capture, as far as its files go (``None``: no graph recorded).

    Read at the process's exit, or, for a process that died or still runs, by whoever reads the
    run's directory: torch_xla writes its debug file and XLA its dump as they go. ``stamp``: the
    fields the events carry (that process's); ``save_hlo(module, hash)``: the saved HLO's name.
    """
    from xlabridge.pod import GraphCause, read_capture
    from xlabridge.pod._divergence import GraphSources
    from xlabridge.pod._lazy import classify_cause

    capture = read_capture(capture_dir, modules=modules)
    if capture.trace is None or not capture.trace.graphs:
        return None
    out: list[ev.Event] = []
    dynamo = {GraphCause.DYNAMO_COMPILE, GraphCause.DYNAMO_EXECUTE}
    for graph in capture.trace.graphs:
        module = capture.module_of(graph)
        frames = [ev.Frame(f.filename, f.lineno, f.function) for f in graph.trigger]
        out.append(ev.LazyGraphSeen(
            **stamp, hash=graph.graph_hash, cause=graph.cause_text, compiles=graph.compiles,
            executions=graph.executions, frames=frames, frames_truncated=graph.trigger_truncated,
            inputs=graph.inputs, outputs=graph.outputs, module=module.name if module else "",
        ))
        partitioned = module.analyze() if module is not None else None
        partitions = partitioned.num_partitions if partitioned is not None else 1
        if classify_cause(graph.cause_text) not in dynamo:
            hlo_file = save_hlo(module, graph.graph_hash) if save_hlo is not None and module is not None else None
            out.append(ev.XlaGraphSeen(
                **stamp, graph=None, hash=graph.graph_hash, origin=ev.GraphOrigin.LAZY, hlo_file=hlo_file,
                num_partitions=partitions, frames=frames,
            ))
        if module is not None and partitioned is not None:
            out.append(ev.GraphCollectives(
                **stamp, hash=graph.graph_hash, module=module.name, module_id=module.module_id,
                num_partitions=partitions,
                partitioned=partitioned.to_dict(), sources=GraphSources.of_module(module).to_dict(),
            ))
    causes = {graph.graph_hash: graph.cause_text for graph in capture.trace.graphs}
    out.append(ev.LazyRuns(**stamp, runs=[
        ev.LazyRun(run.step, run.graph_hash, causes.get(run.graph_hash, ""), run.compiled) for run in capture.trace.runs
    ]))
    return out


def hint(recorder: _recorder.Recorder) -> None:
    """An SPMD run observed without the capture: say what the report lacks, and how to get it."""
    runtime = sys.modules.get("torch_xla.runtime")
    if runtime is None or not runtime.is_spmd():
        return
    recorder.add(_status(
        ev.ProbeState.UNAVAILABLE,
        "this SPMD run was observed without capturing its XLA graphs: run it under `xlabridge report --pod`",
    ))
