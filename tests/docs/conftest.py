"""Runs every example and console command of the docs once per session, several at a time.

Each run is a fresh process (as a reader runs it), most of its time spent importing torch and
torch_xla and compiling, so the runs overlap: ``XLABRIDGE_DOCS_JOBS`` of them at once (3 by
default). A test waits for the run it checks; the first to ask starts them all.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.docs import _pages

_OUTPUT_FLAGS = {"--json", "--html", "--trace", "--events", "--read"}
"""Options whose value is a file or directory the command writes or reads: kept in a scratch
directory, not in the checkout."""

TIMEOUT = 600


@dataclasses.dataclass
class Run:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    def failure(self) -> str:
        return f"{shlex.join(self.argv)} exited with {self.returncode}:\n{self.stderr[-4000:]}"


def _env() -> dict[str, str]:
    env = dict(os.environ, PJRT_DEVICE="CPU")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_pages.ROOT), env.get("PYTHONPATH")) if p)
    return env


def _argv(command: str, scratch: Path) -> list[str]:
    words = shlex.split(command)
    if words[0] == "xlabridge":
        words = ["python", "-m", "xlabridge.cli", *words[1:]]
    argv, previous = [], ""
    for word in words:
        if word == "python":
            word = sys.executable
        elif word == "torchrun":  # torch's launcher, installed beside this Python
            word = str(Path(sys.executable).with_name("torchrun"))
        elif previous in _OUTPUT_FLAGS:
            word = str(scratch / word)
        argv.append(word)
        previous = word
    return argv


def _run(argv: list[str], cwd: Path, scratch: Path) -> Run:
    done = subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT)
    stdout = done.stdout.replace(f"{scratch}/", "").replace(str(scratch), ".")
    return Run(argv, done.returncode, stdout, done.stderr)


def run_example(name: str) -> Run:
    with tempfile.TemporaryDirectory(prefix="xlabridge-docs-") as scratch:
        return _run([sys.executable, str(_pages.EXAMPLES / name)], Path(scratch), Path(scratch))


def run_console(commands: tuple[str, ...]) -> list[Run]:
    """The commands of one console block in order, from the repository root, until one fails."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="xlabridge-docs-") as scratch:
        for command in commands:
            runs.append(_run(_argv(command, Path(scratch)), _pages.ROOT, Path(scratch)))
            if runs[-1].returncode:
                break
    return runs


def run_python(code: str) -> Run:
    with tempfile.TemporaryDirectory(prefix="xlabridge-docs-") as scratch:
        script = Path(scratch) / "block.py"
        script.write_text(code, encoding="utf-8")
        return _run([sys.executable, str(script)], Path(scratch), Path(scratch))


def examples_to_run() -> list[str]:
    """The example files, less those a console block of the docs already runs as its command."""
    commands = " ".join(
        command for block in _pages.all_blocks() if block.language == "console"
        for command, _ in _pages.console_commands(block)
    )
    return [p.name for p in sorted(_pages.EXAMPLES.glob("*.py")) if f"docs/examples/{p.name}" not in commands]


class Runs:
    """Every run the docs tests check, started together on first use."""

    def __init__(self) -> None:
        self.jobs: dict[object, tuple] = {}
        for name in examples_to_run():
            self.jobs[name] = (run_example, name)
        for block in _pages.all_blocks():
            if block.language == "console":
                commands = tuple(command for command, _ in _pages.console_commands(block))
                self.jobs[commands] = (run_console, commands)
            elif block.language == "python":
                self.jobs[block.body] = (run_python, block.body)
        self._futures: dict[object, concurrent.futures.Future] | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def result(self, key: object):
        if self._futures is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(int(os.environ.get("XLABRIDGE_DOCS_JOBS", "3")))
            self._futures = {k: self._pool.submit(fn, arg) for k, (fn, arg) in self.jobs.items()}
        return self._futures[key].result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)


@pytest.fixture(scope="session")
def docs_runs():
    runs = Runs()
    yield runs
    runs.close()
