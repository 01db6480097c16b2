"""Where one process's observed wall time went: tracing, XLA compilation, execution, CPU-fallback
work and the rest, as exclusive shares (nested intervals counted once, in the innermost).

From its events:

* **tracing**: Dynamo's compilations (``dynamo_compile`` intervals: tracing plus the backend's
  compile call, AOTAutograd included) and the bridge's extractions (``partitioned``
  intervals: partitioning and lazy tracing), less the XLA compilations inside them;
* **XLA compilation**: every ``xla_compile`` event (inside extractions, inside later calls,
  inside Dynamo, and the rest of torch_xla's ``CompileTime`` outside compiled graphs);
* **execution**: the calls of compiled graphs (``graph_called`` after the extraction, summed
  ``graph_calls``), less the XLA compilations and CPU-fallback work inside them; waiting for
  the device inside a call counts here;
* **CPU-fallback work**: time in the CPU nodes of partitioned graphs during their calls;
* **other**: the rest of the wall time (Python between compiled graphs, lazy tensor code,
  ``torch_xla.sync()`` outside compiled graphs, start-up).

Intervals of one kind are merged before summing, so overlapping ones count once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics.report import TimeSplit


def _union(intervals: Iterable[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def split(events: Sequence[ev.Event]) -> TimeSplit | None:
    """The time split of one process's events (``None`` without a ``process_end``)."""
    end = next((e for e in reversed(events) if isinstance(e, ev.ProcessEnd)), None)
    if end is None:
        return None
    compiles = [e for e in events if isinstance(e, ev.XlaCompile)]

    def compiled(phase: ev.XlaPhase) -> float:
        return sum(e.seconds for e in compiles if e.phase == phase)

    dynamo = _union((e.start, e.t) for e in events if isinstance(e, ev.DynamoCompile))
    extraction = _union((e.start, e.t) for e in events if isinstance(e, ev.Partitioned))
    calls = sum(e.t - e.start for e in events if isinstance(e, ev.GraphCalled))
    calls += sum(e.seconds for e in events if isinstance(e, ev.GraphCalls))
    cpu = sum(e.cpu_fallback_seconds for e in events if isinstance(e, (ev.GraphCalled, ev.GraphCalls)))
    tracing = dynamo - compiled(ev.XlaPhase.DYNAMO) + extraction - compiled(ev.XlaPhase.EXTRACTION)
    xla_compile = sum(e.seconds for e in compiles)
    execution = calls - compiled(ev.XlaPhase.CALL) - cpu
    wall = end.t - end.start
    other = wall - tracing - xla_compile - execution - cpu
    return TimeSplit(pid=end.pid, wall=wall, tracing=tracing, xla_compile=xla_compile,
                     execution=execution, cpu_fallback=cpu, other=other)
