"""How long the heavy packages took to import while observed, and a hook for the probes that
wait for a package (the sync probe waits for torch_xla).

Importing torch_xla pulls in torch's Dynamo and inductor (a large share of a short run such as
the bundled demo); transformers, torchvision and JAX are heavy too. Under ``xlabridge report`` the
observation starts before the script runs, so that time lies inside the observed wall time and,
unmeasured, lands in "other".

The timing and the hooks go through xlabridge's one import hook (``xlabridge._upstream.imports``:
a finder first on ``sys.meta_path``, Python's public import protocol, no patch of torch). Only the
outermost watched import of a nest is timed: the ones inside it are part of its interval.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType

from xlabridge._upstream import imports as _imports
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


def after_import(installation: Installation, name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call ``callback(module)`` once module ``name`` is imported while observed, or now if it is
    imported already; forgotten when ``installation`` is restored."""
    if name in sys.modules:
        callback(sys.modules[name])
        return

    def observed(module: ModuleType) -> None:
        if _recorder.active():
            _recorder.safely(INFO.name, f"running a hook after importing {name}", callback, module)

    _imports.when_imported(name, observed)
    installation.on_restore(lambda: _imports.remove(name, observed))


def _emit(name: str, start: float) -> None:
    if _recorder.active():
        _recorder.safely(INFO.name, "recording an import", _recorder.emit,
                         ev.Imported(**_recorder.stamp(), module=name, start=start))


def install(installation: Installation) -> None:
    installation.on_restore(_imports.time_imports(watched, _emit))
