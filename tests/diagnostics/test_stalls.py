"""Stalls: with a stall option, a step that makes no progress for that long is reported where it
is: a sleep inside a compiled function (Dynamo breaks the graph there and runs it in Python), and
a collective that waits for a rank that never comes (torch.distributed's gloo, two processes), at
the user's line (against ``inspect`` and the script's own lines). A process stuck in that
collective still dies of SIGTERM at once, as it would without xlabridge, and its report says so.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import requires_xla
from xlabridge.diagnostics import diagnose

REPO = Path(__file__).resolve().parents[2]


def _sleeping_step(x):
    y = (x * 2).sin()
    time.sleep(1.0)  # the stalled line
    return y.cos()


@requires_xla
def test_a_sleep_inside_a_compiled_function_is_a_stall_at_its_line(xla_device):
    import torch_xla

    compiled = torch.compile(_sleeping_step, backend="openxla")
    x = torch.randn(8, device=xla_device)
    compiled(x)  # compiled before observing: the stalls below are the sleeps
    torch_xla.sync()
    with diagnose(stall_after=0.4) as report:
        for _ in range(2):
            compiled(x)
            torch_xla.sync()
    lines, first = inspect.getsourcelines(_sleeping_step)
    sleep_line = first + next(i for i, line in enumerate(lines) if "the stalled line" in line)
    stalls = [f for f in report.findings if f.kind == "stall"]
    at_sleep = [f for f in stalls if (f.filename, f.lineno, f.function) == (__file__, sleep_line, "_sleeping_step")]
    assert len(at_sleep) == 2, [f.message for f in stalls]  # one per step
    for stall in at_sleep:
        assert 0.9 <= stall.cost_seconds < 5 and "then the step went on" in stall.message


def test_the_stall_option_is_checked_by_name():
    with pytest.raises(ValueError, match=r"diagnose: 'stall_after' must be a number of seconds > 0, got -1"):
        with diagnose(stall_after=-1):
            pass
    done = subprocess.run([sys.executable, "-m", "xlabridge.cli", "report", "--stall-after", "soon", "--", "true"],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 2 and "--stall-after must be a number of seconds > 0, got 'soon'" in done.stderr


RANK = textwrap.dedent(
    """
    import pathlib, sys, time, torch, torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(4)
    if dist.get_rank() == 1:  # the rank that does not come
        release = pathlib.Path(sys.argv[1])
        while not release.exists():
            time.sleep(0.1)
    dist.all_reduce(tensor)  # rank 0 waits here
    print(tensor.tolist())
    """
)

LAUNCHER = textwrap.dedent(
    """
    import json, os, pathlib, signal, socket, subprocess, sys, time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    here = pathlib.Path(__file__).parent
    release, out = here / "release", here / "statuses.json"
    ranks = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        ranks.append(subprocess.Popen([sys.executable, str(here / "rank.py"), str(release)], env=env))
    log = pathlib.Path(os.environ["XLABRIDGE_REPORT_DIR"]) / f"events-{ranks[0].pid}.jsonl"
    deadline = time.monotonic() + 300
    # rank 0's stall reported in the collective, then the scheduler's SIGTERM
    while time.monotonic() < deadline and not (log.exists() and "all_reduce" in log.read_text()):
        time.sleep(0.2)
    ranks[0].send_signal(signal.SIGTERM)
    sent = time.monotonic()
    try:
        first = ranks[0].wait(timeout=60)
    except subprocess.TimeoutExpired:
        ranks[0].kill()
        first = ranks[0].wait()
    seconds = time.monotonic() - sent
    release.write_text("go")
    try:
        second = ranks[1].wait(timeout=120)
    except subprocess.TimeoutExpired:
        ranks[1].kill()
        second = ranks[1].wait()
    out.write_text(json.dumps({"pids": [r.pid for r in ranks], "statuses": [first, second], "seconds": seconds}))
    """
)


def test_a_collective_waiting_for_a_missing_rank_is_a_stall_and_sigterm_still_ends_it(tmp_path):
    (tmp_path / "rank.py").write_text(RANK)
    (tmp_path / "launch.py").write_text(LAUNCHER)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-m", "xlabridge.cli", "report", "--stall-after", "2", "--events", str(tmp_path / "events"),
         "--json", str(tmp_path / "report.json"), "--", sys.executable, str(tmp_path / "launch.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    launched = json.loads((tmp_path / "statuses.json").read_text())
    assert launched["statuses"][0] == -15, "rank 0 dies of SIGTERM while blocked in gloo, as without xlabridge"
    assert launched["seconds"] < 10
    report = json.loads((tmp_path / "report.json").read_text())
    rank0 = next(p for p in report["processes"] if p["pid"] == launched["pids"][0])
    assert (rank0["rank"], rank0["ending"], rank0["signal"], rank0["exit_status"]) == (0, "killed", "SIGTERM", 143)
    assert "before it could write a word" not in rank0["how"], "its observation ended before the signal took it"
    collective_line = next(n for n, line in enumerate(RANK.splitlines(), start=1) if "dist.all_reduce" in line)
    stalls = [f for f in report["findings"] if f["kind"] == "stall" and f["pid"] == rank0["pid"]]
    assert stalls, [f["message"] for f in report["findings"]]
    assert any((f["filename"], f["lineno"], f["category"]) == (str(tmp_path / "rank.py"), collective_line, "collective")
               and "waiting in the collective all_reduce" in f["message"] for f in stalls)
