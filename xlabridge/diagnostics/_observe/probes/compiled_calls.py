"""The calls of the graphs other backends compiled (inductor, eager, aot_eager...), on the host clock.

The callable a backend returns to Dynamo (``OutputGraph.call_user_compiler``, wrapped by the
``dynamo.graphs`` probe) is what each call of the compiled frame runs: it is handed back wrapped
in a function that times the call and calls it with the same arguments. A training call's
backward runs later, inside ``loss.backward()``, as AOTAutograd's ``CompiledFunctionBackward``
node: a pre-hook and a hook on that node (public ``Node.register_prehook`` / ``register_hook``,
added to the first output that has it, returning nothing, so the gradients are untouched) time it.
Nothing synchronizes a device while the program runs: on CUDA a call's host time is its kernel
launches'. So that the GPU's time is seen too, each call of a graph whose inputs are on a CUDA
device (the first ``TIMELINE_CALLS``) records a pair of CUDA timing events on the current stream
around it (asynchronous, as the launches are); when the observation ends, one synchronization
reads them, and each call's span on the GPU is placed on the host clock from the first event
recorded (``device_spans``; the GPU may have been behind the host then, so the spans are placed
no later than they ran). Where the program waits for the GPU itself (``loss.item()``), the time
it waits on compiled work is then the graphs' execution, not "other".
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
        self.device_events: list[tuple[Any, Any]] = []
        self.recorders = _recorder.recorders()

    def add(self, start: float, end: float, device: tuple[Any, Any] | None = None) -> None:
        self.calls += 1
        self.seconds += end - start
        if len(self.spans) < TIMELINE_CALLS:
            self.spans.append([start, end - start])
            if device is not None:
                self.device_events.append(device)

    def event(self) -> ev.CompiledCalls:
        device_spans = [[_CLOCK.host(begin), begin.elapsed_time(end) / 1e3] for begin, end in self.device_events]
        return ev.CompiledCalls(**_recorder.stamp(), compile_id=self.compile_id, backend=self.backend,
                                role=self.role, calls=self.calls, seconds=self.seconds, spans=self.spans,
                                device_spans=device_spans)


class _CudaClock:
    """CUDA timing events, and the host time of the first one recorded (their common origin)."""

    def __init__(self) -> None:
        self.anchor: Any = None
        self.anchor_host = 0.0

    def pair(self) -> tuple[Any, Any]:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if self.anchor is None:
            self.anchor, self.anchor_host = torch.cuda.Event(enable_timing=True), time.monotonic()
            self.anchor.record()
        return begin, end

    def host(self, event: Any) -> float:
        """``event``'s time on the host clock (the events have completed)."""
        return self.anchor_host + self.anchor.elapsed_time(event) / 1e3


_CLOCK = _CudaClock()


def _on_cuda(args: tuple[Any, ...]) -> bool:
    return any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)


_OPEN: list[_Calls] = []
_BACKWARD_NODE = "CompiledFunctionBackward"


def wrap(compiled: Callable[..., Any], compile_id: str, backend: str) -> Callable[..., Any]:
    """``compiled`` timed per call (and its backward, where AOTAutograd made one)."""
    forward, backward = _Calls(compile_id, backend, "forward"), _Calls(compile_id, backend, "backward")
    _OPEN.extend((forward, backward))

    cuda: list[bool] = []

    def call(*args: Any, **kwargs: Any) -> Any:
        if not _recorder.active():
            return compiled(*args, **kwargs)
        if not cuda:
            cuda.append(bool(_recorder.safely(INFO.name, "finding the graph's device", _on_cuda, args)))
        device = _recorder.safely(INFO.name, "timing a call on the GPU", _CLOCK.pair) \
            if cuda[0] and forward.calls < TIMELINE_CALLS else None
        start = time.monotonic()
        if device is not None:
            device[0].record()
        result = compiled(*args, **kwargs)
        if device is not None:
            device[1].record()
        forward.add(start, time.monotonic(), device)
        if torch.is_grad_enabled():
            _recorder.safely(INFO.name, "timing a compiled backward", _hook_backward, result, backward, cuda[0])
        return result

    return call


def _hook_backward(result: Any, backward: _Calls, on_cuda: bool) -> None:
    outputs = result if isinstance(result, (list, tuple)) else (result,)
    node = next((o.grad_fn for o in outputs if isinstance(o, torch.Tensor) and o.grad_fn is not None
                 and type(o.grad_fn).__name__.startswith(_BACKWARD_NODE)), None)
    if node is None:
        return
    started: list[tuple[float, Any]] = []
    done = weakref.ref(backward)

    def before(_grad_outputs: Any) -> None:
        device = _CLOCK.pair() if on_cuda and backward.calls < TIMELINE_CALLS else None
        if device is not None:
            device[0].record()
        started.append((time.monotonic(), device))

    def after(_grad_inputs: Any, _grad_outputs: Any) -> None:
        calls = done()
        if started and calls is not None and _recorder.active():
            start, device = started.pop()
            if device is not None:
                device[1].record()
            calls.add(start, time.monotonic(), device)

    node.register_prehook(before)
    node.register_hook(after)


def flush(recorder: _recorder.Recorder) -> None:
    """Give ``recorder`` the calls it observed (when its observation ends: the one synchronization
    of a CUDA device, to read its timing events, is made then)."""
    if any(c.device_events for c in _OPEN if recorder in c.recorders):
        torch.cuda.synchronize()
    for calls in list(_OPEN):
        if recorder not in calls.recorders:
            continue
        if calls.calls:
            recorder.add(calls.event())
        calls.recorders.remove(recorder)
        if not calls.recorders:
            _OPEN.remove(calls)
