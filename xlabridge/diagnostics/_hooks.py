"""The points where xlabridge observes Dynamo and torch_xla's Dynamo bridge.

Three functions are wrapped while at least one collector is active, and restored after:

* ``OutputGraph.call_user_compiler`` (Dynamo): every FX graph Dynamo hands to any backend,
  with ``compile_subgraph_reason``, the same record ``torch._dynamo.explain`` reads;
* ``convert_frame.get_and_maybe_log_recompilation_reasons`` (Dynamo): the guard failures
  behind each recompilation;
* ``torch._dynamo.backends.torchxla.xla_backend_helper``: the compiler that ``openxla``,
  ``openxla_eval`` and so ``xlabridge`` use for each FX graph. The wrapped version does
  exactly what the original does (extract the XLA graphs at the first call, then call
  them) and, around it, reads how the bridge split the graph and torch_xla's own metrics.

Graphs compiled while a collector is active keep reporting to it as long as it is active;
afterwards they run as they would unobserved. Nothing here runs a graph an extra time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from xlabridge.diagnostics._collector import Collector
from xlabridge.diagnostics._metrics import MeteredCall

_ACTIVE: list[Collector] = []
_RESTORE: list[Callable[[], None]] = []


def _current_compile_id() -> str:
    compile_id = torch._guards.CompileContext.current_compile_id()
    return "" if compile_id is None else str(compile_id)


def _backend_name(compiler_fn: Any) -> str:
    from torch._dynamo.backends import registry

    original = compiler_fn
    for attribute in ("_torchdynamo_orig_backend", "compiler_fn"):
        original = getattr(original, attribute, original)
    for name, fn in registry._COMPILER_FNS.items():
        if fn is original:
            return name
    return getattr(original, "__name__", type(original).__name__)


def _patch(owner: Any, name: str, make_wrapper: Callable[[Any], Any]) -> None:
    original = getattr(owner, name)
    setattr(owner, name, make_wrapper(original))
    _RESTORE.append(lambda: setattr(owner, name, original))


def _observe_call_user_compiler(original: Callable) -> Callable:
    def call_user_compiler(self: Any, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        for collector in list(_ACTIVE):
            collector.safely(collector.record_dynamo_graph, gm, _current_compile_id(), _backend_name(self.compiler_fn))
        return original(self, gm, example_inputs)

    return call_user_compiler


def _observe_recompilation_reasons(original: Callable) -> Callable:
    def get_and_maybe_log_recompilation_reasons(cache_entry: Any, frame: Any, *args: Any, **kwargs: Any) -> Any:
        reasons = original(cache_entry, frame, *args, **kwargs)
        for collector in list(_ACTIVE):
            collector.safely(collector.record_recompile, reasons, frame.f_code)
        return reasons

    return get_and_maybe_log_recompilation_reasons


def _observe_xla_backend_helper(original: Callable) -> Callable:
    def xla_backend_helper(model: torch.fx.GraphModule, fake_tensor_inputs: Any, boxed: bool = False) -> Any:
        collectors = list(_ACTIVE)
        if not collectors:
            return original(model, fake_tensor_inputs, boxed=boxed)
        from functorch.compile import make_boxed_func

        call = MeteredCall(collectors, model, _current_compile_id())

        def fwd(*args: torch.Tensor) -> Any:
            return call(args)

        return make_boxed_func(fwd) if boxed else fwd

    return xla_backend_helper


def _install() -> None:
    from torch._dynamo import convert_frame, output_graph
    from torch._dynamo.backends import torchxla

    _patch(output_graph.OutputGraph, "call_user_compiler", _observe_call_user_compiler)
    _patch(convert_frame, "get_and_maybe_log_recompilation_reasons", _observe_recompilation_reasons)
    _patch(torchxla, "xla_backend_helper", _observe_xla_backend_helper)


def _uninstall() -> None:
    while _RESTORE:
        _RESTORE.pop()()


def activate(collector: Collector) -> None:
    """Start reporting to ``collector``; installs the hooks for the first active collector."""
    if not _ACTIVE:
        try:
            _install()
        except Exception as error:
            _uninstall()
            collector.warn("installing the observation hooks on this torch version", error)
            return
    _ACTIVE.append(collector)
    collector.active = True


def deactivate(collector: Collector) -> None:
    """Stop reporting to ``collector``; the hooks go when the last collector stops."""
    collector.active = False
    if collector in _ACTIVE:
        _ACTIVE.remove(collector)
        if not _ACTIVE:
            _uninstall()


def record_compile_path(path: str, reason: str) -> None:
    """Tell every active collector which path the backend chose for the graph being compiled."""
    if _ACTIVE:
        compile_id = _current_compile_id()
        for collector in list(_ACTIVE):
            collector.safely(collector.record_compile_path, compile_id, path, reason)


def add_report_warning(message: str) -> None:
    """Add ``message`` once to the warnings of every active report."""
    for collector in list(_ACTIVE):
        if message not in collector.report.warnings:
            collector.report.warnings.append(message)
