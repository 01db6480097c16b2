"""Lazy tracing against ``torch.compile``: where do the extra XLA graphs come from?

``compare(step, *args)`` runs one step function twice over: first as plain LazyTensor
tracing (``step(...)`` then ``torch_xla.sync()``), then through a fresh
``torch.compile(step, backend=...)``. Everything it reports is read from torch_xla's own
metrics (``torch_xla.debug.metrics``), so the figures are the ones a user would see in
``met.short_metrics_report()``:

* ``ExecuteTime`` samples are XLA graph executions, ``CompileTime`` samples XLA
  compilations, ``TransferToDeviceTime``/``TransferFromDeviceTime`` samples host transfers;
* the ``aten::*`` counters are the ops that fell back to the CPU.

For the compiled run, the backend is wrapped by a counting shim: each call of the shim is
one FX graph Dynamo captured, and each call of what it returns is one execution of that FX
graph. Counting at the backend is exact whatever Dynamo's internal counters do and does
not reset Dynamo (the user's other compiled functions keep their caches); the XLA graphs
executed *inside* the FX graph calls are the ones torch_xla's Dynamo bridge made of them.

The gap between the modes is then split by an accounting identity (see ``Attribution``):
extra FX graphs (Dynamo graph breaks), extra XLA graphs inside the FX graphs beyond the
cuts lazy tracing makes too (HLO lowering breaks), and graphs run outside the FX graphs.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from xlabridge import _optional

_FEATURE = "xlabridge.diagnostics.compare"
_EXECUTE, _COMPILE = "ExecuteTime", "CompileTime"
_TO_DEVICE, _FROM_DEVICE = "TransferToDeviceTime", "TransferFromDeviceTime"


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
    """What Dynamo did in the compiled run, counted at the backend.

    ``fx_graphs_compiled_*`` are backend calls (one per FX graph captured, recompilations
    included); ``fx_graph_calls_per_step`` are executions of compiled FX graphs per steady
    step; ``xla_graphs_in_fx_per_step`` the XLA graphs executed while those ran.
    ``graph_breaks`` are the first lines of the break reasons Dynamo counted meanwhile.
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
        """Plain data (JSON-ready): both modes, Dynamo's counts, the attribution, the verdict."""
        return {
            "backend": self.backend,
            "lazy": dataclasses.asdict(self.lazy),
            "compiled": dataclasses.asdict(self.compiled),
            "dynamo": dataclasses.asdict(self.dynamo),
            "attribution": dataclasses.asdict(self.attribution),
            "verdict": self.verdict,
            "warnings": list(self.warnings),
        }

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
    each closed by ``torch_xla.sync()`` and ``xm.wait_device_ops()`` so the wall times
    include the device work. In the steady compiled steps the device is also waited on
    around each FX graph call, to count the XLA graphs run inside it; that forgoes
    host/device overlap between FX graphs, a cost well under a graph launch.
    The step runs ``2 * (warmup + steps)`` times in all: a step that updates state (an
    optimizer step) keeps updating it. The compiled mode uses a fresh
    ``torch.compile(step, backend=...)``; Dynamo is not reset.
    """
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"compare: 'steps' must be an int >= 1, got {steps!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"compare: 'warmup' must be an int >= 0, got {warmup!r}")
    _optional.require("torch_xla", _FEATURE)
    from torch._dynamo.backends.registry import lookup_backend
    from torch._dynamo.utils import counters

    _sync()
    lazy = _run_mode("lazy", step, args, kwargs, steps, warmup)

    shim = _CountingBackend(lookup_backend(backend))
    breaks_before = dict(counters["graph_break"])
    compiled_step = torch.compile(step, backend=shim)
    compiled = _run_mode("compiled", compiled_step, args, kwargs, steps, warmup, shim)
    new_breaks = [
        reason.strip().splitlines()[0]
        for reason, count in counters["graph_break"].items()
        if count > breaks_before.get(reason, 0)
    ]
    dynamo = DynamoResult(
        fx_graphs_compiled_warmup=shim.compiled_warmup,
        fx_graphs_compiled_steady=shim.compiled - shim.compiled_warmup,
        fx_graph_calls_per_step=shim.calls_steady / steps,
        xla_graphs_in_fx_per_step=shim.executions_steady / steps,
        graph_breaks=new_breaks,
    )
    warnings = []
    if shim.calls_steady == 0:
        warnings.append(
            "Dynamo ran no compiled FX graph in the steady steps: the step has no tensor "
            "work Dynamo captures, or its recompile limit was reached and it runs eagerly"
        )
    name = backend if isinstance(backend, str) else getattr(backend, "__name__", repr(backend))
    return Comparison(backend=name, lazy=lazy, compiled=compiled, dynamo=dynamo, warnings=warnings)


class _CountingBackend:
    """Wraps a Dynamo backend to count FX graphs compiled, their calls, and XLA graphs inside.

    ``steady`` is switched on by the runner after warmup, so counts split into warmup and
    steady phases without resetting anything.
    """

    def __init__(self, backend: Callable[..., Any]) -> None:
        self._backend = backend
        self.steady = False
        self.compiled = 0
        self.compiled_warmup = 0
        self.calls_steady = 0
        self.executions_steady = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        self.compiled += 1
        if not self.steady:
            self.compiled_warmup += 1
        compiled_fn = self._backend(gm, example_inputs)

        def counted(*call_args: Any) -> Any:
            if not self.steady:
                return compiled_fn(*call_args)
            before = _settled_samples(_EXECUTE)
            result = compiled_fn(*call_args)
            self.calls_steady += 1
            self.executions_steady += _settled_samples(_EXECUTE) - before
            return result

        # Only the calling convention is copied: ``functools.wraps`` would copy
        # ``_torchdynamo_orig_callable`` too, and Dynamo would call around the counter.
        if hasattr(compiled_fn, "_boxed_call"):
            counted._boxed_call = compiled_fn._boxed_call  # type: ignore[attr-defined]
        return counted


@dataclasses.dataclass
class _Snapshot:
    """torch_xla metric sample counts and fallback counters at one moment."""

    executions: int
    compilations: int
    to_device: int
    from_device: int
    fallbacks: dict[str, int]

    @classmethod
    def take(cls) -> _Snapshot:
        import torch_xla.debug.metrics as met

        return cls(
            executions=_settled_samples(_EXECUTE),
            compilations=_settled_samples(_COMPILE),
            to_device=_settled_samples(_TO_DEVICE),
            from_device=_settled_samples(_FROM_DEVICE),
            fallbacks={op: met.counter_value(op) or 0 for op in met.executed_fallback_ops()},
        )


def _run_mode(
    mode: str,
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    steps: int,
    warmup: int,
    shim: _CountingBackend | None = None,
) -> ModeResult:
    """Run ``warmup`` then ``steps`` synced steps of ``fn`` and read the metrics around them."""
    start = _Snapshot.take()
    for _ in range(warmup):
        result = fn(*args, **kwargs)
        _sync()
        del result
    if shim is not None:
        shim.steady = True
    steady = _Snapshot.take()
    times, at_sync = [], 0
    for _ in range(steps):
        began = time.perf_counter()
        result = fn(*args, **kwargs)  # held through the sync, or lazy work on it is dropped
        before_sync = _settled_samples(_EXECUTE)
        _sync()
        times.append(time.perf_counter() - began)
        at_sync += _settled_samples(_EXECUTE) - before_sync
        del result
    end = _Snapshot.take()
    return ModeResult(
        mode=mode,
        steps=steps,
        warmup=warmup,
        xla_graphs_per_step=(end.executions - steady.executions) / steps,
        graphs_at_sync_per_step=at_sync / steps,
        executions_warmup=steady.executions - start.executions,
        executions_steady=end.executions - steady.executions,
        compilations_warmup=steady.compilations - start.compilations,
        compilations_steady=end.compilations - steady.compilations,
        transfers_to_device_per_step=(end.to_device - steady.to_device) / steps,
        transfers_from_device_per_step=(end.from_device - steady.from_device) / steps,
        fallback_ops_per_step=_fallback_deltas(steady.fallbacks, end.fallbacks, steps),
        median_step_seconds=statistics.median(times),
    )


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


def _settled_samples(metric: str) -> int:
    """How many samples torch_xla's ``metric`` holds once the device is idle (0 before any).

    ``ExecuteTime`` is sampled when an execution's completion is processed, which can come
    after ``torch_xla.sync(wait=True)`` returns; ``xm.wait_device_ops()`` settles it, so
    counts read around a call belong to that call.
    """
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met

    xm.wait_device_ops()
    data = met.metric_data(metric)
    return int(data[0]) if data else 0


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
