"""Runs that end badly, as real jobs end: a compiled script run under ``xlabridge report``, ended
after some steps by SIGKILL (what the kernel's OOM killer sends), SIGTERM (a preempted TPU VM, an
evicted pod) with and without a handler of its own, SIGINT, ``os._exit`` and a memory limit.

Every event before the end is in the report (its graphs, breaks and calls, against
``torch._dynamo.explain`` and the steps the script ran), the report says how the process ended,
and ``xlabridge report`` exits with the status a shell gives the same script run alone (the
reference: ``sh -c 'python script.py; echo $?'``).
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import requires_xla

pytestmark = requires_xla

REPO = Path(__file__).resolve().parents[2]
STEPS = 5

SCRIPT = textwrap.dedent(
    """
    import os, resource, signal, sys, time, torch, torch_xla

    def on_term(signum, frame):
        with open(os.environ["MARK"], "w") as mark:
            mark.write(f"handled {signum}")
        sys.exit(5)

    if "{ending}" == "handler":
        signal.signal(signal.SIGTERM, on_term)

    def step(x):
        y = (x * 3).sin()
        print("logging inside the step")
        return torch.exp2(y).cos()

    compiled = torch.compile(step, backend="{backend}")
    x = torch.randn(32, device=torch_xla.device())
    for _ in range({steps}):
        compiled(x)
        torch_xla.sync()
    time.sleep(1)  # a killed process may lose its last second of running sums, no more
    ending = "{ending}"
    if ending == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif ending in ("sigterm", "handler"):
        os.kill(os.getpid(), signal.SIGTERM)
    elif ending == "sigint":
        os.kill(os.getpid(), signal.SIGINT)
    elif ending == "os_exit":
        os._exit(3)
    elif ending == "memory":
        pages = int(open("/proc/self/statm").read().split()[0])
        resource.setrlimit(resource.RLIMIT_AS, (pages * os.sysconf("SC_PAGE_SIZE") + 2**29, resource.RLIM_INFINITY))
        hoard = torch.empty(2**33, dtype=torch.uint8)
    time.sleep(30)
    """
)

RUNS = {
    "sigkill": "openxla",
    "sigkill_xlabridge": "xlabridge",
    "sigterm": "openxla",
    "handler": "openxla",
    "sigint": "openxla",
    "os_exit": "openxla",
    "memory": "openxla",
    "memory_xlabridge": "xlabridge",
}


def _script(directory: Path, name: str) -> Path:
    ending = name.split("_xlabridge")[0]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "train.py"
    path.write_text(SCRIPT.replace("{ending}", ending).replace("{backend}", RUNS[name]).replace("{steps}", str(STEPS)))
    return path


def _env(directory: Path, mark: str) -> dict:
    import os

    return dict(os.environ, PJRT_DEVICE="CPU", PYTHONPATH=str(REPO), MARK=str(directory / mark))


def _observed(base: Path, name: str) -> dict:
    directory = base / name
    script = _script(directory, name)
    done = subprocess.run(
        [sys.executable, "-m", "xlabridge.cli", "report", "--events", str(directory / "events"), "--json",
         str(directory / "report.json"), "--", sys.executable, str(script)],
        cwd=directory, env=_env(directory, "observed-mark"), capture_output=True, text=True, timeout=600)
    return {"status": done.returncode, "stdout": done.stdout, "stderr": done.stderr, "script": script,
            "directory": directory, "report": json.loads((directory / "report.json").read_text())}


def _plain(base: Path, name: str) -> int:
    """The exit status a shell gives the script run alone."""
    directory = base / name / "plain"
    script = _script(directory, name)
    done = subprocess.run(["sh", "-c", f'"{sys.executable}" "{script}" > /dev/null 2>&1; echo "status=$?"'],
                          cwd=directory, env=_env(directory, "plain-mark"), capture_output=True, text=True,
                          timeout=600)
    return int(re.search(r"status=(\d+)", done.stdout).group(1))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    base = tmp_path_factory.mktemp("endings")
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        observed = {name: pool.submit(_observed, base, name) for name in RUNS}
        plain = {name: pool.submit(_plain, base, name) for name in RUNS if not name.endswith("_xlabridge")}
        result = {name: future.result() for name, future in observed.items()}
        for name, future in plain.items():
            result[name]["shell_status"] = future.result()
    return result


@pytest.fixture(scope="module")
def explained() -> tuple[int, int]:
    """``torch._dynamo.explain``'s graph and break counts of the script's step: the reference."""
    import torch
    import torch_xla

    namespace: dict = {"torch": torch}
    exec(textwrap.dedent('''
        def step(x):
            y = (x * 3).sin()
            print("logging inside the step")
            return torch.exp2(y).cos()
    '''), namespace)
    explanation = torch._dynamo.explain(namespace["step"])(torch.randn(32, device=torch_xla.device()))
    return explanation.graph_count, len(explanation.break_reasons)


def _line(script: Path, text: str) -> int:
    return next(n for n, line in enumerate(script.read_text().splitlines(), start=1) if text in line)


@pytest.mark.parametrize("name", list(RUNS))
def test_everything_before_the_end_is_in_the_report(runs, explained, name):
    run = runs[name]
    report, script = run["report"], run["script"]
    assert (report["dynamo"]["graph_count"], report["dynamo"]["break_count"]) == explained
    (dynamo_break,) = report["dynamo"]["breaks"]
    assert (dynamo_break["filename"], dynamo_break["lineno"]) == (str(script), _line(script, "print("))
    assert [(b["op"], b["lineno"]) for b in report["hlo"]["breaks"]] == [("aten::exp2", _line(script, "torch.exp2"))]
    assert [g["calls"] for g in report["hlo"]["graphs"]] == [STEPS, STEPS]
    (process,) = report["processes"]
    assert process["steps"] == STEPS
    (time,) = report["time"]
    assert 0 < time["tracing"] < time["wall"] and 0 < time["xla_compile"] < time["wall"]
    assert report["timeline"], "the timeline of a process that died ends at its last event"


@pytest.mark.parametrize("name", [n for n in RUNS if not n.endswith("_xlabridge")])
def test_the_exit_status_is_the_one_a_shell_gives(runs, name):
    assert runs[name]["status"] == runs[name]["shell_status"]


@pytest.mark.parametrize(("name", "ending", "status", "signal"), [
    ("sigkill", "killed", 137, "SIGKILL"),
    ("sigkill_xlabridge", "killed", 137, "SIGKILL"),
    ("sigterm", "killed", 143, "SIGTERM"),
    ("sigint", "killed", 130, "SIGINT"),
    ("os_exit", "failed", 3, ""),
    ("handler", "failed", 5, "SIGTERM"),
])
def test_the_report_says_how_the_process_ended(runs, name, ending, status, signal):
    run = runs[name]
    (process,) = run["report"]["processes"]
    assert (process["ending"], process["exit_status"], process["signal"]) == (ending, status, signal)
    assert run["status"] == status
    (finding,) = [f for f in run["report"]["findings"] if f["kind"] == "process-ended"]
    assert process["how"] in finding["message"]
    assert "process that did not end normally" in run["stdout"]


def test_a_terminating_signal_is_placed_at_the_line_it_arrived_at(runs):
    run = runs["sigterm"]
    (process,) = run["report"]["processes"]
    assert (process["filename"], process["lineno"]) == (str(run["script"]), _line(run["script"], "signal.SIGTERM)"))
    logs = list((run["directory"] / "events").glob("events-*.jsonl"))
    assert '"ending": "signal"' in logs[0].read_text(), "the process wrote its own end before the signal took it"


def test_sigterm_reaches_the_scripts_own_handler(runs):
    run = runs["handler"]
    assert (run["directory"] / "observed-mark").read_text() == "handled 15"
    assert (run["directory"] / "plain" / "plain-mark").read_text() == "handled 15"
    (process,) = run["report"]["processes"]
    assert f"handed to {run['script']}:" in process["how"] and "(on_term)" in process["how"]


@pytest.mark.parametrize("name", ["memory", "memory_xlabridge"])
def test_running_out_of_memory_is_named_at_the_allocation(runs, name):
    run = runs[name]
    (process,) = run["report"]["processes"]
    assert process["ending"] == "failed" and process["exit_status"] == 1
    assert process["exception"].startswith("RuntimeError") and "ran out of memory" in process["how"]
    assert (process["filename"], process["lineno"]) == (str(run["script"]), _line(run["script"], "hoard ="))


def test_the_logs_of_a_dead_process_read_back_to_the_same_report(runs, tmp_path):
    run = runs["sigkill"]
    again = tmp_path / "again.json"
    done = subprocess.run([sys.executable, "-m", "xlabridge.cli", "report", "--read", str(run["directory"] / "events"),
                           "--json", str(again)], cwd=run["directory"], capture_output=True, text=True, timeout=300,
                          env=_env(run["directory"], "mark"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(again.read_text()) == run["report"]


RANK = textwrap.dedent(
    """
    import os, signal, sys, time, torch, torch_xla

    rank = int(os.environ["RANK"])

    def step(x):
        y = (x * 3).sin()
        print("logging inside the step")
        return y.cos()

    compiled = torch.compile(step, backend="openxla")
    x = torch.randn(32, device=torch_xla.device())
    for n in range({steps}):
        compiled(x)
        torch_xla.sync()
        time.sleep(0.5)  # a step's length: the others go on for seconds after rank 2 dies
        if rank == 2 and n + 1 == {dies_after}:
            time.sleep(1)
            os.kill(os.getpid(), signal.SIGKILL)  # the rank the OOM killer takes
    """
)

LAUNCHER = textwrap.dedent(
    """
    import os, subprocess, sys

    ranks = [subprocess.Popen([sys.executable, sys.argv[1]], env=dict(os.environ, RANK=str(rank), WORLD_SIZE="4"))
             for rank in range(4)]
    print("statuses", [rank.wait() for rank in ranks])
    """
)
RANK_STEPS, DIES_AFTER = 8, 2


def test_four_ranks_one_killed_the_others_complete_and_the_report_says_who_stopped_when(tmp_path):
    (tmp_path / "rank.py").write_text(RANK.replace("{steps}", str(RANK_STEPS)).replace("{dies_after}",
                                                                                          str(DIES_AFTER)))
    (tmp_path / "launch.py").write_text(LAUNCHER)
    done = subprocess.run(
        [sys.executable, "-m", "xlabridge.cli", "report", "--events", str(tmp_path / "events"), "--json",
         str(tmp_path / "report.json"), "--", sys.executable, str(tmp_path / "launch.py"), str(tmp_path / "rank.py")],
        cwd=tmp_path, env=_env(tmp_path, "mark"), capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "statuses [0, 0, -9, 0]" in done.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    ranks = {p["rank"]: p for p in report["processes"] if p["rank"] is not None}
    assert sorted(ranks) == [0, 1, 2, 3]
    for rank in (0, 1, 3):
        assert (ranks[rank]["ending"], ranks[rank]["steps"]) == ("exited", RANK_STEPS)
    dead = ranks[2]
    # the launcher waited for it: its exit status is in the dead rank's log
    assert (dead["ending"], dead["signal"], dead["exit_status"], dead["steps"]) == ("killed", "SIGKILL", 137, DIES_AFTER)
    assert dead["started"] + dead["last_event_seconds"] < min(ranks[r]["started"] + ranks[r]["last_event_seconds"]
                                                              for r in (0, 1, 3)), "it stopped before the others"
    # its data up to its death: its graphs, their calls, and what its --pod capture recorded
    assert [g["calls"] for g in report["hlo"]["graphs"] if g["pid"] == dead["pid"]] == [DIES_AFTER, DIES_AFTER]
    assert sum(g["pid"] == dead["pid"] for g in report["dynamo"]["graphs"]) == 2
    # torch_xla's own record of the executions (its debug file, read after the rank's death), where the
    # capture that a multi-process run gets runs (torch_xla 2.9 and later)
    from xlabridge.diagnostics._observe import pod

    for rank, steps in ((2, DIES_AFTER), (0, RANK_STEPS)) if pod.unsupported() is None else ():
        executed = [g["executions"] for g in report["pod"]["graphs"]
                    if g["process"] == f"rank {rank}" and g["origin"] == "dynamo"]
        assert executed == [steps, steps], (rank, executed)
    # which rank stopped when: the processes section and a finding; no divergence past its death
    assert report["pod"]["divergences"] == []
    (finding,) = [f for f in report["findings"] if f["kind"] == "process-ended"]
    assert finding["message"].startswith("rank 2 ended by SIGKILL (exit status 137)")
    assert f"after {DIES_AFTER} step(s)" in finding["message"] and "went on further" in finding["message"]
    section = done.stdout[done.stdout.index("Processes:"):]
    assert re.search(r"rank 2 \(pid \d+\)\s+killed\s+2 ", section), section[:2000]


LIVE = textwrap.dedent(
    """
    import pathlib, sys, time, torch, torch_xla

    def step(x):
        y = (x * 3).sin()
        print("logging inside the step")
        return y.cos()

    here = pathlib.Path(__file__).parent
    compiled = torch.compile(step, backend="openxla")
    x = torch.randn(32, device=torch_xla.device())
    for _ in range({steps}):
        compiled(x)
        torch_xla.sync()
    (here / "ready").write_text("ready")
    while not (here / "release").exists():  # the job goes on; its report is read meanwhile
        time.sleep(0.1)
    """
)


def test_reading_a_running_jobs_directory_gives_the_report_so_far(tmp_path):
    import os
    import time

    (tmp_path / "live.py").write_text(LIVE.replace("{steps}", str(STEPS)))
    job = subprocess.Popen(
        [sys.executable, "-m", "xlabridge.cli", "report", "--events", str(tmp_path / "events"), "--json",
         str(tmp_path / "final.json"), "--", sys.executable, str(tmp_path / "live.py")],
        cwd=tmp_path, env=_env(tmp_path, "mark"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        while not (tmp_path / "ready").exists() and time.monotonic() < deadline and job.poll() is None:
            time.sleep(0.2)
        assert (tmp_path / "ready").exists(), job.stderr.read() if job.poll() is not None else "not ready"
        time.sleep(1.5)  # the running sums are rewritten beside the log at most a second after they change
        read = subprocess.run([sys.executable, "-m", "xlabridge.cli", "report", "--read", str(tmp_path / "events"),
                               "--json", str(tmp_path / "so_far.json")], cwd=tmp_path, capture_output=True,
                              text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO)))
        assert read.returncode == 0, read.stderr[-2000:]
    finally:
        (tmp_path / "release").write_text("go")
        status = job.wait(timeout=300)
    assert status == 0, job.stderr.read()[-2000:]
    so_far = json.loads((tmp_path / "so_far.json").read_text())
    (process,) = so_far["processes"]
    assert (process["ending"], process["steps"]) == ("running", STEPS)
    assert [g["calls"] for g in so_far["hlo"]["graphs"]] == [STEPS, STEPS]
    assert not [f for f in so_far["findings"] if f["kind"] == "process-ended"]
    final = json.loads((tmp_path / "final.json").read_text())
    assert final["processes"][0]["ending"] == "exited"
    assert [g["calls"] for g in final["hlo"]["graphs"]] == [STEPS, STEPS]
