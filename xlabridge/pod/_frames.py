"""Python frames as the pod modules read them, and the innermost one that is the user's.

Frames come from torch_xla's debug and save-tensors files (the stack that triggered a graph)
and from an HLO module proto's stack-frame index (the stack that created each instruction).
Which frame is the user's is not decided here: a report applies its rule (the diagnostics'
user-code rule, recorded per process) through the ``is_user`` predicate, so a capture read on
another machine names the same line. ``Frame`` has the fields of the diagnostics events' frame.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

__all__ = ["Frame", "innermost"]


@dataclasses.dataclass(frozen=True)
class Frame:
    """One Python frame: file, line and function."""

    filename: str
    lineno: int
    function: str

    def __str__(self) -> str:
        where = f"{self.filename}:{self.lineno}"
        return f"{where} ({self.function})" if self.function else where


def innermost(frames: Sequence[Frame], is_user: Callable[[str], bool]) -> Frame | None:
    """The deepest of ``frames`` (outermost first) whose file ``is_user``, or ``None``."""
    return next((frame for frame in reversed(frames) if is_user(frame.filename)), None)
