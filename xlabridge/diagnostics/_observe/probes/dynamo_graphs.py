"""The FX graphs Dynamo hands to a backend, and the graph break that ends each.

What ``torch._dynamo.explain`` counts is what its backend receives: each graph, and the
``compile_subgraph_reason`` Dynamo attaches to it (``graph_break``, ``reason``, ``user_stack``).
A backend therefore sees it all, and the ``xlabridge`` backend reports its graphs itself
through ``xlabridge.diagnostics._observe.hooks.record_graph`` (``record`` here).

For graphs compiled by other backends (``openxla``...), ``OutputGraph.call_user_compiler`` is
wrapped: it is the call that hands a graph to whatever backend was chosen. This stays a patch
because nothing else gives the fact: the structured trace (``torch._logging``) carries the same
graphs and break reasons, but a handler on it makes torch build every payload of every event
(graph dumps, tensor descriptions, inductor configs: work on every compilation that observing
must not add); the ``graph_breaks`` log channel can only be turned on with torch's own handlers,
which then print to the user's stderr; compilation metrics carry no break location. The
wrapper calls the original and records nothing for a graph its backend reported itself.
Checked on torch 2.8.0, 2.9.0 and 2.15.0 (``call_user_compiler(self, gm, example_inputs)``).

``torch.compile`` of a DDP model (``torch._dynamo.config.optimize_ddp`` on) hands each graph to
DDPOptimizer's ``compile_fn`` instead of the user's backend: DDPOptimizer cuts the graph into buckets
of parameters at DDP's bucket size and hands each bucket's submodule to the backend itself. The
backend is named through it (the one it wraps, as the user named it), and its buckets, which it keeps
on itself after the call, are recorded as the graph's split (``graph_split``).

Where a recorder wants the TPU view (``capture_hlo``), the wrapper also keeps each graph (a copy of
its FX graph: inductor's passes rewrite the one it is handed) and its inputs' metadata (shapes,
dtypes, ``requires_grad``, which are parameters; no data) with the grad mode of the call, for
``fx_programs`` to lower after the run, whatever the backend.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from typing import Any

import torch

from xlabridge._upstream import torch as upstream_torch
from xlabridge.diagnostics import _frames
from xlabridge.diagnostics._observe import recorder as _recorder
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe.probes import Installation, ProbeInfo, compiled_calls, dynamo_compiles

INFO = ProbeInfo(
    name="dynamo.graphs",
    surface="graphs reported by the xlabridge backend; "
    "torch._dynamo.output_graph.OutputGraph.call_user_compiler (other backends); the buckets "
    "torch._dynamo.backends.distributed.DDPOptimizer keeps after it splits a graph",
    checked="torch 2.8.0, 2.9.0, 2.15.0",
    patch=True,
    why="only a backend receives the FX graph and its compile_subgraph_reason (what explain reads); "
    "for backends other than xlabridge the call that hands them over is wrapped (the structured "
    "trace costs +18% on a first call, the graph_breaks channel prints to the user's stderr)",
    sees="Dynamo's FX graphs and graph breaks from backends other than xlabridge",
)

_SELF_REPORTED: set[str] = set()

MAX_KEPT = 200
"""Graphs kept for the TPU view per observation; a run that recompiles past it keeps the first ones."""


@dataclasses.dataclass
class Kept:
    """A Dynamo graph kept during the run for its TPU view after it (``fx_programs``)."""

    compile_id: str
    backend: str
    root: torch.fx.GraphModule
    graph: torch.fx.Graph
    """A copy of the graph (its nodes' meta shared) on the module it belongs to: inductor's pre-grad
    passes rewrite the graph they are handed; the copy's code is generated only when it is lowered."""
    inputs: list[Any]
    """``xlabridge.tpu._aot.TensorMeta`` (or an int, or None) per example input."""
    training: bool
    """Grad mode was on when Dynamo compiled the call."""
    frames: list[ev.Frame]
    recorders: list[Any]

    def module(self) -> torch.fx.GraphModule:
        return torch.fx.GraphModule(self.root, self.graph)


KEPT: list[Kept] = []
"""Graphs kept for the active recorders that capture HLO, in capture order."""


def _keep(gm: torch.fx.GraphModule, example_inputs: Any, compile_id: str, backend: str) -> None:
    recorders = [r for r in _recorder.recorders() if r.capture_hlo]
    if not recorders or sum(recorders[0] in k.recorders for k in KEPT) >= MAX_KEPT:
        return
    from xlabridge.tpu._aot import TensorMeta

    KEPT.append(Kept(compile_id, backend, gm, copy.deepcopy(gm.graph), [TensorMeta.of(x) for x in example_inputs],
                     torch.is_grad_enabled(), _first_op_frames(gm), recorders))


def kept_for(recorder: Any) -> list[Kept]:
    """The graphs kept for ``recorder``, now released from it (its observation ends)."""
    mine = [k for k in KEPT if recorder in k.recorders]
    for kept in mine:
        kept.recorders.remove(recorder)
        if not kept.recorders:
            KEPT.remove(kept)
    return mine


def current_compile_id() -> str:
    compile_id = upstream_torch.current_compile_id()
    return "" if compile_id is None else str(compile_id)


def op_count(gm: torch.fx.GraphModule) -> int:
    """``call_function`` nodes: ``torch._dynamo.explain``'s ``ops_per_graph`` length."""
    return sum(node.op == "call_function" for node in gm.graph.nodes)


def _first_op_frames(gm: torch.fx.GraphModule) -> list[ev.Frame]:
    """The stack of the graph's first op that torch's own code did not make (a module's hooks traced
    into the graph, FSDP's among them, come first), else of its first op."""
    torch_dirs = tuple(d.rstrip("/") + "/" for d in _frames.framework_paths().get("torch", []))
    first: list[ev.Frame] = []
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method", "call_module") and node.meta.get("stack_trace"):
            frames = _frames.from_stack_trace(node.meta["stack_trace"])
            if any(not f.filename.startswith(torch_dirs) for f in frames):
                return frames
            first = first or frames
    return first


def _emit(gm: torch.fx.GraphModule, compile_id: str, backend: str, t: float) -> None:
    reason = getattr(gm, "compile_subgraph_reason", None)
    ends_in_break = bool(reason is not None and reason.graph_break)
    stamp = _recorder.stamp(t)
    _recorder.emit(ev.GraphCaptured(
        **stamp, compile_id=compile_id, backend=backend, op_count=op_count(gm),
        ends_in_break=ends_in_break, frames=_first_op_frames(gm),
    ))
    if ends_in_break:
        _recorder.emit(ev.GraphBreak(
            **stamp, compile_id=compile_id, reason=str(reason.reason),
            frames=_frames.from_summaries(reason.user_stack or []),
        ))


def record(gm: torch.fx.GraphModule, backend: str) -> None:
    """A backend reports a graph it received (the ``xlabridge`` backend does, for each)."""
    if not _recorder.active():
        return
    dynamo_compiles.ensure()
    compile_id = current_compile_id()
    _SELF_REPORTED.add(compile_id)
    _recorder.safely(INFO.name, "recording a Dynamo graph", _emit, gm, compile_id, backend, time.monotonic())


def ddp_optimizer_of(compiler_fn: Any) -> Any:
    """The DDPOptimizer whose ``compile_fn`` ``compiler_fn`` is (or wraps), else None."""
    owner = getattr(upstream_torch.original_backend(compiler_fn), "__self__", None)
    if owner is None or type(owner).__name__ != "DDPOptimizer":  # no import of torch.distributed otherwise
        return None
    return owner if isinstance(owner, upstream_torch.ddp_optimizer()) else None


def _split(optimizer: Any, compile_id: str, t: float) -> None:
    buckets = [int(bucket.size) for bucket in getattr(optimizer, "buckets", None) or ()]
    if not buckets:
        return
    _recorder.emit(ev.GraphSplit(
        **_recorder.stamp(t), compile_id=compile_id, bucket_bytes=buckets,
        bucket_cap_bytes=int(optimizer.bucket_bytes_cap), first_bucket_cap_bytes=int(optimizer.first_bucket_cap),
    ))


def _backend_name(compiler_fn: Any) -> str:
    """The backend as its user names it: ``inductor`` for ``torch.compile``'s wrapper of it (and
    ``compiler_name`` of its wrapper of a backend given with options), else its registered name;
    through DDPOptimizer, the backend it wraps."""
    optimizer = ddp_optimizer_of(compiler_fn)
    if optimizer is not None:
        return _backend_name(optimizer.backend_compile_fn)
    original = upstream_torch.original_backend(compiler_fn)
    original = getattr(original, "compiler_fn", original)
    named = getattr(original, "compiler_name", None)
    if isinstance(named, str) and named:
        return named
    for name, fn in upstream_torch.dynamo_backends().items():
        if fn is original:
            return name
    return getattr(original, "__name__", type(original).__name__)


def _wrap_call_user_compiler(original: Any) -> Any:
    def call_user_compiler(self: Any, gm: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
        if not _recorder.active():
            return original(self, gm, *args, **kwargs)
        dynamo_compiles.ensure()
        compile_id, started = current_compile_id(), time.monotonic()
        backend = _recorder.safely(INFO.name, "naming a backend", _backend_name, self.compiler_fn) or "?"
        optimizer = _recorder.safely(INFO.name, "looking for DDPOptimizer", ddp_optimizer_of, self.compiler_fn)
        _SELF_REPORTED.discard(compile_id)
        _recorder.safely(INFO.name, "keeping a Dynamo graph for the TPU view",
                         lambda: _keep(gm, args[0] if args else kwargs.get("example_inputs", ()), compile_id, backend))
        try:
            compiled = original(self, gm, *args, **kwargs)
        finally:
            if compile_id in _SELF_REPORTED:
                _SELF_REPORTED.discard(compile_id)
            else:
                _recorder.safely(INFO.name, "recording a Dynamo graph", lambda: _emit(gm, compile_id, backend, started))
        if optimizer is not None:  # its buckets are this graph's once its compile_fn returned
            _recorder.safely(INFO.name, "recording DDPOptimizer's split", _split, optimizer, compile_id, started)
        if backend in compiled_calls.XLA_FRONT_ENDS or not callable(compiled):
            return compiled
        return _recorder.safely(compiled_calls.INFO.name, "timing a compiled graph", compiled_calls.wrap,
                                compiled, compile_id, backend) or compiled

    return call_user_compiler


def install(installation: Installation) -> None:
    installation.replace(upstream_torch.output_graph(), "call_user_compiler", _wrap_call_user_compiler)
