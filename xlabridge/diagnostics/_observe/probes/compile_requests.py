"""Every way into Dynamo, and what Dynamo will skip of it: each request to compile, and the steps.

``torch.compile(fn or module)``, ``nn.Module.compile()`` (``torch.compile(self._call_impl)``), the
``@torch.compile`` decorator and ``torch._dynamo.optimize(backend)(fn)`` all apply Dynamo's
``_TorchDynamoContext`` to what they compile; its ``__call__(fn)`` is wrapped (the outermost call
of a request only: ``torch.compile(module)`` applies it again inside ``OptimizedModule``) and each
request becomes a ``compile_request`` event: how it was asked (read off the stack: torch's
``compile`` in ``torch/__init__.py``, ``Module.compile`` in ``torch/nn/modules/module.py``), what,
where, with which backend, and the frames Dynamo will skip before it reaches anything it traces.
Dynamo's frame callback skips frames whose code ``trace_rules.check`` matches (torch's own files
among them; ``TORCH_LOGS=+dynamo`` logs ``skipping: _call_impl (reason: in skipfiles, ...)``), and
where ``__call__`` did not wrap the function in a frame of its own (``external_utils.wrap_inline``,
what ``__wrapped__`` of the returned function tells), the function's own frame is the first
Dynamo sees. ``Module.compile()`` on torch 2.8 and 2.9 hands it ``Module._call_impl``, which is
skipped, and then the module's ``forward``: a module whose ``forward`` is torch's own
(``nn.Sequential``, ``nn.TransformerEncoderLayer``) is not compiled at all, only the modules of
the user's inside it, one frame each (torch 2.15 wraps ``_call_impl``, and traces it).

The steps: torch's global optimizer hook (``torch.optim.optimizer.register_optimizer_step_post_hook``,
public) counts every ``Optimizer.step``; the count is a running sum (``optimizer_steps``), each
compilation carries the count at its start (``dynamo_compile``'s ``step``), and each step marks
progress for the stall watchdog. Checked on torch 2.8.0, 2.9.0 and 2.15.0.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any

from xlabridge._upstream import torch as upstream_torch
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe import recorder as _recorder, steps as _steps
from xlabridge.diagnostics._observe.probes import Installation, ProbeInfo
from xlabridge.diagnostics._observe.tally import Spans, Tally

INFO = ProbeInfo(
    name="dynamo.requests",
    surface="torch._dynamo.eval_frame._TorchDynamoContext.__call__; torch._dynamo.trace_rules.check; "
    "torch.optim.optimizer.register_optimizer_step_post_hook",
    checked="torch 2.8.0, 2.9.0, 2.15.0",
    patch=True,
    why="every way into Dynamo (torch.compile, Module.compile, the decorator, torch._dynamo.optimize, a library's "
    "compile) applies this context to what it compiles, and nothing records that: a request Dynamo then skips "
    "leaves no trace but a debug log line",
    sees="each request to compile (how, what, where, the backend) and the frames Dynamo skips of it; optimizer steps",
)

_LOCAL = threading.local()


class _StepSums(Tally):
    __slots__ = ("steps", "last", "spans")

    def __init__(self) -> None:
        self.steps = 0
        self.last: float | None = None
        self.spans = Spans()

    def add(self, start: float, end: float) -> None:
        self.steps += 1
        self.last = end
        self.spans.add(start, end - start)

    def event(self, stamp: dict[str, Any]) -> ev.OptimizerSteps:
        return ev.OptimizerSteps(**stamp, steps=self.steps, last=self.last, spans=self.spans.encoded())


def _on_step(_optimizer: Any, _args: Any, _kwargs: Any) -> None:
    if not _recorder.active():
        return
    end = time.monotonic()
    start = _steps.last()
    _steps.count(end)
    start = start if start is not None else end
    _recorder.progress(end)
    _recorder.tally("optimizer-steps", _StepSums, start, end)


def _frame_of(code: Any) -> ev.Frame | None:
    if code is None:
        return None
    return ev.Frame(code.co_filename, int(code.co_firstlineno), code.co_name)


def _how(stack: list[traceback.FrameSummary]) -> str:
    """The public call that reached Dynamo's context, read off the stack that asked."""
    names = [(f.filename.replace("\\", "/"), f.name) for f in stack]
    if any(file.endswith("torch/nn/modules/module.py") and name == "compile" for file, name in names):
        return "Module.compile"
    if any(file.endswith("torch/__init__.py") and name == "compile" for file, name in names):
        return "torch.compile"
    return "torch._dynamo.optimize"


