"""Decide which AutocastXLA kernels are missing, and register exactly those.

The decision (``plan``) is a pure function of the dispatcher's state, so it can be tested
against a dispatcher that lacks einsum. Registration goes through the C++ extension, built
on first need; where it cannot be built, a warning (once) and the Python kernels of
``_pyfallback`` instead. Nothing is registered for an op that already has an AutocastXLA
kernel, whoever registered it: torch_xla's kernels are never replaced, and nothing warns.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import warnings
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from xlabridge import _env, _optional
from xlabridge._upstream import torch_xla as upstream_xla
from xlabridge.autocast import _probe
from xlabridge.autocast._ops import DEFAULT_SPECS, NOT_APPLICABLE, PARITY_SPECS, TPU_EXCEPTIONS, OpSpec
from xlabridge.errors import AutocastBuildWarning

KEY = "AutocastXLA"
BACKEND_ENV = _env.AUTOCAST_BACKEND
BACKENDS = ("auto", "cpp", "python")


class _Registrar(Protocol):
    backend: str

    def register(self, specs: list[OpSpec]) -> list[str]: ...

    def unregister(self, names: list[str]) -> None: ...


class CppRegistrar:
    """Registers the compiled kernels through the extension's ``xlabridge_autocast`` ops."""

    backend = "cpp"

    def __init__(self) -> None:
        from xlabridge.autocast._build import load_extension

        load_extension()
        import torch

        self._ops = torch.ops.xlabridge_autocast

    def register(self, specs: list[OpSpec]) -> list[str]:
        """Register ``specs`` not registered here yet; the names registered."""
        return list(self._ops.register_ops([spec.name for spec in specs]))

    def unregister(self, names: list[str]) -> None:
        """Remove the registrations made here for ``names``."""
        self._ops.unregister_ops(list(names))


_lock = threading.RLock()
_registrars: dict[str, _Registrar] = {}
_ours: dict[str, str] = {}  # op -> backend that registered it, for ops registered by xlabridge
_by_parity: set[str] = set()


def requested_backend() -> str:
    """The backend ``$XLABRIDGE_AUTOCAST_BACKEND`` asks for ("auto" when unset)."""
    value = _env.get(BACKEND_ENV, "auto")
    if value not in BACKENDS:
        raise ValueError(f"{BACKEND_ENV} must be one of {BACKENDS}, got {value!r}")
    return value


def registrar(backend: str | None = None) -> _Registrar:
    """The registrar for ``backend`` ("auto": C++, or Python with a warning if it cannot be built)."""
    backend = backend or requested_backend()
    if backend not in BACKENDS:
        raise ValueError(f"autocast 'backend' must be one of {BACKENDS}, got {backend!r}")
    with _lock:
        if backend == "auto":
            if "auto" not in _registrars:
                try:
                    _registrars["auto"] = registrar("cpp")
                except Exception as error:  # noqa: BLE001 - any build failure falls back
                    warnings.warn(
                        f"xlabridge autocast: could not build the C++ AutocastXLA kernels "
                        f"({type(error).__name__}: {str(error).strip().splitlines()[-1] if str(error).strip() else ''}); "
                        f"using pure-Python torch.library kernels for the same ops instead, which trace "
                        f"more slowly. Install a C++ compiler (g++) and ninja to get the C++ kernels.",
                        AutocastBuildWarning,
                        stacklevel=3,
                    )
                    _registrars["auto"] = registrar("python")
            return _registrars["auto"]
        if backend not in _registrars:
            if backend == "cpp":
                _registrars["cpp"] = CppRegistrar()
            else:
                from xlabridge.autocast._pyfallback import PythonRegistrar

                _registrars["python"] = PythonRegistrar()
        return _registrars[backend]


def plan(specs: Iterable[OpSpec], has_kernel: Callable[[str], bool]) -> list[OpSpec]:
    """The specs to register: those whose op has no AutocastXLA kernel yet, in order, once each.

    ``has_kernel(op)`` answers from the dispatcher (``torch._C._dispatch_has_kernel_for_dispatch_key``)
    in real use and from a fake dispatcher state in tests.
    """
    chosen: list[OpSpec] = []
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen or has_kernel(spec.name):
            continue
        seen.add(spec.name)
        chosen.append(spec)
    return chosen


def _dispatcher_has_kernel(op: str) -> bool:
    return _probe.has_kernel(op, KEY)


