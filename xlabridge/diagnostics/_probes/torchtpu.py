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
  partition on the CPU instead of lowering it (``fx_to_mlir`` needs a chip: docs/torchtpu.md),
  ``mark_embedded_constants.apply`` is skipped (it moves constants to the ``tpu`` device,
  which FakeTensor propagation beside CPU inputs then refuses), and ``TpuBackend.__call__``
  traces attention in its math form (``_with_math_attention``). Without a TPU TorchTPU's backend
  cannot run at all, so the stand-in changes no result that would otherwise exist: the
  program runs with eager-CPU results and every graph TorchTPU would compile is recorded. A graph
  with dynamic shapes runs as AOTAutograd gave it (TorchTPU's dynamic executable refuses CPU
  tensors), its bucket programs recorded as TorchTPU prepares them.

``xlabridge.torchtpu.GraphCapture`` uses ``observe_compiler`` and ``stand_in_patches`` for its own
capture. Checked on torch_tpu 0.2.0 with torch 2.15.0.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import hashlib
import inspect
import itertools
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any

import torch

from xlabridge import _env
from xlabridge.diagnostics import _frames, _recorder
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._probes import Installation, ProbeInfo, _status, imports
from xlabridge.diagnostics._probes.dynamo_graphs import current_compile_id

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
"""Calls of each graph reported one by one (``graph_called``); later ones are summed (``graph_calls``)."""

TIMELINE_CALLS = 2000
"""Later calls of one graph kept for the timeline, as for torch_xla's graphs."""


InputSpec = tuple[tuple[int, ...], torch.dtype] | int
"""A program input: a tensor's shape and dtype, or an int argument's value (``input_specs``)."""


@dataclasses.dataclass
class Partition:
    """One program TorchTPU's split compiler hands to its ``StaticCompiler``: a partition of a
    forward or backward graph, as ``fx_to_mlir`` receives it."""

    kind: str
    """``forward`` or ``backward``."""
    module_name: str | None
    """TorchTPU's MLIR module name (``graph0_split0_fwd_submod_0``)."""
    graph_module: torch.fx.GraphModule
    input_specs: list[InputSpec]
    collectives: list[torch.fx.Node]
    """Its collective nodes (the split compiler gives each collective a partition of its own)."""
    seconds: float
    """Time in ``StaticCompiler.__call__``: FX passes, lowering and compile (with the stand-in: passes only)."""
    stand_in: bool
    """Run on CPU in place of the TPU program (no TPU here)."""
    bucket: int = 0
    """A graph with dynamic shapes: which of its bucket programs (each compiled at its bucket's bound)."""
    bounds: str = ""
    """A graph with dynamic shapes: the bucket's bounds of its symbols (``s33 in [2, 128]``)."""

    def ops(self) -> list[str]:
        return [_op_name(node) for node in self.graph_module.graph.nodes if node.op == "call_function"]

    def digest(self) -> str:
        """A content hash: the graph's code and its inputs' shapes and dtypes."""
        text = self.graph_module.code + repr([s if isinstance(s, int) else (list(s[0]), str(s[1]))
                                              for s in self.input_specs])
        return hashlib.sha256(text.encode()).hexdigest()[:32]


def _op_name(node: torch.fx.Node) -> str:
    target = node.target
    name = getattr(target, "name", None)
    return str(name() if callable(name) else getattr(target, "__name__", target))


def input_specs(inputs: Sequence[Any], *, ints: bool = False) -> list[InputSpec]:
    """Each input's shape and dtype; ``NotImplementedError`` for a symbolic size (dynamic shapes).

    ``ints``: a Python int input stays an int (a dynamic graph's bucket program takes its symbols'
    values as arguments, fixed at the bucket's bound)."""
    specs: list[InputSpec] = []
    for position, value in enumerate(inputs):
        if ints and type(value) is int:
            specs.append(value)
            continue
        if not isinstance(value, torch.Tensor):
            raise NotImplementedError(
                f"input {position} is a {type(value).__name__}, not a tensor: symbolic shapes are not captured "
                "(TorchTPU compiles with dynamic=False by default)")
        specs.append((tuple(int(size) for size in value.shape), value.dtype))
    return specs


