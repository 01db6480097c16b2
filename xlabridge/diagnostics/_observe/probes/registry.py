"""Installs the probes for the active recorders, and keeps what each could see.

``install`` runs when the first recorder starts and ``restore`` when the last one stops: every
patch and registration goes through one ``Installation``. A probe whose surface is missing is
``unavailable``; one that did not fire where it should have (``selftest``, ``cross_check``) is
``silent``. Either gives one ``DiagnosticsWarning`` naming the probe per observation, and a
``probe_status`` event to every recorder, so each report says what it could not see.
"""

from __future__ import annotations

from collections.abc import Sequence

from xlabridge.diagnostics._observe import recorder as _recorder
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe.probes import (
    Installation,
    ProbeInfo,
    Status,
    status as _status,
    compile_requests,
    compile_workers,
    compiled_calls,
    distributed,
    dynamo_breaks,
    dynamo_compiles,
    dynamo_graphs,
    interpreter_exit,
    imports,
    inductor,
    launcher,
    torchtpu,
    xla_bridge,
    xla_eager,
    xla_helper,
    xla_metrics,
    xla_sync,
)

PROBES: tuple[ProbeInfo, ...] = (
    imports.INFO, compile_requests.INFO, dynamo_compiles.INFO, dynamo_graphs.INFO,
    dynamo_breaks.INFO, compiled_calls.INFO, inductor.INFO,
    xla_helper.INFO, xla_bridge.INFO, xla_sync.INFO, xla_metrics.INFO, xla_eager.INFO, torchtpu.INFO,
    distributed.INFO, launcher.INFO, compile_workers.INFO, interpreter_exit.INFO,
)
"""Every probe, in the order the report lists them."""

_INSTALLED_AT_START = (imports, compile_requests, dynamo_compiles, dynamo_graphs, dynamo_breaks, inductor, xla_helper,
                       xla_sync, torchtpu, distributed, launcher, compile_workers, interpreter_exit)
"""Probes installed when observation starts, in this order (the sync and TorchTPU probes wait on the
import probe's hook); the bridge's are installed per extraction."""

_installation: Installation | None = None


def installed() -> bool:
    return _installation is not None


def statuses() -> list[Status]:
    """Each probe's status, in ``PROBES`` order."""
    return [_status.of(info) for info in PROBES]


unavailable = _status.unavailable
silent = _status.silent


def install() -> None:
    """Install every probe (first recorder); a failing one is marked unavailable."""
    global _installation
    _status.reset()  # each observation says once what it cannot see
    _installation = Installation()
    for module in _INSTALLED_AT_START:
        try:
            module.install(_installation)
        except Exception as error:  # the surface moved in this torch release
            unavailable(module.INFO, f"cannot be installed ({type(error).__name__}: {error})")
    if xla_metrics.loaded():
        try:
            xla_bridge.check()
        except Exception as error:
            unavailable(xla_bridge.INFO, f"{type(error).__name__}: {error}")


def restore() -> None:
    """Remove every patch and registration (last recorder)."""
    global _installation
    if _installation is not None:
        _installation.restore()
        _installation = None


def cross_check(events: Sequence[ev.Event]) -> None:
    """In-run liveness checks: facts one probe saw that imply another should have fired."""
    def of(kind: type[ev.Event]) -> list:
        return [e for e in events if isinstance(e, kind)]

    captured = {e.compile_id for e in of(ev.GraphCaptured)}
    timed = {e.compile_id for e in of(ev.DynamoCompile)}
    bridged = of(ev.BridgeGraph)
    partitioned = {e.graph for e in of(ev.Partitioned)}
    first_calls = [e for e in of(ev.GraphCalled) if e.call == 1]
    not_yet = {s.info.name for s in statuses() if s.state != ev.ProbeState.OK}

    missing = sorted({b.compile_id for b in bridged if b.compile_id and b.compile_id not in captured})
    if missing and dynamo_graphs.INFO.name not in not_yet:
        silent(dynamo_graphs.INFO, f"graphs of compile ids {', '.join(missing)} reached torch_xla's bridge, "
               "but no Dynamo graph was recorded for them")
    if any(e.ends_in_break for e in of(ev.GraphCaptured)) and not of(ev.TorchBreak) \
            and dynamo_breaks.INFO.name not in not_yet:
        silent(dynamo_breaks.INFO, "graphs ended in graph breaks, but torch recorded none through trace_structured")
    untimed = sorted(captured - timed)
    if untimed and dynamo_compiles.INFO.name not in not_yet:
        silent(dynamo_compiles.INFO, f"Dynamo compiled {', '.join(untimed)} without its compile callbacks running")
    xla_backends = {"openxla", "openxla_eval"}
    to_xla = {e.compile_id for e in of(ev.GraphCaptured) if e.backend in xla_backends}
    to_xla |= {e.compile_id for e in of(ev.CompilePath) if e.target == "xla"}
    to_xla -= {b.compile_id for b in bridged if b.compiler == torchtpu.COMPILER}
    unbridged = sorted(to_xla - {b.compile_id for b in bridged})
    if unbridged and xla_helper.INFO.name not in not_yet:
        silent(xla_helper.INFO, f"graphs {', '.join(unbridged)} went to an XLA backend, but none reached "
               "torch_xla's bridge through xla_backend_helper")
    unpartitioned = sorted({c.graph for c in first_calls} - partitioned)
    if unpartitioned and xla_bridge.INFO.name not in not_yet:
        silent(xla_bridge.INFO, f"bridge graphs {unpartitioned} ran their first call, but no partitioning was seen")
    to_torchtpu = {e.compile_id for e in of(ev.GraphCaptured) if e.backend == "tpu"}
    to_torchtpu |= {e.compile_id for e in of(ev.CompilePath) if e.target == "torchtpu"}
    through = {b.compile_id for b in bridged if b.compiler == torchtpu.COMPILER}
    unseen = sorted(to_torchtpu - through)
    if unseen and torchtpu.INFO.name not in not_yet:
        silent(torchtpu.INFO, f"graphs {', '.join(unseen)} went to TorchTPU's backend, but none reached its "
               "compiler through TpuBackend._compile_graph_module")
    with_xla = {e.graph for e in of(ev.Partitioned) if any(s.kind == ev.SegmentKind.XLA for s in e.segments)}
    with_xla -= {b.graph for b in bridged if b.compiler == torchtpu.COMPILER}
    calls = [c for c in of(ev.GraphCalled) if c.graph in with_xla]
    if calls and not any(c.executions for c in calls) and xla_metrics.INFO.name not in not_yet:
        silent(xla_metrics.INFO, "graphs with XLA segments ran, but torch_xla's execution metric did not move")


def emit_statuses(recorder: _recorder.Recorder) -> None:
    """Give ``recorder`` the current status of every probe."""
    stamp = _recorder.stamp()
    for status in statuses():
        recorder.add(status.event(stamp))
