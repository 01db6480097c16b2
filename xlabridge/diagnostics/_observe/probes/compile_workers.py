"""Inductor's compile-worker pool: when it started, what it was given, and its shutdown.

Inductor starts a pool of compile workers (``SubprocPool``: a sidecar process and its worker
processes) when a graph first goes to it, warm caches or not (``maybe_warm_pool``, where Triton is
installed and ``compile_threads`` is above 1), and shuts it down at exit (an ``atexit`` handler of
``torch._inductor.async_compile``): the sidecar is asked to stop and waited for, and its workers may
still be importing torch then. Each shutdown becomes an ``exit_work`` event (within the time split's
exit share) with the pool's start and the jobs it was given, so that a report can say what it cost
and what it did. Only the wrappers' bookkeeping is added: the pool works as before.
"""

from __future__ import annotations

import time
import weakref
from types import ModuleType
from typing import Any

from xlabridge._upstream import torch as upstream_torch
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe import recorder as _recorder
from xlabridge.diagnostics._observe.probes import Installation, ProbeInfo, imports

INFO = ProbeInfo(
    name="inductor.compile_workers",
    surface="torch._inductor.compile_worker.subproc_pool.SubprocPool: __init__, submit, shutdown (wrapped)",
    checked="torch 2.8.0, 2.9.0, 2.15.0",
    patch=True,
    why="the pool's start, jobs and shutdown have no hook; its shutdown runs in an atexit handler",
    sees="the time inductor's compile-worker pool takes to shut down at exit, and whether it compiled anything",
)

WHAT = "inductor compile workers"

_POOLS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Each pool seen: ``[created, workers, jobs]``."""


def _init(original: Any) -> Any:
    def __init__(self: Any, nprocs: int, *args: Any, **kwargs: Any) -> None:
        created = time.monotonic()
        original(self, nprocs, *args, **kwargs)
        _recorder.safely(INFO.name, "noting a compile-worker pool", _POOLS.__setitem__, self, [created, int(nprocs), 0])

    return __init__


def _submit(original: Any) -> Any:
    def submit(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen = _POOLS.get(self)
        if seen is not None:
            seen[2] += 1
        return original(self, *args, **kwargs)

    return submit


def _shutdown(original: Any) -> Any:
    def shutdown(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _recorder.active() or not getattr(self, "running", True):
            return original(self, *args, **kwargs)
        start = time.monotonic()
        try:
            return original(self, *args, **kwargs)
        finally:
            end = time.monotonic()
            created, workers, jobs = _POOLS.get(self, [None, 0, 0])
            _recorder.safely(INFO.name, "recording the pool's shutdown", lambda: _recorder.emit(ev.ExitWork(
                **_recorder.stamp(end), start=start, what=WHAT, workers=workers, jobs=jobs, created=created)))

    return shutdown


def install(installation: Installation) -> None:
    def patch(_module: ModuleType) -> None:
        pool = upstream_torch.inductor_subproc_pool()
        installation.replace(pool, "__init__", _init)
        installation.replace(pool, "submit", _submit)
        installation.replace(pool, "shutdown", _shutdown)

    imports.after_import(installation, "torch._inductor.compile_worker.subproc_pool", patch)
