"""Gating of optional dependencies.

xlabridge imports on a machine that has only torch. Each optional part asks for what it
needs at the moment it is used, through ``require``, and gets a ``MissingDependencyError``
that says which feature needed what and how to install it.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import types

from xlabridge.errors import MissingDependencyError

_INSTALL_HINTS = {
    "torch_xla": "pip install 'xlabridge[xla]' (torch_xla 2.8.x with torch 2.8, 2.9.0 with torch 2.9; "
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


@functools.cache
def torch_xla_mismatch() -> str | None:
    """Why the installed torch_xla cannot load beside the installed torch, or None.

    torch_xla's C library is built against one torch minor release and fails to load beside
    another with an undefined C++ symbol (seen: torch_xla 2.9.0 beside torch 2.8.0); its wheels
    declare no torch dependency, so pip installs such pairs without a word.
    """
    import torch

    try:
        xla_version = importlib.metadata.version("torch_xla")
    except importlib.metadata.PackageNotFoundError:
        return None
    wanted = ".".join(xla_version.split(".")[:2])
    if ".".join(torch.__version__.split(".")[:2]) == wanted:
        return None
    return (
        f"torch_xla {xla_version} needs torch {wanted}, but torch {torch.__version__} is installed: "
        f"pip install 'torch~={wanted}.0' 'torch_xla~={xla_version}', or a torch_xla release for "
        f"this torch (torch_xla 2.8.x with torch 2.8, 2.9.0 with torch 2.9)"
    )


def require(module: str, feature: str) -> types.ModuleType:
    """Import ``module`` for ``feature``, or raise an error that says how to get it."""
    if not is_available(module):
        hint = _INSTALL_HINTS.get(module, f"pip install {module}")
        raise MissingDependencyError(f"{feature} needs {module}, which is not installed: {hint}.")
    if module == "torch_xla" and (mismatch := torch_xla_mismatch()):
        raise MissingDependencyError(f"{feature} needs a torch_xla that matches torch: {mismatch}.")
    return importlib.import_module(module)
