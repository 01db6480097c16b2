"""Ops run in torch_xla's eager mode, read through its public metrics.

Under ``torch_xla.experimental.eager_mode(True)`` (the ``eager/`` examples of torch_xla build
their model and data eagerly and compile only the step) every op is traced, compiled once per
shape and launched at once as its own XLA computation. torch_xla times these in metrics of
their own, ``EagerOpCompileTime`` and ``EagerOpExecuteTime``, not in ``CompileTime`` and
``ExecuteTime``: without them, the op's execution lands in "other" (its compilation is read with
the others', ``xla_metrics.Snapshot``). Each sample carries the wall-clock time it ended at, so
the samples torch_xla keeps (its newest 1024 per metric) place the work in the timeline;
the totals count every one.
"""

from __future__ import annotations

import time
from typing import Any

from xlabridge.diagnostics._observe import recorder as _recorder
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe.probes import ProbeInfo, xla_metrics

INFO = ProbeInfo(
    name="xla.eager",
    surface="torch_xla.debug.metrics: metric_data('EagerOpExecuteTime'), metric_data('EagerOpCompileTime')",
    checked="torch_xla 2.8.1, 2.9.0",
    patch=False,
    why="torch_xla times eager-mode ops in metrics of their own, with the wall-clock end of each",
    sees="the time eager-mode ops (torch_xla.experimental.eager_mode) spent running (the eager share)",
)

EXECUTE_TIME = "EagerOpExecuteTime"
COMPILE_TIME = xla_metrics.EAGER_COMPILE_TIME


def _read(name: str) -> tuple[int, float, list[tuple[float, float]]]:
    """``(samples, accumulated ns, [(wall-clock end, ns)...])`` of metric ``name``."""
    import torch_xla.debug.metrics as met

    data = met.metric_data(name)
    return (int(data[0]), float(data[1]), list(data[2])) if data else (0, 0.0, [])


class Baseline:
    """The eager metrics when observation began (zeros before torch_xla is imported)."""

    def __init__(self) -> None:
        self.wall = time.time()
        self.totals: dict[str, tuple[int, float]] = {}
        if xla_metrics.loaded():
            for name in (EXECUTE_TIME, COMPILE_TIME):
                count, accumulated, _ = _read(name)
                self.totals[name] = (count, accumulated)


def event(baseline: Baseline) -> ev.EagerOps | None:
    """The eager ops run since ``baseline`` (``None`` if none ran, or torch_xla was not imported)."""
    if not xla_metrics.loaded():
        return None
    offset = time.monotonic() - time.time()  # wall-clock sample ends onto the monotonic clock of the events
    figures: dict[str, Any] = {}
    for name in (EXECUTE_TIME, COMPILE_TIME):
        count, accumulated, samples = _read(name)
        before_count, before_ns = baseline.totals.get(name, (0, 0.0))
        if count < before_count:  # cleared in between (met.clear_all()): what is there now is since
            before_count, before_ns = 0, 0.0
        spans = [[end + offset - ns / 1e9, ns / 1e9] for end, ns in samples if end >= baseline.wall]
        figures[name] = (count - before_count, (accumulated - before_ns) / 1e9, spans)
    executions, execute_seconds, spans = figures[EXECUTE_TIME]
    compiles, compile_seconds, compile_spans = figures[COMPILE_TIME]
    if not (executions or compiles):
        return None
    return ev.EagerOps(
        **_recorder.stamp(), executions=executions, execute_seconds=execute_seconds, compiles=compiles,
        compile_seconds=compile_seconds, spans=spans, compile_spans=compile_spans,
    )
