"""Finding the user's own source line in Dynamo's stacks and FX nodes' stack traces.

A frame belongs to the user unless it lies inside torch, torch_xla, functorch or xlabridge's
library code (model libraries such as transformers count as the user's: that is where the
fix goes, and so do xlabridge's bundled examples).
"""

from __future__ import annotations

import dataclasses
import os
import re
import traceback
from collections.abc import Sequence

import torch

_FRAME_LINE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>[^\s]+)')


def _package_dir(module_name: str) -> str | None:
    import importlib.util

    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.realpath(list(spec.submodule_search_locations)[0]) + os.sep


_FRAMEWORK_DIRS = tuple(
    d
    for d in (
        os.path.realpath(os.path.dirname(torch.__file__)) + os.sep,
        _package_dir("torch_xla"),
        _package_dir("functorch"),
        os.path.realpath(os.path.dirname(os.path.dirname(__file__))) + os.sep,
    )
    if d
)


_EXAMPLES_DIR = os.path.realpath(os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples")) + os.sep


@dataclasses.dataclass(frozen=True)
class UserFrame:
    filename: str
    lineno: int
    function: str


UNKNOWN = UserFrame(filename="<unknown>", lineno=0, function="<unknown>")


def is_user_file(filename: str) -> bool:
    """Whether ``filename`` is outside the frameworks xlabridge reports on."""
    if filename.startswith("<"):
        return False
    path = os.path.realpath(filename)
    return path.startswith(_EXAMPLES_DIR) or not path.startswith(_FRAMEWORK_DIRS)


def innermost_user_frame(frames: Sequence[traceback.FrameSummary | UserFrame]) -> UserFrame:
    """The deepest frame of ``frames`` (outermost first) that is the user's code."""
    for frame in reversed(frames):
        if is_user_file(frame.filename):
            return UserFrame(frame.filename, int(frame.lineno or 0), getattr(frame, "name", None) or frame.function)
    return UNKNOWN


def frame_from_stack_trace(stack_trace: str | None) -> UserFrame:
    """The user's frame in an FX node's ``meta["stack_trace"]`` text (outermost first)."""
    if not stack_trace:
        return UNKNOWN
    frames = [
        UserFrame(m["file"], int(m["line"]), m["func"]) for m in _FRAME_LINE.finditer(stack_trace)
    ]
    return innermost_user_frame(frames)
