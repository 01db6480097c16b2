"""A rank's time in ``torch.distributed``: setting up its process groups, and waiting in collectives.

Setup: ``init_process_group``, ``new_group`` and ``init_device_mesh`` (the rendezvous with the other
ranks, the backend's connections), one ``dist_setup`` event per outermost call.

Waits, summed per call kind (``collective_waits``, running sums: a collective per step is not an
event per call): the collectives of ``torch.distributed`` called without ``async_op`` (they return
when the host may go on), ``Work.wait()``, the collectives DDP makes when it is built (its check of
the parameters' shapes across ranks and its broadcast of rank 0's parameters: ``torch.distributed``'s
``_verify_params_across_processes`` and ``_broadcast_coalesced``, which ``DistributedDataParallel``
and ``torch.distributed.utils`` look up in that module at each call), and the final callbacks of a
backward pass while a process group is up: DDP's reducer waits there for its gradients' all-reduce
(``finalize_backward``, in C++: no Python call to time), FSDP for its reduce-scatter. The engine runs
those callbacks after the pass's graph, in the order queued: a callback queued from a pre-hook on the
root of the pass, which runs first, marks the graph's end; the pass's return ends the wait (less the
observed collectives inside it, counted in their own sums). The hook returns nothing and is removed
when the pass returns: gradients are untouched.

The host's time is what is measured, and nothing is synchronized to measure it: where a backend
does not block the host (NCCL enqueues on a stream and returns, ``Work.wait()`` makes the stream
wait), the time is what the host spent, not the device's. Calls made while Dynamo traces go
straight to the original (``torch.compiler.istorch.compiler.is_compiling()``), so that Dynamo sees the function it
knows (its traceable collectives); a collective inside another observed call counts once, in the
outer one. Checked on torch 2.8.0, 2.9.0 and 2.15.0.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from types import ModuleType
from typing import Any

import torch

from xlabridge._upstream import torch as upstream_torch
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe import recorder as _recorder, tally as _tally
from xlabridge.diagnostics._observe.probes import Installation, ProbeInfo, imports

INFO = ProbeInfo(
    name="torch.distributed",
    surface="torch.distributed: init_process_group, new_group, init_device_mesh, the blocking collectives, "
    "Work.wait, _broadcast_coalesced, _verify_params_across_processes (wrapped); torch.autograd.backward "
    "(wrapped) with a pre-hook on the pass's root and autograd's queue_callback",
    checked="torch 2.8.0, 2.9.0, 2.15.0",
    patch=True,
    why="torch.distributed has no hook around its calls, and DDP's reducer waits in C++ at the end of a "
    "backward pass, after the graph's last hook",
    sees="process-group setup and the host's waits in collectives (the process-group and collective-wait shares)",
)

SETUP = ("init_process_group", "new_group", "init_device_mesh")
"""The setup calls, in ``torch.distributed`` and in the modules that define them."""

BLOCKING = (
    "all_reduce", "broadcast", "barrier", "monitored_barrier", "all_gather", "all_gather_into_tensor",
    "all_gather_object", "all_gather_coalesced", "reduce_scatter", "reduce_scatter_tensor", "all_to_all",
    "all_to_all_single", "reduce", "gather", "gather_object", "scatter", "scatter_object_list",
    "broadcast_object_list", "send", "recv", "_all_gather_base", "_reduce_scatter_base",
)
"""torch.distributed's collectives (c10d API) that block the host unless called with ``async_op``."""

DDP_CONSTRUCTION = ("_verify_params_across_processes", "_broadcast_coalesced")
"""The collectives DDP makes when it is built (through ``torch.distributed``'s namespace)."""

BACKWARD = "backward final callbacks"
"""The ``op`` of the waits in a backward pass's final callbacks (DDP's reducer, FSDP)."""


class _State(threading.local):
    depth = 0


_STATE = _State()
_timed_total = [0.0]
"""Seconds of collective calls timed so far, all threads: a backward's tail less those inside it."""


def _async_position(original: Any) -> int | None:
    try:
        names = list(inspect.signature(original).parameters)
    except (TypeError, ValueError):
        return None
    return names.index("async_op") if "async_op" in names else None


def _record(op: str, start: float, end: float) -> None:
    _timed_total[0] += end - start
    _recorder.tally(("collective", op), lambda: _tally.CollectiveSums(op), start, end - start)
    _recorder.progress(end)


def _collective(op: str) -> Any:
    def wrap(original: Any) -> Any:
        position = _async_position(original)

        @functools.wraps(original)
        def call(*args: Any, **kwargs: Any) -> Any:
            if torch.compiler.is_compiling() or not _recorder.active() or _STATE.depth:
                return original(*args, **kwargs)
            if kwargs.get("async_op") or (position is not None and len(args) > position and args[position]):
                return original(*args, **kwargs)
            return _timed(_waited(op), original, *args, **kwargs)

        return call

    return wrap


