"""Each probe's state in this process, and how a probe says it cannot see.

Probes call ``unavailable`` or ``silent`` here; the registry, which installs them, reads the
states (``of``) and clears them when an observation starts (``reset``). Probes never import
the registry, so the registry depends on the probes and not the other way round.
"""

from __future__ import annotations

import logging
import warnings

from xlabridge.diagnostics._observe import recorder as _recorder
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe.probes import ProbeInfo, Status
from xlabridge.errors import DiagnosticsWarning

logger = logging.getLogger(__name__)

_statuses: dict[str, Status] = {}
_warned: set[str] = set()


def of(info: ProbeInfo) -> Status:
    """``info``'s status (``ok`` until a probe says otherwise)."""
    return _statuses.setdefault(info.name, Status(info))


def reset() -> None:
    """Every probe back to ``ok``, and each problem warned about once more (a new observation)."""
    _statuses.clear()
    _warned.clear()


def _set(info: ProbeInfo, state: ev.ProbeState, reason: str) -> None:
    status = of(info)
    if status.state == state and status.reason == reason:
        return
    status.state, status.reason = state, reason
    message = (
        f"xlabridge diagnostics: probe {info.name!r} ({info.surface}) is {state.value}: {reason}. "
        f"The report lacks {info.sees}; the model runs unchanged."
    )
    logger.debug("%s", message)
    _recorder.emit(status.event(_recorder.stamp()))
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, DiagnosticsWarning, stacklevel=4)


def unavailable(info: ProbeInfo, reason: str) -> None:
    """``info``'s upstream surface is missing or changed."""
    _set(info, ev.ProbeState.UNAVAILABLE, reason)


def silent(info: ProbeInfo, reason: str) -> None:
    """``info`` did not fire where it should have."""
    _set(info, ev.ProbeState.SILENT, reason)
