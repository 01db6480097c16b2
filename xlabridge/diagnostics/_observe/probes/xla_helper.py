"""The FX graphs torch_xla's bridge compiles, and what each call of them costs.

``openxla`` (through AOTAutograd's forward and backward compilers), ``openxla_eval`` and so
``xlabridge`` hand every graph to ``torch._dynamo.backends.torchxla.xla_backend_helper``, which
returns the callable that runs it: at its first call the bridge extracts the XLA graphs, later
calls run them. torch has no hook there, so the helper is wrapped: the wrapper calls the
original and wraps the callable it returns, keeping its calling convention (boxed or not).

Each call of that callable is timed. The first ``FULLY_MEASURED_CALLS`` calls also read
torch_xla's metrics before and after (executions, transfers, bytes, compilations); reading them
costs more than a small graph's call, so later calls read only the compilation counter and
are summed (the recorders' running sums: cumulative ``graph_calls`` events, rewritten beside the
log while the process runs and written into it when observation ends). The first call is
observed with the bridge probe's ``window`` (the extraction). Graphs keep their wrapper after
observation ends; it then only checks that nobody observes and calls through.
Checked on torch 2.8.0 and 2.9.0 with their torch_xla (``xla_backend_helper(model,
fake_tensor_inputs, boxed=False)``, the same signature in torch 2.15.0, which has no torch_xla).
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import torch

from xlabridge._upstream import torch as upstream_torch
from xlabridge.diagnostics._observe import recorder as _recorder, tally as _tally, watchdog
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe.probes import Installation, ProbeInfo, xla_bridge, xla_metrics
from xlabridge.diagnostics._observe.probes.dynamo_graphs import current_compile_id

INFO = ProbeInfo(
    name="xla.helper",
    surface="torch._dynamo.backends.torchxla.xla_backend_helper",
    checked="torch 2.8.0, 2.9.0",
    patch=True,
    why="the one function through which openxla, openxla_eval and xlabridge hand an FX graph to "
    "torch_xla's bridge and get back the callable that runs it; torch has no hook there",
    sees="the FX graphs compiled for XLA: their calls, executions, transfers and seconds",
)

FULLY_MEASURED_CALLS = 3

_NUMBERS = itertools.count()


def _role(model: Any) -> str:
    graph = getattr(model, "graph", None)
    if graph is not None and any(n.op == "placeholder" and n.name.startswith("tangents") for n in graph.nodes):
        return "backward"
    return "forward"


class ObservedGraph:
    """One compiled FX graph of the bridge, and its calls."""

    def __init__(self, compiled: Any, model: Any, example_inputs: Any) -> None:
        self.compiled = compiled
        self.number = next(_NUMBERS)
        self.calls = 0
        self.clock = xla_bridge.CpuClock()
        self.key = ("graph-calls", self.number)
        fx_ops = len(xla_bridge.graph_ops(model)) if isinstance(model, torch.fx.GraphModule) else 0
        devices = sorted({x.device.type for x in example_inputs or () if isinstance(x, torch.Tensor)})
        _recorder.emit(ev.BridgeGraph(**_recorder.stamp(), graph=self.number, compile_id=current_compile_id(),
                                      role=_role(model), fx_ops=fx_ops, input_devices=devices))

    def callable(self) -> Any:
        compiled, observed = self.compiled, self

        def xla_graph_call(*args: Any, **kwargs: Any) -> Any:
            if not _recorder.active():
                return compiled(*args, **kwargs)
            return observed.call(args, kwargs)

        # only the calling convention is copied: ``functools.wraps`` would copy attributes
        # Dynamo reads to call around the wrapper
        if getattr(compiled, "_boxed_call", False):
            xla_graph_call._boxed_call = True  # type: ignore[attr-defined]
        return xla_graph_call

    def call(self, args: tuple, kwargs: dict) -> Any:
        self.calls += 1
        if self.calls == 1:
            return self._first_call(args, kwargs)
        if self.calls <= FULLY_MEASURED_CALLS:
            return self._measured_call(args, kwargs)
        return self._timed_call(args, kwargs)

    def _first_call(self, args: tuple, kwargs: dict) -> Any:
        start, before, cpu = time.monotonic(), xla_metrics.Snapshot.take(), self.clock.seconds
        capture = [r for r in _recorder.recorders() if r.capture_hlo]
        extraction = xla_bridge.Extraction(graph=self.number, clock=self.clock, capture=capture)
        with xla_bridge.window(extraction):
            result = self.compiled(*args, **kwargs)
        end, after = time.monotonic(), xla_metrics.Snapshot.take()
        _recorder.progress(end)
        _recorder.safely(INFO.name, "recording a first call", self._record_first, extraction, start, end,
                         before, after, cpu)
        return result

    def _record_first(self, extraction: xla_bridge.Extraction, start: float, end: float,
                      before: xla_metrics.Snapshot, after: xla_metrics.Snapshot, cpu: float) -> None:
        stamp = _recorder.stamp(end)
        for event in extraction.events(stamp):
            _recorder.emit(event)
        if extraction.end is not None and extraction.after is not None:
            start, before = extraction.end, extraction.after
        self._emit_call(1, start, end, before, after, self.clock.seconds - cpu)

    def _measured_call(self, args: tuple, kwargs: dict) -> Any:
        start, before, cpu = time.monotonic(), xla_metrics.Snapshot.take(), self.clock.seconds
        result = self.compiled(*args, **kwargs)
        end, after = time.monotonic(), xla_metrics.Snapshot.take()
        _recorder.progress(end)
        _recorder.safely(INFO.name, "recording a call", self._emit_call, self.calls, start, end, before, after,
                         self.clock.seconds - cpu)
        return result

    def _emit_call(self, call: int, start: float, end: float, before: xla_metrics.Snapshot,
                   after: xla_metrics.Snapshot, cpu_seconds: float) -> None:
        delta = after.since(before)
        stamp = _recorder.stamp(end)
        if delta.compiles:
            _recorder.emit(ev.XlaCompile(**stamp, graph=self.number, phase=ev.XlaPhase.CALL,
                                         count=delta.compiles, seconds=delta.compile_seconds))
        _recorder.emit(ev.GraphCalled(
            **stamp, graph=self.number, call=call, start=start, executions=delta.executions,
            transfers_to_device=delta.to_device, transfers_from_device=delta.from_device,
            bytes_to_device=delta.bytes_to_device, bytes_from_device=delta.bytes_from_device,
            cpu_fallback_seconds=cpu_seconds, transfer_seconds=delta.transfer_seconds,
        ))

    def _timed_call(self, args: tuple, kwargs: dict) -> Any:
        compiles, cpu, wall = xla_metrics.uncached_compiles(), self.clock.seconds, time.time()
        start = time.monotonic()
        result = self.compiled(*args, **kwargs)
        end = time.monotonic()
        _recorder.progress(end)
        _recorder.tally(self.key, self._sums, start, end - start, self.clock.seconds - cpu)
        compiled = xla_metrics.uncached_compiles() - compiles
        if compiled > 0:
            _recorder.safely(INFO.name, "recording a recompilation", self._emit_compiles, compiled, wall)
        return result

    def _emit_compiles(self, count: int, wall: float) -> None:
        _recorder.emit(ev.XlaCompile(**_recorder.stamp(), graph=self.number, phase=ev.XlaPhase.CALL,
                                     count=count, seconds=xla_metrics.compile_seconds_since(wall)))

    def _sums(self) -> _tally.GraphCallSums:
        return _tally.GraphCallSums(self.number)


def _activity(frame: Any) -> ev.Activity | None:
    """A stalled thread inside an observed graph's call: which graph, which call."""
    graph = frame.f_locals.get("self")
    if not isinstance(graph, ObservedGraph):
        return None
    if frame.f_code is ObservedGraph._first_call.__code__:
        return ev.Activity(ev.ActivityKind.EXTRACTION, "first call", graph.number)
    return ev.Activity(ev.ActivityKind.GRAPH_CALL, f"call {graph.calls}", graph.number)


watchdog.recognize((ObservedGraph._first_call.__code__, ObservedGraph._measured_call.__code__,
                    ObservedGraph._timed_call.__code__), _activity)


def _wrap_helper(original: Any) -> Any:
    def xla_backend_helper(*args: Any, **kwargs: Any) -> Any:
        compiled = original(*args, **kwargs)
        if not _recorder.active():
            return compiled
        model = args[0] if args else kwargs.get("model")
        example_inputs = args[1] if len(args) > 1 else kwargs.get("fake_tensor_inputs")
        observed = _recorder.safely(INFO.name, "observing an XLA graph", ObservedGraph, compiled, model,
                                    example_inputs)
        return compiled if observed is None else observed.callable()

    return xla_backend_helper


def install(installation: Installation) -> None:
    installation.replace(upstream_torch.torchxla_backends(), "xla_backend_helper", _wrap_helper)
