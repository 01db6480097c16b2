"""``torch_xla.sync()``: where a lazily traced step is cut, compiled and launched.

Training loops on TPU end each step with ``torch_xla.sync()`` or ``xm.mark_step()`` (which calls
``torch_xla.sync`` on torch_xla 2.8 and 2.9), and the lazily traced work of the step (the
optimizer step, a loss computed outside ``torch.compile``) runs there. The probe wraps the
package's ``sync`` once torch_xla is imported (the import probe's hook, so that a script's own
``from torch_xla import sync`` gets the wrapper too) and records each call's interval, the XLA
compilations inside it and the calling stack. The bridge's own syncs during an extraction are
recorded too; the time split counts each interval once, in the innermost share.
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any

from xlabridge.diagnostics import _frames, _recorder
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._probes import Installation, ProbeInfo, _status, imports, xla_metrics

INFO = ProbeInfo(
    name="xla.sync",
    surface="torch_xla.sync (xm.mark_step calls it)",
    checked="torch_xla 2.8.1, 2.9.0",
    patch=True,
    why="the step marker is a Python function that runs the lazily traced graph; torch_xla's metrics "
    "count its executions but not where a step's time went",
    sees="the time in torch_xla.sync() outside compiled graphs (the lazy share) and its lines",
)


def _wrap(original: Any) -> Any:
    def sync(*args: Any, **kwargs: Any) -> Any:
        if not _recorder.active():
            return original(*args, **kwargs)
        start, compiles = time.monotonic(), xla_metrics.uncached_compiles()
        try:
            return original(*args, **kwargs)
        finally:
            _recorder.safely(INFO.name, "recording a sync", _emit, start, compiles)

    sync.__wrapped__ = original  # type: ignore[attr-defined]
    sync.__doc__ = original.__doc__
    return sync


def _emit(start: float, compiles_before: int) -> None:
    compiles = xla_metrics.uncached_compiles() - compiles_before
    _recorder.emit(ev.Sync(
        **_recorder.stamp(), start=start, compiles=compiles,
        compile_seconds=xla_metrics.last_compile_seconds(compiles), frames=_frames.current_stack(skip=4),
    ))


def install(installation: Installation) -> None:
    def patch(torch_xla: ModuleType) -> None:
        try:
            installation.replace(torch_xla, "sync", _wrap)
        except AttributeError as error:  # a torch_xla without torch_xla.sync
            _status.unavailable(INFO, f"{type(error).__name__}: {error}")

    imports.after_import(installation, "torch_xla", patch)