def _backend(context: Any) -> str:
    """The backend as its user named it."""
    from xlabridge.diagnostics._observe.probes.dynamo_graphs import _backend_name as backend_name

    found = upstream_torch.context_backend(context)
    return backend_name(found) if found is not None else ""


def _code(fn: Any) -> Any:
    fn = getattr(fn, "__func__", fn)
    return getattr(fn, "__code__", None)


def _skipped(fn: Any, compiled: Any) -> list[ev.Frame]:
    """The frames Dynamo skips before it traces anything of ``fn``, outermost first."""
    import torch

    if isinstance(fn, torch.nn.Module):
        return []  # OptimizedModule wraps a module whose forward Dynamo would skip (wrap_inline)
    if getattr(compiled, "__wrapped__", None) is not fn or _code(fn) is None:
        return []  # Dynamo's first frame is a wrapper of its own, which it traces
    if not upstream_torch.dynamo_skips(_code(fn)):
        return []
    skipped = [_frame_of(_code(fn))]
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, torch.nn.Module) and getattr(fn, "__name__", "") == "_call_impl":
        forward = _code(getattr(owner, "forward", None))
        if forward is not None and upstream_torch.dynamo_skips(forward):
            skipped.append(_frame_of(forward))
        elif forward is None:
            return []
    return [f for f in skipped if f is not None]


def _target(fn: Any) -> tuple[str, Any]:
    """What was handed over, and the code Dynamo will be asked to trace."""
    import torch

    owner = getattr(fn, "__self__", None)
    module = fn if isinstance(fn, torch.nn.Module) else owner if isinstance(owner, torch.nn.Module) else None
    if module is not None:
        return type(module).__name__, _code(getattr(module, "forward", None))
    return getattr(fn, "__qualname__", type(fn).__name__), _code(fn)


def _record(context: Any, fn: Any, compiled: Any, stack: list[traceback.FrameSummary]) -> None:
    here = __file__
    target, code = _target(fn)
    _recorder.emit(ev.CompileRequest(
        **_recorder.stamp(), how=_how(stack), target=target, backend=_backend(context), code=_frame_of(code),
        skipped=_skipped(fn, compiled),
        frames=[ev.Frame(f.filename, int(f.lineno or 0), f.name) for f in stack if f.filename != here],
    ))


def _wrap_call(original: Any) -> Any:
    def __call__(self: Any, fn: Any) -> Any:
        if not _recorder.active() or getattr(_LOCAL, "depth", 0):
            return original(self, fn)
        stack = traceback.extract_stack()[:-1]
        _LOCAL.depth = 1
        try:
            compiled = original(self, fn)
        finally:
            _LOCAL.depth = 0
        if callable(fn) and not isinstance(self, upstream_torch.dynamo_contexts_that_compile_nothing()):
            _recorder.safely(INFO.name, "recording a request to compile", _record, self, fn, compiled, stack)
        return compiled

    return __call__


def install(installation: Installation) -> None:
    from torch.optim.optimizer import register_optimizer_step_post_hook

    installation.replace(upstream_torch.dynamo_context(), "__call__", _wrap_call)
    handle = register_optimizer_step_post_hook(_on_step)
    installation.on_restore(handle.remove)
