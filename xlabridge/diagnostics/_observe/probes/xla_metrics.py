"""torch_xla's own metrics, read through its public module ``torch_xla.debug.metrics``.

The one place that says which metric means what, for the report and for ``compare`` alike:

* ``RunCachedGraphOutputData`` gains one sample each time the Dynamo bridge launches one of
  its XLA graphs, at the launch (``ExecuteTime`` is sampled when an execution's completion is
  processed, possibly after the call returned, so it is read only once the device is idle);
* ``CompileTime`` one sample per XLA compilation of a traced graph (nanoseconds), and
  ``EagerOpCompileTime`` one per compilation of an op run in eager mode
  (``torch_xla.experimental.eager_mode(True)``: each op its own XLA computation);
  ``UncachedCompile`` counts both, and is cheap to read; each sample carries the wall-clock
  time it was taken at (the compilation's end), which places it inside a call or a sync;
* ``TransferToDeviceTime`` / ``TransferFromDeviceTime`` one sample per host-device transfer
  (nanoseconds);
  ``InboundData`` / ``OutboundData`` their bytes;
* ``aten::*`` counters the ops that ran through torch_xla's CPU fallback.

Reading a metric copies its last 1024 samples into Python (far dearer than a counter), so the probes read
full snapshots only around the first calls of each graph, and the cheap counter otherwise.
Nothing here imports torch_xla: a process that has not imported it has no metrics to read.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from xlabridge.diagnostics._observe.probes import ProbeInfo

INFO = ProbeInfo(
    name="xla.metrics",
    surface="torch_xla.debug.metrics: metric_data, counter_value, executed_fallback_ops",
    checked="torch_xla 2.8.1, 2.9.0",
    patch=False,
    why="torch_xla's public metrics are the reference figures users read (met.short_metrics_report())",
    sees="XLA executions, transfers and compilations per call, and XLA compile seconds",
)

EXECUTIONS = "RunCachedGraphOutputData"
SETTLED_EXECUTIONS = "ExecuteTime"
COMPILE_TIME = "CompileTime"
EAGER_COMPILE_TIME = "EagerOpCompileTime"
UNCACHED_COMPILES = "UncachedCompile"
TO_DEVICE = "TransferToDeviceTime"
FROM_DEVICE = "TransferFromDeviceTime"
BYTES_TO_DEVICE = "InboundData"
BYTES_FROM_DEVICE = "OutboundData"


def loaded() -> bool:
    """Whether this process has imported torch_xla (and so has metrics)."""
    return "torch_xla" in sys.modules


def _metrics() -> Any:
    import torch_xla.debug.metrics as met

    return met


def _data(name: str) -> tuple[int, float]:
    """``(samples, accumulated value)`` of metric ``name``; zeros before its first sample."""
    data = _metrics().metric_data(name)
    return (int(data[0]), float(data[1])) if data else (0, 0.0)


def uncached_compiles() -> int:
    """XLA compilations so far (a counter: cheap)."""
    return (_metrics().counter_value(UNCACHED_COMPILES) or 0) if loaded() else 0


def compile_seconds_since(wall: float) -> float:
    """Seconds of the XLA compilations (traced graphs and eager ops) that ended after ``wall``
    (``time.time()``).

    Counting the newest samples instead would take a traced graph's compilation for an eager
    op's: ``UncachedCompile`` counts both, ``CompileTime`` only the former.
    """
    if not loaded():
        return 0.0
    total = 0.0
    for name in (COMPILE_TIME, EAGER_COMPILE_TIME):
        data = _metrics().metric_data(name)
        total += sum(value for stamp, value in (data[2] if data else []) if stamp >= wall)
    return total / 1e9


def fallback_ops() -> list[str]:
    """Ops torch_xla ran through its CPU fallback since its counters were last cleared."""
    return list(_metrics().executed_fallback_ops()) if loaded() else []


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """Metric totals at one moment (all zero before torch_xla is imported)."""

    executions: int = 0
    compiles: int = 0
    compile_seconds: float = 0.0
    to_device: int = 0
    from_device: int = 0
    bytes_to_device: int = 0
    bytes_from_device: int = 0
    transfer_seconds: float = 0.0

    @classmethod
    def take(cls) -> Snapshot:
        if not loaded():
            return cls()
        (lazy_compiles, lazy_ns), (eager_compiles, eager_ns) = _data(COMPILE_TIME), _data(EAGER_COMPILE_TIME)
        compiles, compile_ns = lazy_compiles + eager_compiles, lazy_ns + eager_ns
        to_bytes = _data(BYTES_TO_DEVICE)[1]
        from_bytes = _data(BYTES_FROM_DEVICE)[1]
        (to_device, to_ns), (from_device, from_ns) = _data(TO_DEVICE), _data(FROM_DEVICE)
        return cls(
            executions=_data(EXECUTIONS)[0],
            compiles=compiles,
            compile_seconds=compile_ns / 1e9,
            to_device=to_device,
            from_device=from_device,
            bytes_to_device=int(to_bytes),
            bytes_from_device=int(from_bytes),
            transfer_seconds=(to_ns + from_ns) / 1e9,
        )

    def since(self, earlier: Snapshot) -> Snapshot:
        """What happened between ``earlier`` and this snapshot.

        A total lower than before was reset in between (``met.clear_all()``); its value now is
        then the (lower-bound) amount since.
        """
        def delta(now: Any, before: Any) -> Any:
            return now - before if now >= before else now

        return Snapshot(**{
            field.name: delta(getattr(self, field.name), getattr(earlier, field.name))
            for field in dataclasses.fields(self)
        })

    def minus(self, other: Snapshot) -> Snapshot:
        """This amount less ``other`` (attributed elsewhere), never below zero."""
        return Snapshot(**{
            field.name: max(getattr(self, field.name) - getattr(other, field.name), 0)
            for field in dataclasses.fields(self)
        })

    def plus(self, other: Snapshot) -> Snapshot:
        return Snapshot(**{
            field.name: getattr(self, field.name) + getattr(other, field.name)
            for field in dataclasses.fields(self)
        })


def settled_executions() -> int:
    """XLA graph executions of every kind (lazy and bridge) once the device is idle.

    ``ExecuteTime`` is sampled when an execution's completion is processed, which can come
    after ``torch_xla.sync(wait=True)`` returns; waiting for the device first settles it.
    """
    import torch_xla.core.xla_model as xm

    xm.wait_device_ops()
    return _data(SETTLED_EXECUTIONS)[0]


def fallback_counts() -> dict[str, int]:
    """Each CPU-fallback op with its count so far."""
    met = _metrics()
    return {op: met.counter_value(op) or 0 for op in met.executed_fallback_ops()}
