"""Lazy tracing against ``torch.compile``: where do the extra XLA graphs come from?

``compare(step, *args)`` runs one step function twice over: first as plain LazyTensor
tracing (``step(...)`` then ``torch_xla.sync()``), then through a fresh
``torch.compile(step, backend=...)`` observed by the diagnostics. Both modes are measured with
the same metric definitions (``_probes.xla_metrics``), and the compiled mode through the same
probes and events as a report: its FX graph calls, XLA executions per call and Dynamo breaks
are the report's (``Comparison.report`` holds it). Nothing is read from Dynamo's counters.

Figures per step:

* XLA graphs executed: torch_xla's ``ExecuteTime`` samples once the device is idle (every
  execution, lazy or from the bridge);
* compilations (``CompileTime``), transfers (``TransferToDeviceTime``/``...FromDeviceTime``)
  and CPU-fallback ops (the ``aten::*`` counters), read around the steady steps;
* for the compiled mode, from the events: forward FX graph calls per step, and the XLA graphs
  executed inside them (each forward graph's executions per call, from its fully measured
  calls, times its calls in the steady steps).

The gap between the modes is then split by an accounting identity (see ``Attribution``).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from xlabridge import _optional
from xlabridge.diagnostics._observe import recorder as _recorder, session as _session
from xlabridge.diagnostics._build.report import build_report
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe.probes import xla_metrics
from xlabridge.diagnostics.report import Report

SCHEMA = "xlabridge.compare/1"
_FEATURE = "xlabridge.diagnostics._compare"


@dataclasses.dataclass
class ModeResult:
    """What one mode (``"lazy"`` or ``"compiled"``) cost, read from torch_xla's metrics.

    Per-step figures are averages over the ``steps`` steady steps that follow ``warmup``
    steps; totals are exact sample counts. ``graphs_at_sync_per_step`` are the XLA graphs
    the closing ``torch_xla.sync()`` ran; the others ran during the step call itself (in
    lazy mode: cuts forced by CPU fallbacks or host reads).
    """

    mode: str
    steps: int
    warmup: int
    xla_graphs_per_step: float
    graphs_at_sync_per_step: float
    executions_warmup: int
    executions_steady: int
    compilations_warmup: int
    compilations_steady: int
    transfers_to_device_per_step: float
    transfers_from_device_per_step: float
    fallback_ops_per_step: dict[str, float]
    median_step_seconds: float

    @property
    def transfers_per_step(self) -> float:
        """Host transfers per steady step, both directions."""
        return self.transfers_to_device_per_step + self.transfers_from_device_per_step


@dataclasses.dataclass
class DynamoResult:
    """What Dynamo did in the compiled run, from the events.

    ``fx_graphs_compiled_*`` are Dynamo graphs captured (recompilations included);
    ``fx_graph_calls_per_step`` are calls of compiled forward FX graphs per steady step;
    ``xla_graphs_in_fx_per_step`` the XLA graphs they executed. ``graph_breaks`` are the first
    lines of the break reasons of the graphs compiled (the report's ``dynamo_breaks``).
    """

    fx_graphs_compiled_warmup: int
    fx_graphs_compiled_steady: int
    fx_graph_calls_per_step: float
    xla_graphs_in_fx_per_step: float
    graph_breaks: list[str]


@dataclasses.dataclass
class Attribution:
    """The per-step XLA graph gap (compiled minus lazy) split into its sources.

    With ``D`` FX graph calls and ``E_in`` XLA graphs inside them, ``E_out`` XLA graphs
    outside them, and lazily ``L_in`` graphs during the step and ``L_sync`` at the sync:

    * ``dynamo = D - 1``: each FX graph beyond the first is at least one more XLA graph;
    * ``hlo = (E_in - D) - L_in``: XLA graphs the bridge cut out of the FX graphs beyond
      the cuts lazy tracing makes at the same CPU fallbacks;
    * ``outside = E_out - (L_sync - 1)``: graphs outside the FX graphs (the backward that
      AOTAutograd compiles apart, code Dynamo left to run lazily, the closing sync) beyond
      lazy's one closing graph.

    The three add up to ``gap`` exactly, since the first FX graph stands in for lazy's
    closing graph.
    """

    gap: float
    dynamo: float
    hlo: float
    outside: float


@dataclasses.dataclass
class Comparison:
    """Lazy tracing and ``torch.compile`` on the same step, side by side, with a verdict."""

    backend: str
    lazy: ModeResult
    compiled: ModeResult
    dynamo: DynamoResult
    report: Report = dataclasses.field(default_factory=Report)
    warnings: list[str] = dataclasses.field(default_factory=list)

    @property
    def attribution(self) -> Attribution:
        """The gap in XLA graphs per step, split by source (see ``Attribution``)."""
        lazy, compiled, dynamo = self.lazy, self.compiled, self.dynamo
        lazy_in_step = lazy.xla_graphs_per_step - lazy.graphs_at_sync_per_step
        outside = compiled.xla_graphs_per_step - dynamo.xla_graphs_in_fx_per_step
        gap = compiled.xla_graphs_per_step - lazy.xla_graphs_per_step
        if dynamo.fx_graph_calls_per_step == 0:
            return Attribution(gap=gap, dynamo=0.0, hlo=0.0, outside=gap)
        return Attribution(
            gap=gap,
            dynamo=dynamo.fx_graph_calls_per_step - 1,
            hlo=dynamo.xla_graphs_in_fx_per_step - dynamo.fx_graph_calls_per_step - lazy_in_step,
            outside=outside - (lazy.graphs_at_sync_per_step - 1),
        )

    @property
    def verdict(self) -> str:
        """One line: how many XLA graphs each mode runs per step, and why they differ."""
        lazy, compiled, dynamo = self.lazy, self.compiled, self.dynamo
        head = (
            f"compiled runs {_count(compiled.xla_graphs_per_step, 'XLA graph')} per step vs "
            f"{_num(lazy.xla_graphs_per_step)} lazily ({_ms(compiled.median_step_seconds)} vs "
            f"{_ms(lazy.median_step_seconds)})"
        )
        fallbacks = ", ".join(sorted(compiled.fallback_ops_per_step)) or "none"
        if dynamo.fx_graph_calls_per_step == 0:
            return f"{head}: Dynamo compiled no FX graph, so the step ran lazily in both modes"
        share = self.attribution
        if share.gap < 0:
            return f"{head}: fewer XLA graphs compiled, so graph breaks cost nothing here"
        if share.gap == 0 and compiled.fallback_ops_per_step:
            return f"{head}: no graph gap; the CPU fallbacks ({fallbacks}) cut lazy tracing as well"
        if share.gap == 0:
            return f"{head}: no graph gap"
        dynamo_extra = share.dynamo + (share.outside if dynamo.graph_breaks else 0.0)
        other_extra = 0.0 if dynamo.graph_breaks else share.outside
        reasons = "; ".join(dynamo.graph_breaks) or "no break reason recorded"
        causes = [
            (dynamo_extra, f"Dynamo graph breaks (+{_num(dynamo_extra)}; "
             f"{_count(dynamo.fx_graph_calls_per_step, 'FX graph')} per step; {reasons})"),
            (share.hlo, f"HLO lowering breaks (+{_num(share.hlo)}; CPU fallback ops: {fallbacks})"),
            (other_extra, f"graphs outside the FX graphs (+{_num(other_extra)}; "
             "AOTAutograd backward, code run lazily, the closing sync)"),
        ]
        causes = [cause for cause in causes if cause[0] > 0]
        if not causes:
            return f"{head}: not attributable from the metrics (CPU fallback ops: {fallbacks})"
        causes.sort(key=lambda cause: -cause[0])
        return f"{head}: " + "; ".join(text for _, text in causes)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready, schema ``xlabridge.compare/1``): both modes, Dynamo's counts,
        the attribution, the verdict, and the compiled mode's report."""
        return {
            "schema": SCHEMA,
            "backend": self.backend,
            "lazy": dataclasses.asdict(self.lazy),
            "compiled": dataclasses.asdict(self.compiled),
            "dynamo": dataclasses.asdict(self.dynamo),
            "attribution": dataclasses.asdict(self.attribution),
            "verdict": self.verdict,
            "warnings": list(self.warnings),
            "report": self.report.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Comparison:
        """Read a comparison back from ``to_dict()``'s form."""
        if data.get("schema") != SCHEMA:
            raise ValueError(f"comparison 'schema' must be {SCHEMA!r}, got {data.get('schema')!r}")
        return cls(
            backend=data["backend"], lazy=ModeResult(**data["lazy"]), compiled=ModeResult(**data["compiled"]),
            dynamo=DynamoResult(**data["dynamo"]), report=Report.from_dict(data["report"]),
            warnings=list(data.get("warnings", [])),
        )

    def __str__(self) -> str:
        """Both modes side by side, then the Dynamo breaks, warnings and the verdict."""
        lazy, compiled = self.lazy, self.compiled
        rows: list[tuple[str, str, str]] = [
            ("XLA graphs / step", _num(lazy.xla_graphs_per_step), _num(compiled.xla_graphs_per_step)),
            ("  of which at sync", _num(lazy.graphs_at_sync_per_step),
             _num(compiled.graphs_at_sync_per_step)),
            ("compilations (warmup)", str(lazy.compilations_warmup), str(compiled.compilations_warmup)),
            ("compilations (steady)", str(lazy.compilations_steady), str(compiled.compilations_steady)),
            ("transfers to device / step", _num(lazy.transfers_to_device_per_step),
             _num(compiled.transfers_to_device_per_step)),
            ("transfers to host / step", _num(lazy.transfers_from_device_per_step),
             _num(compiled.transfers_from_device_per_step)),
            ("CPU fallback ops / step", _ops(lazy.fallback_ops_per_step),
             _ops(compiled.fallback_ops_per_step)),
            ("median step time", _ms(lazy.median_step_seconds), _ms(compiled.median_step_seconds)),
            ("FX graphs / step", "-", _num(self.dynamo.fx_graph_calls_per_step)),
            ("FX graphs compiled", "-", f"{self.dynamo.fx_graphs_compiled_warmup} + "
             f"{self.dynamo.fx_graphs_compiled_steady} steady"),
            ("Dynamo graph breaks", "-", str(len(self.dynamo.graph_breaks))),
        ]
        width = max(len(row[0]) for row in rows)
        col = max(12, *(len(row[1]) for row in rows))
        title = f"{lazy.steps} steps after {lazy.warmup} warmup; backend={self.backend}"
        lines = [title, f"{'':<{width}}  {'lazy':>{col}}  compiled"]
        lines += [f"{name:<{width}}  {left:>{col}}  {right}" for name, left, right in rows]
        lines += [f"Dynamo break: {reason}" for reason in self.dynamo.graph_breaks]
        lines += [f"warning: {text}" for text in self.warnings]
        lines.append(f"verdict: {self.verdict}")
        return "\n".join(lines)


def compare(
    step: Callable[..., Any],
    *args: Any,
    steps: int = 10,
    warmup: int = 2,
    backend: str | Callable[..., Any] = "openxla",
    **kwargs: Any,
) -> Comparison:
    """Run ``step(*args, **kwargs)`` lazily, then compiled, and say where the gap comes from.

    Each mode runs ``warmup`` steps (compilations land there) then ``steps`` steady steps,
    each closed by ``torch_xla.sync()`` and a wait for the device, so the wall times include
    the device work. The step runs ``2 * (warmup + steps)`` times in all: a step that updates
    state (an optimizer step) keeps updating it. The compiled mode uses a fresh
    ``torch.compile(step, backend=...)``; Dynamo is not reset.
    """
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"compare: 'steps' must be an int >= 1, got {steps!r}")
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0:
        raise ValueError(f"compare: 'warmup' must be an int >= 0, got {warmup!r}")
    _optional.require("torch_xla", _FEATURE)

    _sync()
    lazy, _ = _run_mode("lazy", step, args, kwargs, steps, warmup)

    compiled_step = torch.compile(step, backend=backend)
    recorder = _recorder.Recorder()
    warm: dict[int, int] = {}

    def steady_starts() -> None:  # the later calls summed over the warmup steps
        warm.update({e.graph: e.calls for e in recorder.tally_events() if isinstance(e, ev.GraphCalls)})

    _session.start(recorder)
    try:
        compiled, boundary = _run_mode("compiled", compiled_step, args, kwargs, steps, warmup, steady_starts)
    finally:
        _session.stop(recorder)
    report = build_report(recorder.events)
    dynamo = _dynamo_result(recorder.events, report, boundary, steps, warm)
    warnings = list(report.warnings)
    if dynamo.fx_graph_calls_per_step == 0:
        warnings.append(
            "Dynamo ran no compiled FX graph in the steady steps: the step has no tensor "
            "work Dynamo captures, or its recompile limit was reached and it runs eagerly"
        )
    name = backend if isinstance(backend, str) else getattr(backend, "__name__", repr(backend))
    return Comparison(backend=name, lazy=lazy, compiled=compiled, dynamo=dynamo, report=report, warnings=warnings)


def _dynamo_result(events: Sequence[ev.Event], report: Report, boundary: float, steps: int,
                   warm: dict[int, int]) -> DynamoResult:
    """Forward FX graph calls and the XLA graphs they ran in the steady steps, from the events
    (``warm``: each graph's summed later calls when the steady steps began)."""
    forward = {g.graph for g in report.xla_graphs if g.role == "forward"}
    per_call = {g.graph: g.executions_per_call for g in report.xla_graphs}
    calls: dict[int, int] = {}
    for event in events:
        if isinstance(event, ev.GraphCalled) and event.start >= boundary:
            calls[event.graph] = calls.get(event.graph, 0) + 1
        elif isinstance(event, ev.GraphCalls) and event.t >= boundary:
            calls[event.graph] = calls.get(event.graph, 0) + event.calls - warm.get(event.graph, 0)
    forward_calls = sum(n for graph, n in calls.items() if graph in forward)
    captured = [e for e in events if isinstance(e, ev.GraphCaptured)]
    return DynamoResult(
        fx_graphs_compiled_warmup=sum(e.t < boundary for e in captured),
        fx_graphs_compiled_steady=sum(e.t >= boundary for e in captured),
        fx_graph_calls_per_step=forward_calls / steps,
        xla_graphs_in_fx_per_step=sum(per_call.get(g, 0) * n for g, n in calls.items() if g in forward) / steps,
        graph_breaks=[b.reason for b in report.dynamo_breaks],
    )


@dataclasses.dataclass
class _Snapshot:
    """The metrics ``compare`` reads around a phase: settled executions, totals, fallbacks."""

    executions: int
    totals: xla_metrics.Snapshot
    fallbacks: dict[str, int]

    @classmethod
    def take(cls) -> _Snapshot:
        return cls(xla_metrics.settled_executions(), xla_metrics.Snapshot.take(), xla_metrics.fallback_counts())


def _run_mode(
    mode: str,
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    steps: int,
    warmup: int,
    steady_starts: Callable[[], None] | None = None,
) -> tuple[ModeResult, float]:
    """Run ``warmup`` then ``steps`` synced steps of ``fn``; the result and the steady start
    (``steady_starts()`` is called there)."""
    start = _Snapshot.take()
    for _ in range(warmup):
        result = fn(*args, **kwargs)
        _sync()
        del result
    if steady_starts is not None:
        steady_starts()
    steady = _Snapshot.take()
    boundary = time.monotonic()
    times, at_sync = [], 0
    for _ in range(steps):
        began = time.perf_counter()
        result = fn(*args, **kwargs)  # held through the sync, or lazy work on it is dropped
        before_sync = xla_metrics.settled_executions()
        _sync()
        times.append(time.perf_counter() - began)
        at_sync += xla_metrics.settled_executions() - before_sync
        del result
    end = _Snapshot.take()
    warm, steady_totals = steady.totals.since(start.totals), end.totals.since(steady.totals)
    return ModeResult(
        mode=mode,
        steps=steps,
        warmup=warmup,
        xla_graphs_per_step=(end.executions - steady.executions) / steps,
        graphs_at_sync_per_step=at_sync / steps,
        executions_warmup=steady.executions - start.executions,
        executions_steady=end.executions - steady.executions,
        compilations_warmup=warm.compiles,
        compilations_steady=steady_totals.compiles,
        transfers_to_device_per_step=steady_totals.to_device / steps,
        transfers_from_device_per_step=steady_totals.from_device / steps,
        fallback_ops_per_step=_fallback_deltas(steady.fallbacks, end.fallbacks, steps),
        median_step_seconds=statistics.median(times),
    ), boundary


def _fallback_deltas(before: dict[str, int], after: dict[str, int], steps: int) -> dict[str, float]:
    """CPU fallback op counts per step between two snapshots.

    torch_xla's Dynamo bridge clears all counters when it compiles a new FX graph; a counter
    lower than before was cleared in between, and its current value is then the (lower
    bound) count since.
    """
    deltas = {}
    for op, count in after.items():
        delta = count - before.get(op, 0)
        delta = delta if delta >= 0 else count
        if delta > 0:
            deltas[op] = delta / steps
    return deltas


def _sync() -> None:
    """Run the pending lazy graph and wait until the device is done."""
    import torch_xla
    import torch_xla.core.xla_model as xm

    torch_xla.sync()
    xm.wait_device_ops()


def _num(value: float) -> str:
    """A per-step figure: integral values without a decimal point."""
    return f"{value:g}" if value == int(value) else f"{value:.2f}"


def _count(value: float, noun: str) -> str:
    """``1 XLA graph``, ``2 XLA graphs``, ``1.50 XLA graphs``."""
    return f"{_num(value)} {noun}" if value == 1 else f"{_num(value)} {noun}s"


def _ops(ops: dict[str, float]) -> str:
    """Fallback ops as ``aten::exp2 x1``, or ``-`` for none."""
    return ", ".join(f"{op} x{_num(n)}" for op, n in sorted(ops.items())) or "-"


def _ms(seconds: float) -> str:
    """Seconds as milliseconds with two decimals."""
    return f"{seconds * 1e3:.2f} ms"
