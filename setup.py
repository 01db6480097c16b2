"""Packaging hook: wheels carry the C++ sources of ``csrc/`` as ``xlabridge/_csrc``.

xlabridge builds its C++ kernels on first use on the user's machine (against the torch it
finds there), so a wheel ships the sources, not binaries. Everything else is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SOURCES = Path(__file__).resolve().parent / "csrc"


class BuildPyWithCSources(build_py):
    """``build_py`` that also copies ``csrc/`` into the built package as ``xlabridge/_csrc``."""

    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            shutil.copytree(SOURCES, Path(self.build_lib) / "xlabridge" / "_csrc", dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPyWithCSources})
