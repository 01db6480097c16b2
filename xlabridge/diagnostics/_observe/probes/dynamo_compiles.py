"""Dynamo's compilations: when each ran (for the time split) and why frames recompiled.

* ``torch._dynamo.callback_handler`` runs start/end callbacks around every frame compilation
  (trigger ``DYNAMO``: tracing plus the backend's compile call) and around AOTAutograd's
  deferred backward compilation (``LAZY_BACKWARD``); nested ones run once, outermost. Each
  pair becomes a ``dynamo_compile`` event with the caller's stack (a recompiled frame is
  located by it when its code is not the user's, e.g. ``torch.compile(nn.Sequential(...))``,
  whose compiled frame is ``torch/_dynamo/external_utils.py``'s wrapper).
* ``torch._dynamo.utils.get_compilation_metrics()`` keeps a record per compilation (Dynamo
  logs the same record as ``compilation_metrics`` in its structured trace): ``recompile_reason``
  is the guard failure Dynamo itself names for a recompilation, and ``co_*`` the recompiled
  code. Records are appended after the end callbacks run, so they are read at the next
  compilation's start and when observation ends.
* A record's start and end bound the whole compilation as torch times it
  (``_compile.compile_inner`` is inside them), the callbacks only its middle: before the start
  callback Dynamo finds and logs a recompilation's reasons (every cache entry's guards evaluated
  again, a ``recompile_reasons`` structured-trace artifact with its captured stack; a large share
  of a small recompilation when torch's logs are read), after the end callback it records the
  compilation's metrics. A compilation the callbacks timed is therefore emitted when its record
  is read, widened to the record's bounds; one whose record never comes, when observation ends,
  as the callbacks timed it.

``torch._dynamo.reset()`` clears the callbacks: the graph probe re-registers them (``ensure``)
and a compilation whose callbacks were missed is timed from its metrics record instead.
Checked on torch 2.8.0, 2.9.0 and 2.15.0 (``CallbackArgs`` with trigger and compile id; a torch
whose callbacks take no argument gets the compile id from ``CompileContext``).
"""

from __future__ import annotations

import time
import traceback
from typing import Any

from xlabridge._upstream import torch as upstream_torch
from xlabridge.diagnostics import _frames
from xlabridge.diagnostics._observe import recorder as _recorder, watchdog
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe import steps as _steps
from xlabridge.diagnostics._observe.probes import Installation, ProbeInfo, xla_metrics

INFO = ProbeInfo(
    name="dynamo.compiles",
    surface="torch._dynamo.callback_handler (register_start_callback/register_end_callback); "
    "torch._dynamo.utils.get_compilation_metrics()",
    checked="torch 2.8.0, 2.9.0, 2.15.0",
    patch=False,
    why="Dynamo's own compile callbacks and compilation metrics: public hooks, called for every "
    "compilation whatever the backend, that cost nothing between compilations",
    sees="Dynamo compile seconds (the tracing share of the time split) and recompilations",
)


class _State:
    """What the callbacks carry between a start and its end, and the metrics already read."""

    def __init__(self) -> None:
        self.open: dict[str, tuple[float, str, list[ev.Frame], float, int]] = {}
        self.timed: set[str] = set()
        # timed by the callbacks, waiting for their metrics record: "id:trigger" -> (start, end, frames, step)
        self.pending: dict[str, tuple[float, float, list[ev.Frame], int]] = {}
        self.read: set[tuple[Any, ...]] = set()
        self.registered = False


_STATE = _State()


def _compile_id(args: tuple[Any, ...]) -> tuple[str, str]:
    """``(compile id, trigger)`` from the callback's argument, or from the compile context."""
    if args and hasattr(args[0], "compile_id"):
        trigger = getattr(getattr(args[0], "callback_trigger", None), "name", "DYNAMO")
        return str(args[0].compile_id), trigger.lower()
    return str(upstream_torch.current_compile_id()), "dynamo"


def _caller_frames() -> list[ev.Frame]:
    """The stack that called into Dynamo, without torch's own frames (never the user's)."""
    torch_dirs = tuple(d.rstrip("/") + "/" for d in _frames.framework_paths().get("torch", []))
    here = __file__
    return [
        ev.Frame(f.filename, int(f.lineno or 0), f.name)
        for f in traceback.extract_stack()
        if not f.filename.startswith(torch_dirs) and f.filename != here
    ]


def _compile_seconds() -> float:
    return xla_metrics.Snapshot.take().compile_seconds if xla_metrics.loaded() else 0.0


def _on_start(*args: Any) -> None:
    if not _recorder.active():
        return
    _recorder.safely(INFO.name, "recording a compilation start", _start, args)


def _start(args: tuple[Any, ...]) -> None:
    drain()
    compile_id, trigger = _compile_id(args)
    _STATE.open[compile_id] = (time.monotonic(), trigger, _caller_frames(), _compile_seconds(),
                               _steps.taken())


def _on_end(*args: Any) -> None:
    if not _recorder.active():
        return
    _recorder.safely(INFO.name, "recording a compilation end", _end, args)


