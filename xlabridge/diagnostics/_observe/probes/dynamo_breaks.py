"""Graph breaks as torch itself records them: its structured trace's ``dynamo_graph_break_reason``.

Dynamo records every graph break once, as that artifact (``symbolic_convert.log_graph_break``, and
``convert_frame`` for a break that makes it skip a frame): the break's type, explanation, hints,
code page and the user stack, the same text ``TORCH_LOGS=graph_breaks`` prints and tlparse lists.
The reason a backend is handed with the graph (``compile_subgraph_reason``) can be another one:
on torch 2.15 a break in a nested call reaches the backend as ``step_unsupported`` at the caller's
line. Reading torch's own record makes the report's breaks agree with torch's by construction.

Where ``TORCH_TRACE`` is set, torch builds every record anyway: a handler on its trace logger
reads the graph-break records as they are written. Elsewhere a handler would make torch build
every payload of every record (graph dumps, tensor descriptions: work on every compilation that
observing must not add), so ``torch._logging.trace_structured`` is wrapped instead: Dynamo looks it
up on ``torch._logging`` at each call; the wrapper asks an artifact's metadata for its name and
builds the payload of graph-break artifacts only, then calls the original. (Not both ways at once:
the trace names the function that called ``trace_structured`` as each record's source, which a
wrapper would become.) Checked on torch 2.8.0, 2.9.0 and 2.15.0 (``trace_structured(name,
metadata_fn, *, payload_fn, ..., compile_id=None)``; records carry ``metadata`` and ``payload``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from xlabridge import _env
from xlabridge._upstream import torch as upstream_torch
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe import recorder as _recorder
from xlabridge.diagnostics._observe.probes import Installation, ProbeInfo
from xlabridge.diagnostics._observe.torch_trace import without_traceback

INFO = ProbeInfo(
    name="dynamo.breaks",
    surface="torch._logging.trace_structured, or with TORCH_TRACE set a handler on torch._logging's trace "
    "logger (its dynamo_graph_break_reason artifacts)",
    checked="torch 2.8.0, 2.9.0, 2.15.0",
    patch=True,
    why="torch records each graph break with its type, code, hints and user stack only in its structured "
    "trace; a handler on the trace would make torch build every record's payload, the wrapper builds the "
    "graph breaks' only",
    sees="graph breaks as torch records them (type, GB code, hints, user line); without it a break is "
    "reported with the reason its backend was handed",
)

ARTIFACT = "dynamo_graph_break_reason"
"""The name of the artifact Dynamo records each graph break as."""


def _record(metadata_fn: Callable[[], Any], payload_fn: Callable[[], Any], compile_id: Any, t: float) -> None:
    metadata = metadata_fn()
    if not isinstance(metadata, dict) or metadata.get("name") != ARTIFACT:
        return
    if compile_id is None:
        compile_id = upstream_torch.current_compile_id()
    _recorder.emit(ev.TorchBreak(**_recorder.stamp(t), compile_id="" if compile_id is None else str(compile_id),
                                 text=without_traceback(str(payload_fn() or ""))))


def _wrap_trace_structured(original: Any) -> Any:
    def trace_structured(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "artifact" and _recorder.active():
            metadata_fn = args[0] if args else kwargs.get("metadata_fn", dict)
            _recorder.safely(INFO.name, "recording a graph break", _record, metadata_fn,
                             kwargs.get("payload_fn", lambda: None), kwargs.get("compile_id"), time.monotonic())
        return original(name, *args, **kwargs)

    return trace_structured


class _TraceHandler(logging.Handler):
    """Reads the graph-break records torch writes into its trace (``TORCH_TRACE`` set)."""

    def emit(self, record: logging.LogRecord) -> None:
        if _recorder.active():
            _recorder.safely(INFO.name, "recording a graph break", self._record, record, time.monotonic())

    @staticmethod
    def _record(record: logging.LogRecord, t: float) -> None:
        metadata = getattr(record, "metadata", None)
        if not isinstance(metadata, dict) or (metadata.get("artifact") or {}).get("name") != ARTIFACT:
            return
        frame, attempt = metadata.get("frame_id"), metadata.get("frame_compile_id")
        compile_id = f"{frame}/{attempt}" if frame is not None and attempt is not None else ""
        if metadata.get("compiled_autograd_id") is not None and compile_id:
            compile_id = f"!{metadata['compiled_autograd_id']}/{compile_id}"
        _recorder.emit(ev.TorchBreak(**_recorder.stamp(t), compile_id=compile_id,
                                     text=without_traceback(str(getattr(record, "payload", "") or ""))))


def install(installation: Installation) -> None:
    if _env.get(_env.TORCH_TRACE):
        logger = upstream_torch.trace_logger()
        installation.register(logger.addHandler, logger.removeHandler, _TraceHandler())
    else:
        installation.replace(upstream_torch.structured_logging(), "trace_structured", _wrap_trace_structured)
