"""TorchTPU's ``backend="tpu"``: the graphs its split compiler cuts and compiles, and their calls.

TorchTPU (torch_tpu 0.2.0, ``_internal/compile/``) takes each Dynamo graph through AOTAutograd;
``TpuBackend._compile_graph_module`` gets each forward and backward graph and hands it to a
``SplitCompiler`` (made by ``_backend.make_backend_compiler``), which cuts it at collectives
(``split_module``) and compiles each partition with a ``StaticCompiler``
(``StaticCompiler.__call__``: FX passes, then ``_compile``: ``fx_to_mlir`` and PJRT), and
returns a ``_SplitCompiledExecutable`` that runs the partitions in order. torch offers no hook in
any of this, and TorchTPU's own ``debug_callback`` option carries only code text and StableHLO,
no per-partition inputs, stacks or timing: so four names are wrapped, each calling its original:

* ``_backend.make_backend_compiler``: the ``StaticCompiler`` it returns is observed
  (``observe_compiler``: its ``__call__`` timed and each partition recorded, per instance), or,
  for a graph with dynamic shapes, the ``DynamicCompiler``: each bucket program it prepares;
* ``TpuBackend._compile_graph_module``: one forward or backward graph, its partitions, its time;
* ``_SplitCompiledExecutable.__call__``: the calls of each observed graph;
* without a TPU only (``stand_in()``): ``StaticCompiler._compile`` returns a runner of the
  partition on the CPU instead of lowering it (``fx_to_mlir`` needs a chip: docs/guides/torchtpu.md),
  ``mark_embedded_constants.apply`` is skipped (it moves constants to the ``tpu`` device,
  which FakeTensor propagation beside CPU inputs then refuses), and ``TpuBackend.__call__``
  traces attention in its math form (``with_math_attention``). Without a TPU TorchTPU's backend
  cannot run at all, so the stand-in changes no result that would otherwise exist: the
  program runs with eager-CPU results and every graph TorchTPU would compile is recorded. A graph
  with dynamic shapes runs as AOTAutograd gave it (TorchTPU's dynamic executable refuses CPU
  tensors), its bucket programs recorded as TorchTPU prepares them.

``torchtpu_seam.py`` holds the per-instance observation and the stand-in, which
``xlabridge.torchtpu.GraphCapture`` uses for its own capture. Checked on torch_tpu 0.2.0 with torch 2.15.0.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import os
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from xlabridge._upstream import torch_tpu as upstream_tpu
from xlabridge.diagnostics import _frames
from xlabridge.diagnostics._observe import recorder as _recorder, tally as _tally, watchdog
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe.probes import Installation, ProbeInfo, status as _status, imports
from xlabridge.diagnostics._observe.probes.dynamo_graphs import current_compile_id
from xlabridge.torchtpu._seam import (
    Partition,
    keep_constants,
    observe_compiler,
    op_name,
    skip_tpu_metadata_query,
    stand_in,
    with_math_attention,
)

INFO = ProbeInfo(
    name="torchtpu.compiler",
    surface="torch_tpu._internal.compile: _backend.make_backend_compiler, TpuBackend._compile_graph_module, "
    "compiler.StaticCompiler.__call__ and dynamic_compiler.DynamicCompiler.__call__ (per instance; the "
    "latter's executable's _bucket_specs), split_compiler._SplitCompiledExecutable.__call__; "
    "without a TPU also StaticCompiler._compile, fx_passes.mark_embedded_constants.apply, TpuBackend.__call__",
    checked="torch_tpu 0.2.0 (torch 2.15.0)",
    patch=True,
    why="TorchTPU has no hook between AOTAutograd and its lowering, and its debug_callback gives no "
    "partition inputs, stacks or times; these are the calls that hand each forward/backward graph and "
    "each partition to its compiler and that run the result",
    sees="TorchTPU's forward and backward graphs, the partitions its split compiler makes at collectives, "
    "their compile time, their calls, and their TPU view",
)

COMPILER = "torchtpu"
"""``BridgeGraph.compiler`` of the graphs this probe reports."""

FULLY_MEASURED_CALLS = 3
"""Calls of each graph reported one by one (``graph_called``); later ones are summed (the recorders'
running sums, cumulative ``graph_calls`` events), as for torch_xla's graphs."""


# ---------------------------------------------------------------- the diagnostics

_NUMBERS = itertools.count()
"""Graph numbers of this process (torch_xla's bridge numbers its own: the two never share a process,
torch_xla needing torch 2.9 and torch_tpu 2.11 and later)."""
_COMPILING = threading.local()
_MARK = "_xlabridge_graph"
"""The attribute that ties an executable TorchTPU returned to its observed graph."""
_PENDING: list[_Graph] = []
"""Graphs whose partitions' ``xla_graph`` events are still to be written (at the end of observation,
after their StableHLO is lowered where HLO is captured)."""