def _end(args: tuple[Any, ...]) -> None:
    compile_id, trigger = _compile_id(args)
    opened = _STATE.open.pop(compile_id, None)
    if opened is None:
        return
    start, trigger, frames, compile_before, step = opened
    end = time.monotonic()
    _recorder.progress(end)
    _STATE.timed.add(f"{compile_id}:{trigger}")
    _STATE.pending[f"{compile_id}:{trigger}"] = (start, end, frames, step)
    compiled = _compile_seconds() - compile_before
    if compiled > 0:
        _recorder.emit(ev.XlaCompile(**_recorder.stamp(end), graph=None, phase=ev.XlaPhase.DYNAMO,
                                     count=0, seconds=compiled))


def _under_way() -> list[ev.Activity]:
    """The compilations begun and not ended (a stall report's)."""
    return [ev.Activity(ev.ActivityKind.DYNAMO_COMPILE, f"{trigger} {compile_id}", since=start)
            for compile_id, (start, trigger, *_) in list(_STATE.open.items())]


watchdog.report_state(_under_way)


def _metrics_records() -> list[Any]:
    return upstream_torch.compilation_metrics()


def _emit(compile_id: str, trigger: str, start: float, end: float, frames: list[ev.Frame], step: int | None,
          code: ev.Frame | None = None) -> None:
    _recorder.emit(ev.DynamoCompile(**_recorder.stamp(end), compile_id=compile_id, trigger=trigger,
                                    start=start, caller_frames=frames, code=code, step=step))


def _code(record: Any) -> ev.Frame | None:
    """The compiled frame's code, as Dynamo's record names it."""
    if not getattr(record, "co_filename", None):
        return None
    return ev.Frame(record.co_filename, int(record.co_firstlineno or 0), record.co_name or "")


def drain(*, ended: bool = False) -> None:
    """Turn compilation-metrics records not read yet into events; ``ended``: observation ends,
    the compilations still waiting for a record are emitted as their callbacks timed them."""
    try:
        _read_records()
    finally:
        if ended:
            for key, (start, end, frames, step) in list(_STATE.pending.items()):
                compile_id, _, trigger = key.rpartition(":")
                _emit(compile_id, trigger, start, end, frames, step)
            _STATE.pending.clear()


def _read_records() -> None:
    offset = time.time() - time.monotonic()
    for record in _metrics_records():
        if _key(record) in _STATE.read:
            continue
        _STATE.read.add(_key(record))
        compile_id = str(record.compile_id)
        forward = getattr(record, "is_forward", True) is not False
        trigger = "dynamo" if forward else "lazy_backward"
        timed = _STATE.pending.pop(f"{compile_id}:{trigger}", None)
        if timed is not None:
            start, end, frames, step = timed
            if record.start_time_us and record.end_time_us:
                began, ended = record.start_time_us / 1e6 - offset, record.end_time_us / 1e6 - offset
                if began <= end and ended >= start:  # the record of this compilation, not of an earlier one
                    start, end = min(start, began), max(end, ended)
            _emit(compile_id, trigger, start, end, frames, step, _code(record))
        elif f"{compile_id}:{trigger}" not in _STATE.timed and record.start_time_us and record.end_time_us:
            _STATE.timed.add(f"{compile_id}:{trigger}")
            _recorder.emit(ev.DynamoCompile(
                **_recorder.stamp(record.end_time_us / 1e6 - offset), compile_id=compile_id, trigger=trigger,
                start=record.start_time_us / 1e6 - offset, code=_code(record),
            ))
        if forward and _is_recompile(compile_id):
            code = ev.Frame(record.co_filename or "<unknown>", int(record.co_firstlineno or 0), record.co_name or "")
            reason = getattr(record, "recompile_reason", None) or ""
            _recorder.emit(ev.Recompile(**_recorder.stamp(), compile_id=compile_id, reason=reason, code=code))


def _key(record: Any) -> tuple[Any, ...]:
    return (str(record.compile_id), getattr(record, "is_forward", None), record.start_time_us)


def _is_recompile(compile_id: str) -> bool:
    """``frame/n`` with ``n > 0`` (compiled-autograd ids start with ``!``: not frames)."""
    if compile_id.startswith("!") or "/" not in compile_id:
        return False
    attempt = compile_id.rsplit("/", 1)[1].split("_")[0]
    return attempt.isdigit() and int(attempt) > 0


def ensure() -> None:
    """Register the callbacks again if ``torch._dynamo.reset()`` cleared them."""
    if not _STATE.registered:
        return
    handler = upstream_torch.dynamo_callback_handler()
    if _on_start not in handler.start_callbacks:
        handler.register_start_callback(_on_start)
    if _on_end not in handler.end_callbacks:
        handler.register_end_callback(_on_end)


def install(installation: Installation) -> None:
    handler = upstream_torch.dynamo_callback_handler()
    _metrics_records()  # the metrics surface must exist too
    _STATE.read.update(_key(record) for record in _metrics_records())
    installation.register(handler.register_start_callback, handler.remove_start_callback, _on_start)
    installation.register(handler.register_end_callback, handler.remove_end_callback, _on_end)
    _STATE.registered = True

    def forget() -> None:
        _STATE.registered = False
        _STATE.open.clear()
        _STATE.pending.clear()

    installation.on_restore(forget)
