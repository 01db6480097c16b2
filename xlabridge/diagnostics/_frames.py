"""Which frames of a stack are the user's code, and reading stacks out of FX nodes.

The rule: a frame is the user's when its file lies in the directory of the program being run
(the ``__main__`` file, or the file ``xlabridge compare`` loads), or outside both the packages
that compile and observe it (torch, torch_xla, functorch, xlabridge) and Python's standard
library (``contextlib`` wraps many calls; it is never where the fix goes). Model libraries such
as transformers count as the user's: that is where the fix goes. The program's own directory
comes first so that a program shipped inside one of those packages (xlabridge's bundled
examples, run with ``python -m xlabridge.examples.demo``) is still the program being reported on.

A break or a graph inside a library (torch's DDP, FSDP's hooks, an installed package) is also
placed in that library: ``UserCodeRule.library`` names the package of the innermost frame outside
the user's program and Python's standard library, where that frame is in torch or another
installed package, so that a report can show the library's line beside the user's line that
reached it (the library's code is not where the user's fix goes, but it says what broke).

A process records the directories it saw (``framework_paths`` and ``main_file`` in its
``process_start`` event), and a report applies the rule with them, so a log read on another
machine names the same frames.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import re
import sys
import sysconfig
from collections.abc import Iterable, Mapping, Sequence

from xlabridge.diagnostics.events import Frame, innermost
from xlabridge.diagnostics.report import UNKNOWN_NAME

_FRAMEWORKS = ("torch", "torch_xla", "functorch", "xlabridge", "torch_tpu", "torchax")
_STDLIB = "python-stdlib"
_SITE_DIRS = ("site-packages", "dist-packages")
"""Installed packages may live under the standard library's directory: they stay the user's."""
_STAND_INS = re.compile(r"(^|[\\/])torch[\\/]_dynamo[\\/]polyfills[\\/]")
"""Dynamo's polyfills: Python stand-ins it traces in place of builtins (``object.__new__`` of a context
manager), which torch's stack of a break shows inside the standard library's frames on newer torch."""
_FRAME_LINE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')

UNKNOWN = Frame(filename=UNKNOWN_NAME, lineno=0, function=UNKNOWN_NAME)


def _package_dirs(module_name: str) -> list[str]:
    """The package directory of ``module_name`` as imported and resolved, without importing it."""
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    found = list(spec.submodule_search_locations)[0]
    return sorted({os.path.normpath(found), os.path.realpath(found)})


def framework_paths() -> dict[str, list[str]]:
    """Where this process has each framework package (as imported, and resolved)."""
    return {name: list(dirs) for name, dirs in _framework_paths().items()}


@functools.cache
def _framework_paths() -> dict[str, tuple[str, ...]]:
    paths = {name: tuple(dirs) for name in _FRAMEWORKS if (dirs := _package_dirs(name))}
    stdlib = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib")}
    paths[_STDLIB] = tuple(sorted({os.path.normpath(d) for d in stdlib} | {os.path.realpath(d) for d in stdlib}))
    return paths


def main_file() -> str | None:
    """The ``__main__`` script of this process, if it has one."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return os.path.realpath(path) if path else None


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def _in_stdlib(path: str, stdlib: str) -> bool:
    if not _under(path, stdlib):
        return False
    first = os.path.relpath(path, stdlib).split(os.sep, 1)[0]
    return first not in _SITE_DIRS