class _Graph:
    """One forward or backward graph through TorchTPU's backend, its partitions and calls."""

    def __init__(self, role: str, fx_ops: int, devices: list[str]) -> None:
        self.number = next(_NUMBERS)
        self.compile_id = current_compile_id()
        self.role, self.fx_ops, self.devices = role, fx_ops, devices
        self.start = time.monotonic()
        self.end = self.start
        self.partitions: list[Partition] = []
        self.recorders = _recorder.recorders()
        self.calls = 0
        self.key = ("graph-calls", self.number)

    def programs(self) -> list[Partition]:
        """The partitions one call runs, in order: for a graph with dynamic shapes, one bucket's."""
        return [p for p in self.partitions if p.bucket == 0]

    def compiled(self) -> None:
        self.end = time.monotonic()
        stamp = _recorder.stamp(self.start)
        buckets = list(dict.fromkeys(p.bounds for p in self.partitions if p.bounds))  # each once, in order
        _recorder.emit(ev.BridgeGraph(**stamp, graph=self.number, compile_id=self.compile_id, role=self.role,
                                      fx_ops=self.fx_ops, input_devices=self.devices, compiler=COMPILER,
                                      stand_in=any(p.stand_in for p in self.partitions), buckets=buckets))
        segments = []
        for partition in self.programs():
            ops = tuple(partition.ops())
            if partition.collectives:
                node = partition.collectives[0]
                segments.append(ev.SegmentRecord(ev.SegmentKind.COLLECTIVE, ops, ev.CpuNode(
                    node.name, op_name(node), (), tuple(_frames.from_stack_trace(node.meta.get("stack_trace"))))))
            else:
                segments.append(ev.SegmentRecord(ev.SegmentKind.XLA, ops))
        _recorder.emit(ev.Partitioned(**_recorder.stamp(self.end), graph=self.number, start=self.start,
                                      segments=segments))
        compiled = [p for p in self.partitions if not p.stand_in]
        if compiled:
            _recorder.emit(ev.XlaCompile(**_recorder.stamp(self.end), graph=self.number,
                                         phase=ev.XlaPhase.EXTRACTION, count=len(compiled),
                                         seconds=sum(p.seconds for p in compiled)))
        _PENDING.append(self)

    def call(self, original: Callable[..., Any], executable: Any, args: tuple, kwargs: dict) -> Any:
        self.calls += 1
        start = time.monotonic()
        result = original(executable, *args, **kwargs)
        end = time.monotonic()
        _recorder.progress(end)
        if self.calls <= FULLY_MEASURED_CALLS:
            _recorder.safely(INFO.name, "recording a call", self._emit_call, start, end)
        else:
            _recorder.tally(self.key, self._sums, start, end - start)
        return result

    def _sums(self) -> _tally.GraphCallSums:
        return _tally.GraphCallSums(self.number)

    def _emit_call(self, start: float, end: float) -> None:
        _recorder.emit(ev.GraphCalled(**_recorder.stamp(end), graph=self.number, call=self.calls, start=start,
                                      executions=len(self.programs()), transfers_to_device=0,
                                      transfers_from_device=0))



def _on_partition(record: Callable[[], Partition]) -> None:
    stack = getattr(_COMPILING, "graphs", None)
    if stack:
        partition = _recorder.safely(INFO.name, "recording a TorchTPU partition", record)
        if partition is not None:
            stack[-1].partitions.append(partition)


def _role(is_fwd: bool) -> str:
    return "forward" if is_fwd else "backward"


def _wrap_make_backend_compiler(original: Any) -> Any:
    def make_backend_compiler(*args: Any, **kwargs: Any) -> Any:
        made = original(*args, **kwargs)
        if _recorder.active():
            observed = _recorder.safely(INFO.name, "observing TorchTPU's compiler", observe_compiler, made,
                                        _on_partition, run_on_cpu=stand_in())
            if observed is False:
                _recorder.warn(INFO.name, "observing TorchTPU's compiler",
                               f"a compiler it does not know ({type(getattr(made, 'base_compiler', made)).__name__}): "
                               "its partitions are not recorded")
        return made

    return make_backend_compiler