@functools.cache
def tpu_present() -> bool:
    """Whether torch_tpu finds a TPU on this machine (its PCI probe; no device is started)."""
    from torch_tpu._internal.utils import hardware

    return bool(hardware.get_tpu_device_count())


def skip_tpu_metadata_query() -> bool:
    """Where torch_tpu finds no TPU, tell libtpu not to query the GCE metadata server (``_env``).

    Returns whether it was set here. Off a TPU VM, libtpu's PJRT client, which TorchTPU starts
    at the first ``backward()`` of the process (the autograd engine asks its device guard for a
    device count), retries that server for minutes before giving up (docs/torchtpu.md).
    """
    if _env.get(_env.TPU_SKIP_MDS_QUERY) is not None or tpu_present():
        return False
    _env.put(_env.TPU_SKIP_MDS_QUERY, "1")
    return True


def stand_in() -> bool:
    """Whether TorchTPU's programs run on CPU in their place while observed: no TPU here."""
    return not tpu_present()


# ---------------------------------------------------------------- one compiler instance

Listener = Callable[[Callable[[], Partition]], None]
"""Told of each partition compiled, with a function that makes its record (which may raise: a
symbolic input size), so that each listener decides what a failure means to it."""


def observe_compiler(split: Any, listener: Listener, *, run_on_cpu: bool) -> bool:
    """Have the base compiler of ``split`` (a ``SplitCompiler``) tell ``listener`` each partition.

    Per instance, so a backward graph compiled later (at the first ``backward()``) is observed
    too. A ``StaticCompiler`` tells each partition it compiles; ``run_on_cpu``: its ``_compile``
    runs the partition on CPU instead of lowering it. A ``DynamicCompiler`` (a graph with dynamic
    shapes) tells each bucket program it prepares (``_observed_dynamic_call``). Returns False for
    another compiler.
    """
    from torch_tpu._internal.compile import compiler
    from torch_tpu._internal.compile.dynamic import dynamic_compiler

    base = getattr(split, "base_compiler", None)
    dynamic = isinstance(base, dynamic_compiler.DynamicCompiler)
    if not dynamic and not isinstance(base, compiler.StaticCompiler):
        return False
    listeners: list[Listener] = base.__dict__.get("_xlabridge_listeners", [])
    if not listeners:
        base._xlabridge_listeners = listeners
        base._xlabridge_on_cpu = run_on_cpu
        # the split compiler calls it by attribute: the instance's wins
        base.__call__ = (_observed_dynamic_call if dynamic else _observed_static_call)(base, base.__call__)
        if run_on_cpu and not dynamic:
            base._compile = _run_on_cpu
    elif run_on_cpu and not base._xlabridge_on_cpu:
        base._xlabridge_on_cpu = True
        if not dynamic:
            base._compile = _run_on_cpu
    listeners.append(listener)
    return True


