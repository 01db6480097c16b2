"""``explain`` and ``diagnose``: the two ways to collect a report from Python."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from xlabridge.diagnostics import _hooks
from xlabridge.diagnostics._collector import Collector
from xlabridge.diagnostics.report import Report


@contextlib.contextmanager
def diagnose() -> Iterator[Report]:
    """Collect a report over the block: every graph Dynamo compiles inside it, whatever the
    backend, and for XLA graphs how torch_xla's bridge split them and what each call costs.

    Graphs compiled before the block (at their first call) are not observed: enter the block
    before the first call of the compiled model. The report is complete when the block exits.
    """
    collector = Collector()
    _hooks.activate(collector)
    try:
        yield collector.report
    finally:
        _hooks.deactivate(collector)
        collector.finish()


def explain(fn: Callable[..., Any], *, backend: str = "xlabridge") -> Callable[..., Report]:
    """``explain(fn)(*args, **kwargs)`` compiles ``fn`` afresh, runs it once, returns the report.

    Like ``torch._dynamo.explain``, it resets Dynamo's caches first so that every graph of
    ``fn`` is compiled, and so observed, during the call.
    """
    if not callable(fn):
        raise TypeError(f"explain: 'fn' must be callable, got {type(fn).__name__}")
    if not isinstance(backend, str):
        raise TypeError(f"explain: 'backend' must be a backend name such as 'xlabridge', got {backend!r}")

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Report:
        torch._dynamo.reset()
        with diagnose() as report:
            torch.compile(fn, backend=backend)(*args, **kwargs)
        return report

    return run
