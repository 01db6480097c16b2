"""The optimizer steps this process has taken, counted by the ``dynamo.requests`` probe's step hook and
read by the compile probe (each compilation carries the step it happened at). A leaf: it imports nothing."""

from __future__ import annotations

_TAKEN = [0, None]
"""Steps taken, and when the last ended (monotonic; None before the first)."""


def taken() -> int:
    """Optimizer steps taken so far."""
    return _TAKEN[0]


def last() -> float | None:
    """When the last step ended (monotonic), or None."""
    return _TAKEN[1]


def count(end: float) -> None:
    """One more step, ended at ``end``."""
    _TAKEN[0] += 1
    _TAKEN[1] = end
