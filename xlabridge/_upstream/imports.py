"""Run a callback right after a module is first imported, without importing it.

``import xlabridge`` must stay cheap and must not import torch_xla (5 s and more), yet
einsum must be registered for AutocastXLA whenever torch_xla is in use, and only after
torch_xla's own kernels are (registering earlier would make torch_xla override ours, with
a warning, when it loads). So the registration waits for torch_xla's import: a finder at
the front of ``sys.meta_path`` finds the module through the other finders, wraps its loader,
and runs the callback once the module has executed, then removes itself.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import warnings
from collections.abc import Callable
from types import ModuleType


class _CallbackLoader(importlib.abc.Loader):
    """Delegates to the real loader, then runs the callback."""

    def __init__(self, loader: importlib.abc.Loader, callback: Callable[[], None]) -> None:
        self._loader = loader
        self._callback = callback

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._callback()


class _AfterImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself; hands ``module``'s spec back with a loader that runs ``callback``."""

    def __init__(self, module: str, callback: Callable[[], None]) -> None:
        self.module = module
        self._callback = callback
        self._local = threading.local()

    def find_spec(self, fullname, path, target=None):  # noqa: ANN001, ANN201 - importlib's protocol
        if fullname != self.module or getattr(self._local, "busy", False):
            return None
        self._local.busy = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._local.busy = False
        if spec is None or spec.loader is None:
            return None
        spec.loader = _CallbackLoader(spec.loader, self._fire)
        return spec

    def _fire(self) -> None:
        remove(self.module)
        try:
            self._callback()
        except Exception as error:  # noqa: BLE001 - never break the user's import
            warnings.warn(
                f"xlabridge: post-import step for {self.module} failed: {type(error).__name__}: {error}",
                RuntimeWarning,
                stacklevel=2,
            )


def when_imported(module: str, callback: Callable[[], None]) -> bool:
    """Arrange for ``callback()`` after ``module``'s first import; False if it is imported already.

    One callback per module: a second call for the same module replaces the first.
    """
    if module in sys.modules:
        return False
    remove(module)
    sys.meta_path.insert(0, _AfterImportFinder(module, callback))
    return True


def remove(module: str) -> None:
    """Drop the pending callback for ``module``, if any."""
    sys.meta_path[:] = [
        finder for finder in sys.meta_path if not (isinstance(finder, _AfterImportFinder) and finder.module == module)
    ]


def pending(module: str) -> bool:
    """Whether a callback waits for ``module``'s import."""
    return any(isinstance(f, _AfterImportFinder) and f.module == module for f in sys.meta_path)
