"""Gating of optional dependencies.

xlabridge imports on a machine that has only torch. Each optional part asks for what it
needs at the moment it is used, through ``require``, and gets a ``MissingDependencyError``
that says which feature needed what and how to install it.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import types

from xlabridge.errors import MissingDependencyError

_INSTALL_HINTS = {
    "torch_xla": "pip install 'xlabridge[xla]' (torch_xla 2.9.0 needs torch 2.9.0 exactly; "
    "on a TPU VM use 'xlabridge[tpu]')",
    "triton": "pip install 'xlabridge[cuda]' (Triton ships with the CUDA builds of torch)",
    "jax": "pip install 'jax[cuda12]' on a GPU machine, or 'xlabridge[xla]' on a TPU VM",
}


@functools.cache
def is_available(module: str) -> bool:
    """Whether ``module`` can be imported, found without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, feature: str) -> types.ModuleType:
    """Import ``module`` for ``feature``, or raise an error that says how to get it."""
    if not is_available(module):
        hint = _INSTALL_HINTS.get(module, f"pip install {module}")
        raise MissingDependencyError(f"{feature} needs {module}, which is not installed: {hint}.")
    return importlib.import_module(module)
