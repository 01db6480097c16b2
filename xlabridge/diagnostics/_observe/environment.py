"""What a report records about where it was made, so it can be read on another machine."""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable
from typing import Any

import torch

from xlabridge import _env
from xlabridge._version import __version__


def _module_version(name: str) -> str | None:
    module = sys.modules.get(name)
    if module is None:
        from importlib import metadata

        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None
    return getattr(module, "__version__", None)


def _xla_runtime() -> dict[str, Any]:
    if "torch_xla" not in sys.modules:
        return {}
    try:
        import torch_xla.runtime as xr

        return {"xla_device_type": xr.device_type(), "xla_device_count": xr.global_runtime_device_count()}
    except Exception as error:  # the runtime may be unusable; the report must still be written
        return {"xla_runtime_error": f"{type(error).__name__}: {error}"}


_PARTS: dict[str, Callable[[], Any]] = {}


def add_part(name: str, part: Callable[[], Any]) -> None:
    """Have ``environment()`` record ``name`` too: what ``part()`` returns then, unless None (the
    diagnostics' own switches, such as ``--pod``'s capture, which the modules that set them know)."""
    _PARTS[name] = part


def environment() -> dict[str, Any]:
    """Versions, the PJRT device and the TPU type (where there is one) of this process."""
    info: dict[str, Any] = {
        "xlabridge": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": platform.node(),
        "torch": torch.__version__,
        "torch_xla": _module_version("torch_xla"),
        "torch_tpu": _module_version("torch_tpu"),
        "jax": _module_version("jax"),
        "pjrt_device": _env.get(_env.PJRT_DEVICE),
        "tpu_type": _env.get(_env.TPU_ACCELERATOR_TYPE) or _env.get(_env.TPU_TYPE),
        "argv": list(sys.argv),
    }
    info.update(_xla_runtime())
    for name, part in _PARTS.items():
        value = part()
        if value is not None:
            info[name] = value
    return info
