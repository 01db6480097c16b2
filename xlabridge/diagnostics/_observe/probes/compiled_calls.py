"""The calls of the graphs other backends compiled (inductor, eager, aot_eager...), on the host clock.

The callable a backend returns to Dynamo (``OutputGraph.call_user_compiler``, wrapped by the
``dynamo.graphs`` probe) is what each call of the compiled frame runs: it is handed back wrapped
in a function that times the call and calls it with the same arguments. A training call's
backward runs later, inside ``loss.backward()``, as AOTAutograd's ``CompiledFunctionBackward``
node: a pre-hook and a hook on that node (public ``Node.register_prehook`` / ``register_hook``,
added to the first output that has it, returning nothing, so the gradients are untouched) time it.
Nothing synchronizes a device: on CUDA a call's host time is its kernel launches', and the GPU
time shows only where the program itself waits inside a call (``.item()``, a copy to the host).
Graphs of the XLA front ends (``openxla``, ``tpu``, ``xlabridge``) are timed by their own probes.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any

import torch

from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe import recorder as _recorder
from xlabridge.diagnostics._observe.probes import ProbeInfo

INFO = ProbeInfo(
    name="backend.calls",
    surface="the callable a backend returns to OutputGraph.call_user_compiler (wrapped); "
    "torch.autograd.graph.Node.register_prehook / register_hook on AOTAutograd's CompiledFunctionBackward",
    checked="torch 2.9.0, 2.15.0",
    patch=True,
    why="Dynamo calls what the backend returned and offers no per-call hook; autograd's node hooks are public",
    sees="the execution time of graphs compiled by inductor, eager, aot_eager and other non-XLA backends",
)

XLA_FRONT_ENDS = frozenset({"openxla", "openxla_eval", "tpu", "xlabridge"})
"""Backends whose calls other probes time (their graphs' ``graph_called`` events)."""

TIMELINE_CALLS = 2000
"""Calls of one graph placed on the timeline; later ones are summed only."""


class _Calls:
    """The calls of one compiled graph, forward or backward."""

    def __init__(self, compile_id: str, backend: str, role: str) -> None:
        self.compile_id, self.backend, self.role = compile_id, backend, role
        self.calls, self.seconds = 0, 0.0
        self.spans: list[list[float]] = []
        self.recorders = _recorder.recorders()

    def add(self, start: float, end: float) -> None:
        self.calls += 1
        self.seconds += end - start
        if len(self.spans) < TIMELINE_CALLS:
            self.spans.append([start, end - start])

    def event(self) -> ev.CompiledCalls:
        return ev.CompiledCalls(**_recorder.stamp(), compile_id=self.compile_id, backend=self.backend,
                                role=self.role, calls=self.calls, seconds=self.seconds, spans=self.spans)


_OPEN: list[_Calls] = []
_BACKWARD_NODE = "CompiledFunctionBackward"


def wrap(compiled: Callable[..., Any], compile_id: str, backend: str) -> Callable[..., Any]:
    """``compiled`` timed per call (and its backward, where AOTAutograd made one)."""
    forward, backward = _Calls(compile_id, backend, "forward"), _Calls(compile_id, backend, "backward")
    _OPEN.extend((forward, backward))

    def call(*args: Any, **kwargs: Any) -> Any:
        if not _recorder.active():
            return compiled(*args, **kwargs)
        start = time.monotonic()
        result = compiled(*args, **kwargs)
        forward.add(start, time.monotonic())
        if torch.is_grad_enabled():
            _recorder.safely(INFO.name, "timing a compiled backward", _hook_backward, result, backward)
        return result

    return call


def _hook_backward(result: Any, backward: _Calls) -> None:
    outputs = result if isinstance(result, (list, tuple)) else (result,)
    node = next((o.grad_fn for o in outputs if isinstance(o, torch.Tensor) and o.grad_fn is not None
                 and type(o.grad_fn).__name__.startswith(_BACKWARD_NODE)), None)
    if node is None:
        return
    started: list[float] = []
    done = weakref.ref(backward)

    def before(_grad_outputs: Any) -> None:
        started.append(time.monotonic())

    def after(_grad_inputs: Any, _grad_outputs: Any) -> None:
        calls = done()
        if started and calls is not None and _recorder.active():
            calls.add(started.pop(), time.monotonic())

    node.register_prehook(before)
    node.register_hook(after)


def flush(recorder: _recorder.Recorder) -> None:
    """Give ``recorder`` the calls it observed (when its observation ends)."""
    for calls in list(_OPEN):
        if recorder not in calls.recorders:
            continue
        if calls.calls:
            recorder.add(calls.event())
        calls.recorders.remove(recorder)
        if not calls.recorders:
            _OPEN.remove(calls)
