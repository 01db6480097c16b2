"""Inductor's compiles: each forward, backward or inference graph inductor compiles, and when.

``torch._inductor.compile_fx._compile_fx_inner`` compiles one graph AOTAutograd hands inductor:
its code generation, the C++ or Triton compile (waiting on its compile workers included) and
autotuning. ``compile_fx_inner`` calls it through its module's globals at every call, so
wrapping the module attribute sees every compile, at Dynamo's compile of a frame and at
AOTAutograd's deferred backward compile (the first ``backward()``). torch offers no hook there:
Dynamo's ``dynamo_timed("compile_fx_inner")`` keeps only summed durations, without start times.
A graph that AOTAutograd's or inductor's cache serves is not compiled, and has no such event (its
load is inside Dynamo's compile, the ``tracing`` share). Each compile becomes a ``backend_compile`` event (its start and end: the time split's
``backend_compile`` share and the timeline's ``backend-compile`` lane). Checked on torch 2.15.0
(``_compile_fx_inner(gm, example_inputs, **kwargs)`` with ``is_backward`` and ``is_inference``).
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any

from xlabridge._upstream import torch as upstream_torch
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe import recorder as _recorder
from xlabridge.diagnostics._observe.probes import Installation, ProbeInfo, imports
from xlabridge.diagnostics._observe.probes.dynamo_graphs import current_compile_id

INFO = ProbeInfo(
    name="inductor.compiles",
    surface="torch._inductor.compile_fx._compile_fx_inner",
    checked="torch 2.15.0",
    patch=True,
    why="inductor's compile of each forward and backward graph has no hook; Dynamo's timers keep only summed "
    "durations, without the start times the time split and the timeline need",
    sees="inductor's compile time (forward, backward, autotuning, its compile workers), apart from Dynamo's tracing",
)


def _role(kwargs: dict[str, Any]) -> str:
    if kwargs.get("is_backward"):
        return "backward"
    return "inference" if kwargs.get("is_inference") else "forward"


def _wrap(original: Any) -> Any:
    def _compile_fx_inner(*args: Any, **kwargs: Any) -> Any:
        if not _recorder.active():
            return original(*args, **kwargs)
        start = time.monotonic()
        try:
            return original(*args, **kwargs)
        finally:
            end = time.monotonic()
            _recorder.safely(INFO.name, "recording an inductor compile", lambda: _recorder.emit(ev.BackendCompile(
                **_recorder.stamp(end), start=start, compile_id=current_compile_id(), backend="inductor",
                role=_role(kwargs))))

    return _compile_fx_inner


def install(installation: Installation) -> None:
    def patch(_module: ModuleType) -> None:
        installation.replace(upstream_torch.inductor_compile_fx(), "_compile_fx_inner", _wrap)

    imports.after_import(installation, "torch._inductor.compile_fx", patch)
