"""``xlabridge report`` under signals, as a scheduler or a user sends them: SIGTERM sent to the
command (``kill``, a preempted VM's agent) goes on to the script, whose handler runs; SIGINT sent
to it alone goes on the second time (the first, from a terminal, reached the script already, being
in the same process group); either way the report is still written and the exit status is the
script's as a shell gives it (Python exits with 130 after an uncaught KeyboardInterrupt)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent(
    """
    import pathlib, signal, sys, time

    here = pathlib.Path(__file__).parent

    def on_term(signum, frame):
        (here / "handled").write_text(signal.Signals(signum).name)
        sys.exit(7)

    signal.signal(signal.SIGTERM, on_term)
    (here / "ready").write_text("ready")
    while True:
        time.sleep(0.1)
    """
)


def _start(tmp_path: Path) -> subprocess.Popen:
    (tmp_path / "child.py").write_text(CHILD)
    job = subprocess.Popen(
        [sys.executable, "-m", "xlabridge.cli", "report", "--json", str(tmp_path / "report.json"), "--",
         sys.executable, str(tmp_path / "child.py")],
        cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (tmp_path / "ready").exists() and time.monotonic() < deadline and job.poll() is None:
        time.sleep(0.1)
    assert (tmp_path / "ready").exists(), job.stderr.read()
    return job


def test_sigterm_to_the_command_reaches_the_scripts_handler_and_the_report_is_written(tmp_path):
    job = _start(tmp_path)
    job.send_signal(signal.SIGTERM)
    assert job.wait(timeout=120) == 7
    assert (tmp_path / "handled").read_text() == "SIGTERM"
    (process,) = json.loads((tmp_path / "report.json").read_text())["processes"]
    assert (process["ending"], process["exit_status"], process["signal"]) == ("failed", 7, "SIGTERM")
    assert "(on_term)" in process["how"]


def test_sigint_to_the_command_alone_goes_on_the_second_time(tmp_path):
    job = _start(tmp_path)
    job.send_signal(signal.SIGINT)
    time.sleep(1.5)
    assert job.poll() is None, "a terminal's Ctrl-C reaches the script itself: the first is not sent again"
    job.send_signal(signal.SIGINT)
    assert job.wait(timeout=120) == 130
    (process,) = json.loads((tmp_path / "report.json").read_text())["processes"]
    assert (process["ending"], process["exit_status"], process["signal"]) == ("killed", 130, "SIGINT")
    assert process["exception"].startswith("KeyboardInterrupt")
