"""``torch_xla.sync()`` and ``torch_xla.compile`` regions: where lazily traced work is cut,
compiled and launched.

Training loops on TPU end each step with ``torch_xla.sync()`` or ``xm.mark_step()`` (which calls
``torch_xla.sync`` on torch_xla 2.8 and 2.9), or run it as one ``torch_xla.compile`` region; the
lazily traced work (the model's step traced op by op, the optimizer step, a loss computed
outside ``torch.compile``) is traced, compiled and run there. The probe wraps ``sync`` (the
package's name and the module global that ``torch_xla.compile`` calls) and ``compile`` (the
region it returns: a decorated function or a ``with`` block) once torch_xla is imported (the
import probe's hook, so that a script's own ``from torch_xla import sync`` gets the wrapper
too), and ``xm.wait_device_ops()`` and torch_xla's wait at exit (``_XLAC._prepare_to_exit``):
a step launched by a sync runs asynchronously, and waiting for the device is the time its
execution still needed; and records each call's interval, the
XLA compilations inside it and the calling stack.
The bridge's own syncs during an extraction are recorded too; the time split counts each
interval once, in the innermost share.

A training loop syncs once per step from the same line, so the first ``FULLY_RECORDED`` calls of
each call site (its stack) are ``sync`` events, and the later ones add to the site's running sum
(``sync_calls``): the log does not grow with the steps. A sync during the bridge's extraction is
always recorded in full: it belongs to a compilation, which happens a bounded number of times.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from xlabridge._upstream import torch_xla as upstream_xla
from xlabridge.diagnostics import _frames
from xlabridge.diagnostics._observe import recorder as _recorder, tally as _tally, watchdog
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe.probes import (
    Installation,
    ProbeInfo,
    imports,
    status as _status,
    xla_bridge,
    xla_metrics,
)

INFO = ProbeInfo(
    name="xla.sync",
    surface="torch_xla.sync (xm.mark_step calls it), torch_xla.compile; the same names in torch_xla.torch_xla; "
    "torch_xla.core.xla_model.wait_device_ops, torch_xla._XLAC._prepare_to_exit",
    checked="torch_xla 2.8.1, 2.9.0",
    patch=True,
    why="the step marker and the compile region are Python functions that trace, compile and run the "
    "lazy graph; torch_xla's metrics count its executions but not where a step's time went",
    sees="the time in torch_xla.sync() and torch_xla.compile regions outside compiled graphs (the lazy share) "
    "and their lines",
)

SYNC = "torch_xla.sync"
REGION = "torch_xla.compile"
WAIT = "xm.wait_device_ops"
EXIT = "torch_xla exit"

FULLY_RECORDED = 3
"""Calls of each call site recorded as ``sync`` events; later ones are summed (``sync_calls``)."""

_SITES: dict[tuple, list[int]] = {}
"""Each call site (kind and stack) seen: ``[its number, its calls so far]``."""
_OPEN: list[tuple[str, float]] = []
"""The syncs under way, outermost first (what a stall report says the process is in)."""


@contextlib.contextmanager
def _timed(what: str) -> Iterator[None]:
    if not _recorder.active():
        yield
        return
    start, wall, compiles = time.monotonic(), time.time(), xla_metrics.uncached_compiles()
    _OPEN.append((what, start))
    try:
        yield
    finally:
        _OPEN.pop()
        end = time.monotonic()
        _recorder.progress(end)
        _recorder.safely(INFO.name, f"recording {what}", _record, what, start, end, wall, compiles)


def _site(skip: int) -> tuple:
    """The calling stack as a key: code objects and lines (frames are made only for a new site)."""
    frame, key = sys._getframe(skip), []
    while frame is not None:
        key.append((frame.f_code, frame.f_lineno))
        frame = frame.f_back
    return tuple(key)


def _record(what: str, start: float, end: float, wall: float, compiles_before: int) -> None:
    compiles = xla_metrics.uncached_compiles() - compiles_before
    compile_seconds = xla_metrics.compile_seconds_since(wall) if compiles else 0.0
    key = (what, _site(4))
    site = _SITES.get(key)
    if site is None:
        site = _SITES[key] = [len(_SITES), 0]
    site[1] += 1
    if site[1] <= FULLY_RECORDED or xla_bridge.extracting():
        _recorder.emit(ev.Sync(**_recorder.stamp(end), start=start, what=what, compiles=compiles,
                               compile_seconds=compile_seconds, frames=_frames.current_stack(skip=4)))
        return
    number = site[0]
    _recorder.tally(("sync-calls", number), lambda: _tally.SyncSums(number, what, _frames.current_stack(skip=5)),
                    start, end - start, compiles, compile_seconds)


def _under_way() -> list[ev.Activity]:
    return [ev.Activity(ev.ActivityKind.SYNC, what, since=start, thread="MainThread") for what, start in list(_OPEN)]


watchdog.report_state(_under_way)


def _waiting(what: str) -> Any:
    """A wrapper maker: the wrapped call timed as one ``sync`` event of kind ``what``."""

    def wrap(original: Any) -> Any:
        @functools.wraps(original)
        def waiting(*args: Any, **kwargs: Any) -> Any:
            with _timed(what):
                return original(*args, **kwargs)

        return waiting

    return wrap


class _Region:
    """The ``with torch_xla.compile():`` block, timed."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._timing: contextlib.AbstractContextManager[None] | None = None

    def __enter__(self) -> Any:
        self._timing = _timed(REGION)
        self._timing.__enter__()
        return self._inner.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        try:
            return self._inner.__exit__(*exc)
        finally:
            if self._timing is not None:
                self._timing.__exit__(None, None, None)


def _wrap_compile(original: Any) -> Any:
    @functools.wraps(original)
    def compile(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if hasattr(result, "__enter__") and hasattr(result, "__exit__"):
            return _Region(result)
        if callable(result):
            @functools.wraps(result)
            def region(*a: Any, **k: Any) -> Any:
                with _timed(REGION):
                    return result(*a, **k)

            return region
        return result

    return compile


def install(installation: Installation) -> None:
    def patch(torch_xla: ModuleType) -> None:
        try:
            module = torch_xla.torch_xla  # where sync and compile are defined, and compile calls sync
            for name, wrap in (("sync", _waiting(SYNC)), ("compile", _wrap_compile)):
                wrapped = wrap(getattr(module, name))
                installation.replace(module, name, lambda _original, wrapped=wrapped: wrapped)
                installation.replace(torch_xla, name, lambda _original, wrapped=wrapped: wrapped)
            # a launched step runs asynchronously: waiting for the device is its execution's time,
            # and so is torch_xla's wait for the last steps when the process exits (its atexit
            # handler, registered after observation began, runs before observation ends)
            installation.replace(torch_xla.core.xla_model, "wait_device_ops", _waiting(WAIT))
            installation.replace(upstream_xla.xlac(), "_prepare_to_exit", _waiting(EXIT))
        except AttributeError as error:  # a torch_xla without these names
            _status.unavailable(INFO, f"{type(error).__name__}: {error}")

    imports.after_import(installation, "torch_xla", patch)
