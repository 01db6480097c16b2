"""xlabridge: see why ``torch.compile`` on XLA devices is slow, and fix the common traps.

The public API is the names below and those of the capability packages (``backend``,
``diagnostics``, ``tpu``, ``pod``, ``torchtpu``, ``autocast``, ``mx``, ``hlo``), listed in the
docs' API reference. Everything is loaded on first use: ``import xlabridge`` imports neither
torch nor torch_xla, JAX, Triton or libtpu. It does one thing at once: einsum joins XLA's
autocast lower-precision list as soon as torch_xla is loaded (now, or whenever it is imported
later; ``xlabridge.autocast.install``).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from xlabridge._version import __version__

_SUBPACKAGES = ("autocast", "backend", "diagnostics", "errors", "hlo", "mx", "pod", "torchtpu", "tpu")

_NAMES = {
    "compile": "xlabridge.backend",
    "xlabridge_backend": "xlabridge.backend",
    "Report": "xlabridge.diagnostics",
    "compare": "xlabridge.diagnostics",
    "diagnose": "xlabridge.diagnostics",
    "explain": "xlabridge.diagnostics",
    "DeviceMismatchError": "xlabridge.errors",
    "MissingDependencyError": "xlabridge.errors",
    "XlabridgeError": "xlabridge.errors",
}
"""Each public name of the top level and the package that defines it."""

__all__ = ["__version__", *sorted(_NAMES), *_SUBPACKAGES]


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        value = getattr(importlib.import_module(_NAMES[name]), name)
    elif name in _SUBPACKAGES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module 'xlabridge' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def _einsum_for_xla_autocast(torch_xla: object = None) -> None:
    from xlabridge import autocast

    autocast.install()


if "torch_xla" in sys.modules:
    _einsum_for_xla_autocast()
else:
    from xlabridge._upstream import imports as _imports

    _imports.when_imported("torch_xla", _einsum_for_xla_autocast)