def _observed_static_call(base: Any, original_call: Any) -> Callable[..., Any]:
    """``StaticCompiler.__call__`` of ``base``, timed, telling its listeners the partition."""
    signature = inspect.signature(original_call)

    def __call__(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        result = original_call(*args, **kwargs)
        seconds = time.perf_counter() - started
        on_cpu = base._xlabridge_on_cpu

        @functools.cache
        def record() -> Partition:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            gm, inputs = bound.arguments["graph_module"], bound.arguments["example_inputs"]
            return Partition(
                "forward" if bound.arguments["is_fwd"] else "backward", bound.arguments["module_name"], gm,
                input_specs(inputs), [n for n in gm.graph.nodes if _is_collective(n)], seconds, on_cpu,
            )

        for each in list(base._xlabridge_listeners):
            each(record)
        return result

    return __call__


def _observed_dynamic_call(base: Any, original_call: Any) -> Callable[..., Any]:
    """``DynamicCompiler.__call__`` of ``base``: its listeners are told one partition per bucket.

    TorchTPU compiles a graph with dynamic shapes once per bucket of its symbols' values
    (``num_dynamic_buckets``, 1 by default, at multiples of ``bucket_size``), each program at the
    bucket's upper bound, its dynamic inputs padded in the graph (``tpu._pad_real_to_static``).
    The executable it returns holds each bucket's rewritten graph and bounded inputs
    (``_bucket_specs``): what its ``StaticCompiler`` compiles at the graph's first call on a TPU,
    recorded here at once. With ``run_on_cpu`` the graph as AOTAutograd gave it (copied before
    TorchTPU rewrites it) runs on the CPU in place of that executable, which refuses CPU tensors.
    """
    signature = inspect.signature(original_call)

    def __call__(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:  # a call this seam does not know (install() reports the probe unavailable)
            return original_call(*args, **kwargs)
        bound.apply_defaults()
        on_cpu = base._xlabridge_on_cpu
        runnable = copy.deepcopy(bound.arguments["graph_module"]) if on_cpu else None
        started = time.perf_counter()
        result = original_call(*args, **kwargs)
        seconds = time.perf_counter() - started
        kind = "forward" if bound.arguments["is_fwd"] else "backward"
        for number, spec in enumerate(getattr(result, "_bucket_specs", None) or ()):

            @functools.cache
            def record(spec: Any = spec, number: int = number) -> Partition:
                gm = spec.graph_module
                return Partition(
                    kind, bound.arguments["module_name"], gm, input_specs(spec.bounded_model_inputs, ints=True),
                    [n for n in gm.graph.nodes if _is_collective(n)], seconds if number == 0 else 0.0, on_cpu,
                    bucket=number, bounds=_bounds_text(spec.symbol_bounds),
                )

            for each in list(base._xlabridge_listeners):
                each(record)
        return _run_on_cpu(runnable, ()) if on_cpu else result

    return __call__


def _bounds_text(bounds: Any) -> str:
    """A bucket's ``SymbolBounds`` as ``s33 in [2, 128]``."""
    ranges = bounds.symbol_ranges
    ranges = ranges() if callable(ranges) else ranges
    return ", ".join(f"{symbol} in [{value.lower}, {value.upper}]"
                     for symbol, value in sorted(ranges.items(), key=lambda item: str(item[0])))


def _is_collective(node: torch.fx.Node) -> bool:
    from torch_tpu._internal.distributed import collective_ops

    return node.op == "call_function" and collective_ops.is_collective_op(
        getattr(node.target, "overloadpacket", node.target))


def _run_on_cpu(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
    """``StaticCompiler._compile``'s stand-in: the partition, run eagerly on the CPU."""

    def run(*inputs: Any) -> Any:
        if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
            inputs = tuple(inputs[0])
        return graph_module(*inputs)

    return run


def _with_math_attention(original: Any) -> Any:
    """``TpuBackend.__call__`` with the stand-in: attention traced in its math form.

    On CPU, AOTAutograd would trace ``scaled_dot_product_attention`` to the CPU flash kernel
    (``_scaled_dot_product_flash_attention_for_cpu`` and its backward), an op no TPU lowering
    knows; on a TPU, TorchTPU picks its own attention kernel.
    """

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([SDPBackend.MATH]):
            return original(self, *args, **kwargs)

    return __call__


def _keep_constants(gm_or_graph: Any) -> None:
    """``mark_embedded_constants.apply`` with the stand-in: the constants stay CPU tensors."""


@contextlib.contextmanager
def stand_in_patches() -> Iterator[None]:
    """For the duration: ``mark_embedded_constants`` skipped (see the module's docstring)."""
    from torch_tpu._internal.compile.fx_passes import mark_embedded_constants

    original = mark_embedded_constants.apply
    mark_embedded_constants.apply = _keep_constants
    try:
        yield
    finally:
        mark_embedded_constants.apply = original


# ---------------------------------------------------------------- the diagnostics

_NUMBERS = itertools.count()
"""Graph numbers of this process (torch_xla's bridge numbers its own: the two never share a process,
torch_xla needing torch 2.9 and torch_tpu 2.11 and later)."""
_COMPILING = threading.local()
_MARK = "_xlabridge_graph"
"""The attribute that ties an executable TorchTPU returned to its observed graph."""
_OBSERVED: weakref.WeakSet[_Graph] = weakref.WeakSet()
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
        self.pending_calls, self.pending_seconds, self.pending_spans = 0, 0.0, []

    def programs(self) -> list[Partition]:
        """The partitions one call runs, in order: for a graph with dynamic shapes, one bucket's."""
        return [p for p in self.partitions if p.bucket == 0]

    def compiled(self) -> None:
        self.end = time.monotonic()
        stamp = _recorder.stamp(self.start)
        buckets = [p.bounds for p in self.partitions if p.bounds and p.module_name == self.partitions[0].module_name]
        _recorder.emit(ev.BridgeGraph(**stamp, graph=self.number, compile_id=self.compile_id, role=self.role,
                                      fx_ops=self.fx_ops, input_devices=self.devices, compiler=COMPILER,
                                      stand_in=any(p.stand_in for p in self.partitions), buckets=buckets))
        segments = []
        for partition in self.programs():
            ops = tuple(partition.ops())
            if partition.collectives:
                node = partition.collectives[0]
                segments.append(ev.SegmentRecord(ev.SegmentKind.COLLECTIVE, ops, ev.CpuNode(
                    node.name, _op_name(node), (), tuple(_frames.from_stack_trace(node.meta.get("stack_trace"))))))
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
        if self.calls <= FULLY_MEASURED_CALLS:
            _recorder.safely(INFO.name, "recording a call", self._emit_call, start, end)
        else:
            self.pending_calls += 1
            self.pending_seconds += end - start
            if len(self.pending_spans) < TIMELINE_CALLS:
                self.pending_spans.append([start, end - start])
        return result

    def _emit_call(self, start: float, end: float) -> None:
        _recorder.emit(ev.GraphCalled(**_recorder.stamp(end), graph=self.number, call=self.calls, start=start,
                                      executions=len(self.programs()), transfers_to_device=0,
                                      transfers_from_device=0))

    def flush(self) -> None:
        if self.pending_calls:
            _recorder.emit(ev.GraphCalls(**_recorder.stamp(), graph=self.number, calls=self.pending_calls,
                                         seconds=self.pending_seconds, spans=self.pending_spans))
            self.pending_calls, self.pending_seconds, self.pending_spans = 0, 0.0, []


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
        _OBSERVED.add(graph)
        return executable

    return _compile_graph_module


def _wrap_executable_call(original: Any) -> Any:
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        graph = self.__dict__.get(_MARK) if _recorder.active() else None
        if graph is None:
            return original(self, *args, **kwargs)
        return graph.call(original, self, args, kwargs)

    return __call__


def flush() -> None:
    """Write the summed later calls of every graph (when an observation ends)."""
    for graph in list(_OBSERVED):
        _recorder.safely(INFO.name, "summing calls", graph.flush)


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
            from torch_tpu._internal.compile import _backend, compiler, split_compiler
            from torch_tpu._internal.compile.dynamic import dynamic_compiler
            from torch_tpu._internal.compile.fx_passes import mark_embedded_constants

            installation.replace(_backend, "make_backend_compiler", _wrap_make_backend_compiler)
            installation.replace(_backend.TpuBackend, "_compile_graph_module", _wrap_compile_graph_module)
            installation.replace(split_compiler._SplitCompiledExecutable, "__call__", _wrap_executable_call)
            if stand_in():
                skip_tpu_metadata_query()  # before the program's first backward()
                installation.replace(mark_embedded_constants, "apply", lambda _original: _keep_constants)
                installation.replace(_backend.TpuBackend, "__call__", _with_math_attention)
            # the seam observe_compiler relies on: the compilers' __call__ with these parameters
            wanted = {"graph_module", "example_inputs", "is_fwd", "module_name"}
            for cls in (compiler.StaticCompiler, dynamic_compiler.DynamicCompiler):
                missing = wanted - set(inspect.signature(cls.__call__).parameters)
                if missing:
                    _status.unavailable(INFO, f"{cls.__name__}.__call__ has no parameter(s) {sorted(missing)}")
        except (ImportError, AttributeError, ValueError) as error:  # a torch_tpu without these names
            _status.unavailable(INFO, f"{type(error).__name__}: {error}")

    imports.after_import(installation, "torch_tpu", patch)