def torch_xla_loaded() -> bool:
    """Whether torch_xla's C library is loaded, i.e. its AutocastXLA kernels are registered."""
    return upstream_xla.xlac_loaded()


def register(specs: Iterable[OpSpec], backend: str | None = None) -> list[str]:
    """Register the kernels of ``specs`` that the dispatcher lacks; the names registered."""
    with _lock:
        missing = plan(specs, _dispatcher_has_kernel)
        if not missing:
            return []
        chosen = registrar(backend)
        added = chosen.register(missing)
        for name in added:
            _ours[name] = chosen.backend
        _probe.invalidate()
        return added


def unregister(names: Iterable[str]) -> list[str]:
    """Remove kernels xlabridge registered for ``names`` (others are left alone); those removed."""
    removed = []
    with _lock:
        for name in list(names):
            backend = _ours.pop(name, None)
            if backend is None:
                continue
            for chosen in {id(r): r for r in _registrars.values()}.values():
                if chosen.backend == backend:
                    chosen.unregister([name])
            _by_parity.discard(name)
            removed.append(name)
        _probe.invalidate()
    return removed


def registered_by_xlabridge() -> dict[str, str]:
    """Ops whose AutocastXLA kernel xlabridge registered, with the backend ("cpp"/"python")."""
    with _lock:
        return dict(_ours)


def ensure_einsum(backend: str | None = None) -> list[str]:
    """Register ``DEFAULT_SPECS`` (einsum) where torch_xla lacks them; the names registered.

    Does nothing until torch_xla is loaded: registering first would make torch_xla's own
    registration, when it loads, override ours with a warning.
    """
    if not torch_xla_loaded():
        return []
    return register(DEFAULT_SPECS, backend)


@dataclasses.dataclass(frozen=True)
class ParityResult:
    """What ``enable_parity()`` did, op by op.

    ``registered``: kernels added now. ``present``: ops that already had an AutocastXLA
    kernel (torch_xla's or an earlier call's). ``skipped``: ops left out, with the reason
    (a documented TPU exception, an op CUDA's kernel no longer treats as declared, ...).
    ``backend``: "cpp" or "python", the kernels used; "none" when nothing was registered.
    """

    registered: tuple[str, ...]
    present: tuple[str, ...]
    skipped: dict[str, str]
    backend: str

    def to_dict(self) -> dict[str, Any]:
        """Plain data, for JSON."""
        return {
            "registered": list(self.registered),
            "present": list(self.present),
            "skipped": dict(self.skipped),
            "backend": self.backend,
        }

    def to_json(self) -> str:
        """``to_dict()`` as indented JSON."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def __str__(self) -> str:
        lines = [
            f"autocast parity ({self.backend} kernels): {len(self.registered)} registered, "
            f"{len(self.present)} already present, {len(self.skipped)} skipped"
        ]
        lines += [f"  + {name}" for name in self.registered]
        lines += [f"  - {name}: {reason}" for name, reason in sorted(self.skipped.items())]
        return "\n".join(lines)


def enable_parity(backend: str | None = None) -> ParityResult:
    """Register, for AutocastXLA, the ops AutocastCUDA has and torch_xla lacks, with CUDA's policy."""
    _optional.require("torch_xla", "xlabridge.autocast.enable_parity()")
    import torch_xla  # noqa: F401 - loads torch_xla's own AutocastXLA kernels first

    skipped: dict[str, str] = {}
    for name, reason in {**NOT_APPLICABLE, **TPU_EXCEPTIONS}.items():
        skipped[name] = reason
    candidates = []
    for spec in PARITY_SPECS:
        live = _probe.probe(spec.name, "AutocastCUDA")
        if live.policy is not spec.cast.policy:
            skipped[spec.name] = (
                f"AutocastCUDA now gives it policy {live.policy.value!r}, not the declared "
                f"{spec.cast.policy.value!r}; not copied until _ops.py is updated"
            )
            continue
        candidates.append(spec)
    with _lock:
        present = tuple(spec.name for spec in candidates if _dispatcher_has_kernel(spec.name))
        added = register(candidates, backend)
        _by_parity.update(added)
        used = registrar(backend).backend if added else "none"
    return ParityResult(tuple(added), present, skipped, used)


def disable_parity() -> list[str]:
    """Remove the kernels ``enable_parity()`` registered; the names removed."""
    with _lock:
        return unregister(sorted(_by_parity))
