"""The one import hook: act when a module is first imported, without importing it.

Two parts of xlabridge wait on imports. ``import xlabridge`` must stay cheap and must not
import torch_xla (seconds), yet einsum must join XLA's autocast list whenever torch_xla is in
use, and only after torch_xla's own kernels are registered (earlier, torch_xla would override
ours, with a warning, when it loads); the diagnostics' probes of torch_xla and TorchTPU install
once those packages load. And the diagnostics time the imports of heavy packages, which
otherwise land unexplained in a report's time split.

Both go through one finder at the front of ``sys.meta_path`` (Python's public import protocol,
nothing of torch is patched). It finds nothing itself: for a module someone waits on, or one
being timed, it asks the other finders for the spec and wraps its loader for the duration of
``exec_module`` only (afterwards the module's ``__loader__`` and ``__spec__.loader`` are the
original's), then runs the callbacks. The finder stays in ``sys.meta_path`` only while it has
something to do. A callback that raises becomes a ``RuntimeWarning``: an import never fails
because of xlabridge.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
import time
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["pending", "remove", "time_imports", "when_imported"]

_callbacks: dict[str, list[Callable[[ModuleType], None]]] = {}
_timer: tuple[Callable[[str], bool], Callable[[str, float], None]] | None = None


class _Loader(importlib.abc.Loader):
    """The original loader, with ``exec_module`` timed and followed by the callbacks."""

    def __init__(self, inner: Any, name: str, timed: bool) -> None:
        self._inner, self._name, self._timed = inner, name, timed

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._inner, attribute)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        start = time.monotonic()
        if self._timed:
            _HOOK.depth.value = getattr(_HOOK.depth, "value", 0) + 1
        try:
            self._inner.exec_module(module)
        finally:
            if self._timed:
                _HOOK.depth.value -= 1
            # the module keeps the loader it would have had without the hook
            if getattr(module, "__loader__", None) is self:
                module.__loader__ = self._inner
            spec = getattr(module, "__spec__", None)
            if spec is not None and spec.loader is self:
                spec.loader = self._inner
        timer = _timer
        if self._timed and timer is not None and getattr(_HOOK.depth, "value", 0) == 0:
            _call(f"timing the import of {self._name}", timer[1], self._name, start)
        callbacks = _callbacks.pop(self._name, [])
        _sync()
        for callback in callbacks:
            _call(f"post-import step for {self._name}", callback, module)


def _call(what: str, fn: Callable[..., None], *args: Any) -> None:
    try:
        fn(*args)
    except Exception as error:  # noqa: BLE001 - never break the user's import
        warnings.warn(f"xlabridge: {what} failed: {type(error).__name__}: {error}", RuntimeWarning, stacklevel=3)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of the spec the other finders give a module that
    someone waits on, or whose import is timed (the outermost of a nest only)."""

    def __init__(self) -> None:
        self.busy = threading.local()
        self.depth = threading.local()

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if getattr(self.busy, "name", None) == name:
            return None
        timer = _timer
        timed = timer is not None and getattr(self.depth, "value", 0) == 0 and timer[0](name)
        if not timed and name not in _callbacks:
            return None
        self.busy.name = name
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self.busy.name = None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader, name, timed)
        return spec


_HOOK = _Finder()


def _sync() -> None:
    """The finder is in ``sys.meta_path``, first, exactly while it has something to do."""
    wanted = bool(_callbacks) or _timer is not None
    present = _HOOK in sys.meta_path
    if wanted and not present:
        sys.meta_path.insert(0, _HOOK)
    elif not wanted and present:
        sys.meta_path.remove(_HOOK)


def when_imported(module: str, callback: Callable[[ModuleType], None]) -> bool:
    """Arrange for ``callback(module_object)`` right after ``module``'s first import; ``False``
    (and nothing arranged) if it is imported already. Several callbacks may wait on one module;
    each runs once, in the order they were added."""
    if module in sys.modules:
        return False
    _callbacks.setdefault(module, []).append(callback)
    _sync()
    return True


def remove(module: str, callback: Callable[[ModuleType], None] | None = None) -> None:
    """Forget ``callback`` (by default every callback) waiting on ``module``."""
    waiting = _callbacks.get(module, [])
    if callback is None:
        waiting.clear()
    elif callback in waiting:
        waiting.remove(callback)
    if not waiting:
        _callbacks.pop(module, None)
    _sync()


def pending(module: str) -> bool:
    """Whether a callback waits for ``module``'s import."""
    return bool(_callbacks.get(module))


def time_imports(watched: Callable[[str], bool], record: Callable[[str, float], None]) -> Callable[[], None]:
    """Call ``record(name, start)`` when the import of each module ``watched(name)`` ends (the
    outermost of a nest only: the imports inside it are part of its interval); ``start`` is its
    ``time.monotonic()``. One timer at a time; returns the function that stops it."""
    global _timer
    if _timer is not None:
        raise RuntimeError("time_imports: imports are timed already; stop that timer first")
    timer = (watched, record)
    _timer = timer

    def stop() -> None:
        global _timer
        if _timer is timer:
            _timer = None
            _sync()

    _sync()
    return stop