@dataclasses.dataclass(frozen=True)
class UserCodeRule:
    """The rule above, for one process's directories."""

    framework_dirs: tuple[str, ...]
    program_dir: str | None = None
    stdlib_dirs: tuple[str, ...] = ()

    @classmethod
    def of(cls, paths: Mapping[str, Iterable[str]], program: str | None) -> UserCodeRule:
        dirs = tuple(os.path.normpath(d) for name, ds in paths.items() if name != _STDLIB for d in ds)
        stdlib = tuple(os.path.normpath(d) for d in paths.get(_STDLIB, ()))
        return cls(dirs, os.path.dirname(os.path.normpath(program)) if program else None, stdlib)

    def is_user(self, filename: str) -> bool:
        if not filename or filename.startswith("<"):
            return False
        paths = {os.path.normpath(filename)}
        if os.path.exists(filename):
            paths.add(os.path.realpath(filename))
        if self.program_dir and any(_under(p, self.program_dir) for p in paths):
            return True
        if any(_in_stdlib(p, d) for p in paths for d in self.stdlib_dirs):
            return False
        return not any(_under(p, d) for p in paths for d in self.framework_dirs)

    def innermost(self, frames: Sequence[Frame]) -> Frame:
        """The deepest of ``frames`` (outermost first) in the user's code, or ``UNKNOWN``."""
        return innermost(frames, self.is_user) or UNKNOWN

    def package(self, filename: str) -> str:
        """The library ``filename`` belongs to (``torch``, ``transformers``): one of the frameworks,
        or a package installed in a ``site-packages``/``dist-packages`` directory; ``""`` for the
        program's own files, Python's standard library and anything else."""
        if not filename or filename.startswith("<"):
            return ""
        path = os.path.normpath(filename)
        if self.program_dir and _under(path, self.program_dir):
            return ""
        if any(_in_stdlib(path, d) for d in self.stdlib_dirs):
            return ""
        for directory in self.framework_dirs:
            if _under(path, directory):
                return os.path.basename(directory.rstrip(os.sep))
        parts = path.split(os.sep)
        for index in range(len(parts) - 2, -1, -1):
            if parts[index] in _SITE_DIRS:
                return os.path.splitext(parts[index + 1])[0]
        return ""

    def library(self, frames: Sequence[Frame]) -> tuple[str, Frame] | None:
        """``(package, frame)`` where the innermost of ``frames`` outside Python's standard library
        (``contextlib`` wraps library calls too) and Dynamo's polyfills is a library's (``package``);
        None where it is the user's own code, or there is none."""
        for frame in reversed(frames):
            path = os.path.normpath(frame.filename) if frame.filename else ""
            if path and (any(_in_stdlib(path, d) for d in self.stdlib_dirs) or _STAND_INS.search(path)):
                continue
            package = self.package(frame.filename)
            return (package, frame) if package else None
        return None


_program_override: str | None = None


def set_program(path: str | None) -> None:
    """Name the program being reported on when it is not ``__main__`` (``xlabridge compare``'s target)."""
    global _program_override
    _program_override = os.path.realpath(path) if path else None


def program_file() -> str | None:
    """The program being reported on: the override, else ``__main__``'s file."""
    return _program_override or main_file()


def current_rule() -> UserCodeRule:
    """The rule for this process as it is now."""
    return _rule(program_file())


@functools.cache
def _rule(program: str | None) -> UserCodeRule:
    return UserCodeRule.of(_framework_paths(), program)


def is_user_file(filename: str) -> bool:
    """Whether ``filename`` is the user's code in this process (see the module's rule)."""
    return current_rule().is_user(filename)


def from_stack_trace(stack_trace: str | None) -> list[Frame]:
    """The frames of an FX node's ``meta["stack_trace"]`` text, outermost first."""
    if not stack_trace:
        return []
    return [Frame(m["file"], int(m["line"]), m["func"]) for m in _FRAME_LINE.finditer(stack_trace)]


def from_summaries(summaries: Iterable[object]) -> list[Frame]:
    """Frames of ``traceback.FrameSummary``-like objects (``filename``, ``lineno``, ``name``)."""
    return [
        Frame(str(s.filename), int(getattr(s, "lineno", 0) or 0), str(getattr(s, "name", "") or ""))
        for s in summaries
    ]


def current_stack(skip: int = 1) -> list[Frame]:
    """The calling stack, outermost first, without the innermost ``skip`` frames (this function's
    caller is skipped by default); source lines are not read."""
    frames = []
    frame = sys._getframe(skip)
    while frame is not None:
        frames.append(Frame(frame.f_code.co_filename, frame.f_lineno or 0, frame.f_code.co_name))
        frame = frame.f_back
    frames.reverse()
    return frames