def _timed(record: Any, original: Any, /, *args: Any, **kwargs: Any) -> Any:
    """``original(*args, **kwargs)``, then ``record(start, end)`` of its host time (nested calls not again);
    positional-only, so that the call's own keywords (a collective's ``op=``) pass through untouched."""
    start = time.monotonic()
    _STATE.depth += 1
    try:
        return original(*args, **kwargs)
    finally:
        _STATE.depth -= 1
        _recorder.safely(INFO.name, "recording a host wait", record, start, time.monotonic())


def _waited(what: str) -> Any:
    """A recorder of a wait in ``what`` (a collective, ``Work.wait``) for ``_timed``."""
    return lambda start, end: _record(what, start, end)


def _wait(original: Any) -> Any:
    @functools.wraps(original)
    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling() or not _recorder.active() or _STATE.depth:
            return original(self, *args, **kwargs)
        return _timed(_waited("Work.wait"), original, self, *args, **kwargs)

    return wait


def _setup(what: str) -> Any:
    def wrap(original: Any) -> Any:
        @functools.wraps(original)
        def call(*args: Any, **kwargs: Any) -> Any:
            if not _recorder.active() or _STATE.depth:
                return original(*args, **kwargs)
            backend = kwargs.get("backend", args[0] if what == "init_process_group" and args else "")

            def record(start: float, end: float) -> None:
                _recorder.emit(ev.DistSetup(**_recorder.stamp(end), start=start, what=what,
                                            backend=backend if isinstance(backend, str) else ""))

            return _timed(record, original, *args, **kwargs)

        return call

    return wrap


def _group_up() -> bool:
    import sys

    dist = sys.modules.get("torch.distributed")
    return dist is not None and dist.is_available() and dist.is_initialized()


def _root_node(tensors: Any) -> Any:
    items = (tensors,) if isinstance(tensors, torch.Tensor) else tuple(tensors or ())
    return next((t.grad_fn for t in items if isinstance(t, torch.Tensor) and t.grad_fn is not None), None)


def _mark_graph_end(root: Any, marks: list[tuple[float, float]]) -> Any:
    """A pre-hook on ``root`` that queues the callback marking the end of the pass's graph."""
    engine = upstream_torch.autograd_engine()

    def ended() -> None:
        marks.append((time.monotonic(), _timed_total[0]))

    def before(_grad_outputs: Any) -> None:
        if not marks:
            _recorder.safely(INFO.name, "marking the end of a backward graph", engine.queue_callback, ended)

    return root.register_prehook(before)


def _backward(original: Any) -> Any:
    @functools.wraps(original)
    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling() or not _recorder.active() or not _group_up() or upstream_torch.compiled_autograd_on():
            return original(tensors, *args, **kwargs)
        marks: list[tuple[float, float]] = []
        root = _recorder.safely(INFO.name, "finding a backward pass's root", _root_node, tensors)
        handle = _recorder.safely(INFO.name, "hooking a backward pass", _mark_graph_end, root, marks) \
            if root is not None else None
        try:
            return original(tensors, *args, **kwargs)
        finally:
            end = time.monotonic()
            if handle is not None:
                _recorder.safely(INFO.name, "unhooking a backward pass", handle.remove)
            if marks:
                mark, timed = marks[0]
                seconds = (end - mark) - (_timed_total[0] - timed)
                if seconds > 0:
                    _recorder.safely(INFO.name, "recording a backward's final callbacks", _record_tail, mark, seconds)

    return backward


def _record_tail(start: float, seconds: float) -> None:
    _recorder.tally(("collective", BACKWARD), lambda: _tally.CollectiveSums(BACKWARD), start, seconds)


def install(installation: Installation) -> None:
    def patch(dist: ModuleType) -> None:
        if not dist.is_available():
            return
        from torch.distributed import distributed_c10d

        for module in (dist, distributed_c10d):
            for name in SETUP[:2]:
                if hasattr(module, name):
                    installation.replace(module, name, _setup(name))
            for name in BLOCKING:
                if hasattr(module, name):
                    installation.replace(module, name, _collective(name))
        if hasattr(dist, "init_device_mesh"):
            installation.replace(dist, "init_device_mesh", _setup("init_device_mesh"))
        for name in DDP_CONSTRUCTION:
            if hasattr(dist, name):
                installation.replace(dist, name, _collective(name))
        installation.replace(dist.Work, "wait", _wait)
        installation.replace(torch.autograd, "backward", _backward)

    def patch_mesh(module: ModuleType) -> None:
        if hasattr(module, "init_device_mesh"):
            installation.replace(module, "init_device_mesh", _setup("init_device_mesh"))

    imports.after_import(installation, "torch.distributed", patch)
    imports.after_import(installation, "torch.distributed.device_mesh", patch_mesh)
