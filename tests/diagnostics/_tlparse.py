"""tlparse itself (the ``tlparse`` wheel, pinned in the test environments) as the reference for what a
torch trace holds: it is run on a trace directory and its output read back (its ``compile_directory.json``:
each compile id's artifacts, and the artifact files it writes)."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

_COMPILE_ID = re.compile(r"^\[(?:!(?P<autograd>\d+)/)?(?P<frame>\d+)/(?P<attempt>\d+)(?:_\d+)?\]$")


def executable() -> str:
    """The ``tlparse`` binary of this environment (installed beside its Python)."""
    found = Path(sys.executable).with_name("tlparse")
    if found.exists():
        return str(found)
    which = shutil.which("tlparse")
    if which is None:
        pytest.fail("tlparse is not installed in this environment: it is pinned in its requirements file")
    return which


def run(path: Path, out: Path, *, all_ranks: bool = False) -> None:
    """``tlparse PATH -o OUT --no-browser`` (``--all-ranks-html`` for a directory of several ranks)."""
    command = [executable(), str(path), "-o", str(out), "--no-browser", "--overwrite"]
    if all_ranks:
        command.append("--all-ranks-html")
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


@dataclasses.dataclass
class Parsed:
    """What tlparse made of one log: per compile id (``0/1``), the artifacts it lists."""

    out: Path
    artifacts: dict[str, list[dict]]

    def named(self, prefix: str) -> list[tuple[str, str]]:
        """``(compile id, text of the file)`` of every artifact whose name starts with ``prefix``."""
        return [(cid, (self.out / a["url"]).read_text(encoding="utf-8")) for cid, items in self.artifacts.items()
                for a in items if re.fullmatch(rf"{re.escape(prefix)}_\d+\.(txt|json)", a["name"])]

    def count(self, prefix: str) -> int:
        return len(self.named(prefix))

    def compile_ids(self, prefix: str) -> list[str]:
        return sorted(cid for cid, _ in self.named(prefix))


def read(out: Path) -> Parsed:
    """tlparse's output directory for one log, read back."""
    directory = json.loads((out / "compile_directory.json").read_text(encoding="utf-8"))
    artifacts: dict[str, list[dict]] = {}
    for key, entry in directory.items():
        match = _COMPILE_ID.match(key)
        cid = "" if match is None else (
            f"!{match['autograd']}/{match['frame']}/{match['attempt']}" if match["autograd"] else
            f"{match['frame']}/{match['attempt']}")
        artifacts.setdefault(cid, []).extend(entry["artifacts"] if isinstance(entry, dict) else entry)
    return Parsed(out, artifacts)


def parse_log(log: Path, out: Path) -> Parsed:
    run(log, out)
    return read(out)


def trace(script: Path, directory: Path, *args: str, env: dict[str, str] | None = None, timeout: int = 600) -> str:
    """Run ``script`` with ``TORCH_TRACE=directory`` (no xlabridge on its path); its stdout."""
    import os

    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    environment.update(env or {}, TORCH_TRACE=str(directory))
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=environment,
                          timeout=timeout, cwd=script.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr
