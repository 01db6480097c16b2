"""xlabridge's persistent XLA compilation cache: compile a graph once, across processes.

On, in order of precedence, by ``xlabridge.compile(..., cache_dir=...)`` (or the backend
option ``cache_dir``) or the environment variable ``XLABRIDGE_CACHE_DIR``. It is torch_xla's
own persistent cache (``torch_xla.runtime.initialize_cache``): torch_xla writes each compiled
executable under the directory, keyed by the graph's hash, and a later process loads it
instead of compiling.

Two limits are reported, never hidden (a ``CacheWarning`` and ``status()``, which the
diagnostics report shows):

* The cache must be set before torch_xla runs its first computation: torch_xla reads the
  setting once, when it creates its computation cache. Configured later, it is "too late".
* PJRT CPU cannot load the executables in torch_xla up to 2.9: torch_xla loads an entry
  with ``PjRtClient::DeserializeExecutable``, which XLA's CPU client leaves unimplemented
  (it loads serialized executables through ``LoadSerializedExecutable`` only), so each
  lookup fails with ``UNIMPLEMENTED: Deserializing serialized executable not supported`` and
  the graph is compiled again. There the cache is left off, rather than writing entries
  no process can read. Elsewhere (TPU, GPU, later torch_xla) it is on, and torch_xla's
  counters show hits, misses and load failures as they happen.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from xlabridge import _env
from xlabridge._upstream import torch_xla as upstream_xla
from xlabridge.diagnostics._observe import environment as _environment
from xlabridge.errors import CacheWarning

__all__ = ["CacheState", "configure", "configure_from_environment", "status", "validate_cache_dir"]

_COUNTERS = {
    "hits": "PersistentCacheHit",
    "misses": "PersistentCacheMiss",
    "load_failures": "PersistentCacheDeserializeFailure",
}

_CPU_CANNOT_LOAD = (
    "PJRT CPU cannot deserialize executables in torch_xla {version} (torch_xla loads cache "
    "entries with PjRtClient::DeserializeExecutable, which XLA's CPU client does not "
    "implement: every lookup fails with 'UNIMPLEMENTED: Deserializing serialized executable "
    "not supported'); the cache is off and each process compiles its graphs"
)


class CacheState(str, enum.Enum):
    """The persistent cache's state in this process (``status()["state"]``)."""

    OFF = "off"
    """Not configured, or torch_xla is missing."""
    ENABLED = "enabled"
    """torch_xla reads and writes it."""
    UNSUPPORTED = "unsupported"
    """This PJRT client cannot load entries (PJRT CPU up to torch_xla 2.9): left off."""
    TOO_LATE = "too-late"
    """Configured after torch_xla's first computation: torch_xla no longer reads the setting."""
    FAILING = "failing"
    """Enabled, but entries failed to load in this process."""


@dataclasses.dataclass
class _Setting:
    """The cache as configured in this process: the first configuration holds."""

    directory: str
    source: str
    state: CacheState
    reason: str = ""


_SETTING: _Setting | None = None


def validate_cache_dir(cache_dir: Any) -> Path:
    """``cache_dir`` as a writable directory, created if missing; errors name ``cache_dir``."""
    if not isinstance(cache_dir, (str, os.PathLike)):
        raise TypeError(f"xlabridge: 'cache_dir' must be a path, got {type(cache_dir).__name__}")
    path = Path(cache_dir).expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise ValueError(f"xlabridge: 'cache_dir' {str(path)!r} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(f"xlabridge: 'cache_dir' {str(path)!r} cannot be created ({error.strerror})") from error
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"xlabridge: 'cache_dir' {str(path)!r} is not writable")
    return path


def _torch_xla_version() -> str:
    from importlib import metadata

    return metadata.version("torch_xla").split("+")[0]


def _cpu_cannot_load(version: str) -> bool:
    """True for PJRT CPU on torch_xla <= 2.9, where loading cache entries is unimplemented."""
    device = _env.get(_env.PJRT_DEVICE)
    if "torch_xla.runtime" in sys.modules:
        device = sys.modules["torch_xla.runtime"].device_type() or device
    major_minor = tuple(int(part) for part in version.split(".")[:2])
    return (device or "").upper().startswith("CPU") and major_minor <= (2, 9)


def _runtime_started() -> bool:
    return sys.modules.get("torch_xla") is not None and upstream_xla.computation_cache_initialized()


def _enable(directory: Path, source: str) -> _Setting:
    from xlabridge import _optional

    if not _optional.is_available("torch_xla"):
        return _Setting(str(directory), source, CacheState.OFF, "torch_xla is not installed; the cache is for XLA graphs")
    if _runtime_started():
        return _Setting(
            str(directory), source, CacheState.TOO_LATE,
            "torch_xla had already run a computation when the cache was configured; configure it "
            f"before the first XLA computation (set {_env.CACHE_DIR}, or call xlabridge.compile(..., "
            "cache_dir=...) first)",
        )
    version = _torch_xla_version()
    if _cpu_cannot_load(version):
        return _Setting(str(directory), source, CacheState.UNSUPPORTED, _CPU_CANNOT_LOAD.format(version=version))
    if "torch_xla.runtime" in sys.modules:
        sys.modules["torch_xla.runtime"].initialize_cache(str(directory))
    else:  # what initialize_cache does, without importing torch_xla before the user does
        _env.put(_env.XLA_PERSISTENT_CACHE_PATH, str(directory))
        _env.put(_env.XLA_PERSISTENT_CACHE_READ_ONLY, "0")
    return _Setting(str(directory), source, CacheState.ENABLED)


def configure(cache_dir: Any, *, source: str = "cache_dir") -> dict[str, Any]:
    """Turn the persistent cache on at ``cache_dir`` for this process; returns ``status()``.

    The first configuration holds (torch_xla reads it once); asking again for the same
    directory does nothing, for another one warns. A cache that cannot take effect warns
    with the reason, once.
    """
    global _SETTING
    directory = validate_cache_dir(cache_dir)
    if _SETTING is not None:
        if _SETTING.directory != str(directory):
            warnings.warn(
                f"xlabridge persistent cache: already configured at {_SETTING.directory!r} (from "
                f"{_SETTING.source}); {str(directory)!r} is ignored for the rest of this process",
                CacheWarning,
                stacklevel=2,
            )
        return status()
    _SETTING = _enable(directory, source)
    if _SETTING.state is not CacheState.ENABLED:
        warnings.warn(f"xlabridge persistent cache: {_SETTING.reason}", CacheWarning, stacklevel=2)
    return status()


def configure_from_environment() -> dict[str, Any] | None:
    """``configure`` from ``XLABRIDGE_CACHE_DIR`` when it is set and nothing was configured."""
    value = _env.get(_env.CACHE_DIR)
    if not value or _SETTING is not None:
        return None
    return configure(value, source=_env.CACHE_DIR)


def _counters() -> dict[str, int]:
    if "torch_xla" not in sys.modules:
        return {name: 0 for name in _COUNTERS}
    import torch_xla.debug.metrics as met

    return {name: met.counter_value(counter) or 0 for name, counter in _COUNTERS.items()}


def status() -> dict[str, Any]:
    """The cache as it stands: directory, state, reason, and torch_xla's hit/miss/failure counts.

    ``state`` is ``"off"`` (not configured or torch_xla missing), ``"enabled"``,
    ``"unsupported"`` (this backend cannot load entries), ``"too-late"``, or ``"failing"``
    (enabled, but entries failed to load in this process).
    """
    if _SETTING is None:
        return {"state": CacheState.OFF.value, "directory": None, "source": None, "reason": "not configured",
                **_counters()}
    counts = _counters()
    state, reason = _SETTING.state, _SETTING.reason
    if state is CacheState.ENABLED and counts["load_failures"]:
        state = CacheState.FAILING
        reason = f"{counts['load_failures']} cache entries failed to load and were compiled again"
    entries = sum(1 for _ in Path(_SETTING.directory).iterdir()) if Path(_SETTING.directory).is_dir() else 0
    return {
        "state": state.value, "directory": _SETTING.directory, "source": _SETTING.source,
        "reason": reason, "entries": entries, **counts,
    }


# A report records the cache's state wherever the cache can have been configured: this module is
# imported by the backend, ``xlabridge.compile`` and ``xlabridge report --cache-dir``.
_environment.add_part("compilation_cache", status)
