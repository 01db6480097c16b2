"""How long the heavy packages took to import while observed, and a hook for the probes that
wait for a package (the sync probe waits for torch_xla).

Importing torch_xla pulls in torch's Dynamo and inductor (2.7 s of the bundled demo's 11 s on
PJRT CPU); transformers, torchvision and JAX cost seconds too. Under ``xlabridge report`` the
observation starts before the script runs, so that time lies inside the observed wall time and,
unmeasured, lands in "other".

A finder first on ``sys.meta_path`` (Python's public import protocol, no patch of torch) sees
each watched module's import before the other finders, asks them for its spec, and wraps the
spec's loader for the duration of ``exec_module`` only (the module's ``__loader__`` is the
original once the import is done; every other attribute of the loader is the original's during
it). Nested watched imports overlap their parent's interval: the time split merges intervals.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from xlabridge.diagnostics._observe import recorder as _recorder
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe.probes import Installation, ProbeInfo

INFO = ProbeInfo(
    name="python.imports",
    surface="sys.meta_path (importlib's finder and loader protocol)",
    checked="Python 3.10-3.12; torch 2.8.0, 2.9.0, 2.15.0",
    patch=False,
    why="only the import system sees when a module's import starts and ends; a finder is its public hook",
    sees="the seconds spent importing torch_xla, transformers and other heavy packages (the imports share)",
)

WATCHED = (
    "torch_xla", "torch._dynamo", "torch._inductor", "torch._functorch", "torch.fx.experimental", "transformers",
    "torchvision", "timm", "datasets", "tokenizers", "safetensors", "accelerate", "jax", "jaxlib", "flax", "optax",
    "triton", "scipy", "pandas", "sklearn", "numpy", "torch_tpu", "torchax",
)
"""Packages whose imports are timed, submodules included (``scipy.signal`` long after ``scipy``):
heavy, and imported by user scripts or lazily by ``torch.compile``. Only the outermost import of a
nest is timed: the ones inside it are part of its interval."""


def watched(name: str) -> bool:
    """Whether importing module ``name`` is timed."""
    return any(name == package or name.startswith(package + ".") for package in WATCHED)

_after_import: dict[str, list[Callable[[ModuleType], None]]] = {}


def after_import(installation: Installation, name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call ``callback(module)`` once module ``name`` is imported while observed,
    or now if it is imported already; forgotten when ``installation`` is restored."""
    if name in sys.modules:
        callback(sys.modules[name])
        return
    waiting = _after_import.setdefault(name, [])
    waiting.append(callback)
    installation.on_restore(lambda: callback in waiting and waiting.remove(callback))


class _TimedLoader(importlib.abc.Loader):
    """The original loader, with ``exec_module`` timed; every other attribute is the original's."""

    def __init__(self, inner: Any, name: str, depth: threading.local) -> None:
        self._inner, self._name, self._depth = inner, name, depth

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._inner, attribute)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        start = time.monotonic()
        self._depth.value = getattr(self._depth, "value", 0) + 1
        try:
            self._inner.exec_module(module)
        finally:
            self._depth.value -= 1
            # the module keeps the loader it would have had without the probe
            if getattr(module, "__loader__", None) is self:
                module.__loader__ = self._inner
            spec = getattr(module, "__spec__", None)
            if spec is not None and spec.loader is self:
                spec.loader = self._inner
            if self._depth.value == 0:
                _recorder.safely(INFO.name, "recording an import", _emit, self._name, start)
        for callback in _after_import.pop(self._name, []):
            _recorder.safely(INFO.name, f"running a hook after importing {self._name}", callback, module)


def _emit(name: str, start: float) -> None:
    _recorder.emit(ev.Imported(**_recorder.stamp(), module=name, start=start))


class _ImportTimer(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of the spec the other finders give a watched module."""

    def __init__(self) -> None:
        self._busy = threading.local()
        self._depth = threading.local()

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not _recorder.active() or getattr(self._busy, "name", None) == name:
            return None
        nested = getattr(self._depth, "value", 0) > 0
        if (nested or not watched(name)) and name not in _after_import:
            return None
        self._busy.name = name
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
            self._busy.name = None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _TimedLoader(spec.loader, name, self._depth)
        return spec


def install(installation: Installation) -> None:
    timer = _ImportTimer()
    installation.register(lambda f: sys.meta_path.insert(0, f), sys.meta_path.remove, timer)
