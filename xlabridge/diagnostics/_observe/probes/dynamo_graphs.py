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
"""

from __future__ import annotations

import time
from typing import Any

import torch

from xlabridge._upstream import torch as upstream_torch
from xlabridge.diagnostics import _frames
from xlabridge.diagnostics._observe import recorder as _recorder
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe.probes import Installation, ProbeInfo, dynamo_compiles

INFO = ProbeInfo(
    name="dynamo.graphs",
    surface="graphs reported by the xlabridge backend; "
    "torch._dynamo.output_graph.OutputGraph.call_user_compiler (other backends)",
    checked="torch 2.8.0, 2.9.0, 2.15.0",
    patch=True,
    why="only a backend receives the FX graph and its compile_subgraph_reason (what explain reads); "
    "for backends other than xlabridge the call that hands them over is wrapped (the structured "
    "trace costs +18% on a first call, the graph_breaks channel prints to the user's stderr)",
    sees="Dynamo's FX graphs and graph breaks from backends other than xlabridge",
)

_SELF_REPORTED: set[str] = set()


def current_compile_id() -> str:
    compile_id = upstream_torch.current_compile_id()
    return "" if compile_id is None else str(compile_id)


def op_count(gm: torch.fx.GraphModule) -> int:
    """``call_function`` nodes: ``torch._dynamo.explain``'s ``ops_per_graph`` length."""
    return sum(node.op == "call_function" for node in gm.graph.nodes)


def _first_op_frames(gm: torch.fx.GraphModule) -> list[ev.Frame]:
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method", "call_module") and node.meta.get("stack_trace"):
            return _frames.from_stack_trace(node.meta["stack_trace"])
    return []


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


def _backend_name(compiler_fn: Any) -> str:
    original = upstream_torch.original_backend(compiler_fn)
    original = getattr(original, "compiler_fn", original)
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
        _SELF_REPORTED.discard(compile_id)
        try:
            return original(self, gm, *args, **kwargs)
        finally:
            if compile_id in _SELF_REPORTED:
                _SELF_REPORTED.discard(compile_id)
            else:
                _recorder.safely(
                    INFO.name, "recording a Dynamo graph",
                    lambda: _emit(gm, compile_id, _backend_name(self.compiler_fn), started),
                )

    return call_user_compiler


def install(installation: Installation) -> None:
    installation.replace(upstream_torch.output_graph(), "call_user_compiler", _wrap_call_user_compiler)
