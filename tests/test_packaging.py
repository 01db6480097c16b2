"""The wheel carries what an installed xlabridge needs at run time: the C++ sources it builds
on first use and the start-up hook of ``xlabridge report``."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_ships_csrc_and_the_installed_package_finds_it(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for tree in ("xlabridge", "csrc"):
        shutil.copytree(ROOT / tree, source / tree, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(source), "-w", str(wheels)],
        check=True, capture_output=True, text=True,
    )
    (wheel,) = wheels.glob("xlabridge-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "xlabridge/_csrc/autocast/autocast_xla.cpp" in names
    assert "xlabridge/diagnostics/_observe/bootstrap/sitecustomize.py" in names

    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        check=True, capture_output=True, text=True,
    )
    found = subprocess.run(
        [sys.executable, "-c", "from xlabridge.autocast import _build; print(_build.source_path())"],
        cwd=tmp_path, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}, check=True, capture_output=True, text=True,
    ).stdout.strip()
    assert Path(found) == target / "xlabridge" / "_csrc" / "autocast" / "autocast_xla.cpp"
    assert Path(found).read_text() == (ROOT / "csrc" / "autocast" / "autocast_xla.cpp").read_text()