def _wrap_compile_graph_module(original: Any) -> Any:
    parameters = list(inspect.signature(original).parameters)

    def _compile_graph_module(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _recorder.active():
            return original(self, *args, **kwargs)
        bound = dict(zip(parameters[1:], args)) | kwargs
        gm, inputs = bound.get("graph_module"), bound.get("example_inputs") or ()
        devices = sorted({x.device.type for x in inputs if isinstance(x, torch.Tensor)})
        fx_ops = sum(n.op == "call_function" for n in gm.graph.nodes) if isinstance(gm, torch.fx.GraphModule) else 0
        graph = _Graph(_role(bool(bound.get("is_fwd", True))), fx_ops, devices)
        stack = _COMPILING.__dict__.setdefault("graphs", [])
        stack.append(graph)
        try:
            executable = original(self, *args, **kwargs)
        finally:
            stack.pop()
        _recorder.safely(INFO.name, "recording a TorchTPU graph", graph.compiled)
        # on the executable itself (it defines equality, so it is no dictionary key); its __reduce__
        # pickles its own fields only, so AOTAutograd's cache never stores the mark
        with contextlib.suppress(AttributeError, TypeError):
            executable.__dict__[_MARK] = graph
        return executable

    return _compile_graph_module


def _wrap_executable_call(original: Any) -> Any:
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        graph = self.__dict__.get(_MARK) if _recorder.active() else None
        if graph is None:
            return original(self, *args, **kwargs)
        return graph.call(original, self, args, kwargs)

    return __call__


def _activity(frame: Any) -> ev.Activity | None:
    """A stalled thread inside a call of a TorchTPU graph: which one."""
    graph = frame.f_locals.get("self")
    return ev.Activity(ev.ActivityKind.TORCHTPU_CALL, f"call {graph.calls}", graph.number) \
        if isinstance(graph, _Graph) else None


watchdog.recognize((_Graph.call.__code__,), _activity)


def write_graphs(recorder: _recorder.Recorder, lower: Callable[[Partition], str] | None) -> None:
    """Give ``recorder`` the ``xla_graph`` event of every partition it observed, with its StableHLO
    file where it captures HLO (``lower``: a partition to StableHLO text). Called when it stops,
    after its observed time: lowering is the diagnostics' own work."""
    for graph in list(_PENDING):
        if recorder not in graph.recorders:
            continue
        for segment, partition in enumerate(graph.partitions):
            hlo_file, error = None, ""
            if recorder.capture_hlo and lower is not None:
                try:
                    text = lower(partition)
                    path, hlo_file = recorder.hlo_path(f"{os.getpid()}-tpu{graph.number}-{segment}.stablehlo.mlir")
                    path.write_text(text, encoding="utf-8")
                except Exception as failure:  # noqa: BLE001 - torchax lacks an op: that graph's TPU row says so
                    error = f"lowering to StableHLO failed: {type(failure).__name__}: {failure}"[:2000]
            frames = _frames.from_stack_trace(next(
                (n.meta.get("stack_trace") for n in partition.graph_module.graph.nodes if n.meta.get("stack_trace")),
                None))
            recorder.add(ev.XlaGraphSeen(
                **_recorder.stamp(graph.end), graph=graph.number, segment=segment, hash=partition.digest(),
                origin=ev.GraphOrigin.DYNAMO, hlo_file=hlo_file, hlo_format=ev.HloFormat.STABLEHLO,
                hlo_error=error, frames=frames,
            ))
        graph.recorders.remove(recorder)
        if not graph.recorders:
            _PENDING.remove(graph)


def install(installation: Installation) -> None:
    def patch(torch_tpu: ModuleType) -> None:
        try:
            _backend, executable = upstream_tpu.compile_backend(), upstream_tpu.split_executable()
            mark_embedded_constants = upstream_tpu.embedded_constants_pass()
            compilers = (upstream_tpu.static_compiler(), upstream_tpu.dynamic_compiler())

            installation.replace(_backend, "make_backend_compiler", _wrap_make_backend_compiler)
            installation.replace(_backend.TpuBackend, "_compile_graph_module", _wrap_compile_graph_module)
            installation.replace(executable, "__call__", _wrap_executable_call)
            if stand_in():
                skip_tpu_metadata_query()  # before the program's first backward()
                installation.replace(mark_embedded_constants, "apply", lambda _original: keep_constants)
                installation.replace(_backend.TpuBackend, "__call__", with_math_attention)
            # the seam observe_compiler relies on: the compilers' __call__ with these parameters
            wanted = {"graph_module", "example_inputs", "is_fwd", "module_name"}
            for cls in compilers:
                missing = wanted - set(inspect.signature(cls.__call__).parameters)
                if missing:
                    _status.unavailable(INFO, f"{cls.__name__}.__call__ has no parameter(s) {sorted(missing)}")
        except (ImportError, AttributeError, ValueError) as error:  # a torch_tpu without these names
            _status.unavailable(INFO, f"{type(error).__name__}: {error}")

    imports.after_import(installation, "torch_tpu", patch)
