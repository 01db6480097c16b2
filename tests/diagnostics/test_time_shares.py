"""Every second of a process, start to exit: the time split of torchrun jobs (DDP and FSDP2 on gloo,
inductor, cold caches), of a single-process inductor loop with warm caches, and of a process that
starts helpers.

Each configuration runs once under ``xlabridge report``; its shares are checked against
the scripts' own clocks (``xlabridge/examples/torchrun_train.py`` writes each rank's) and against the wall measured
from outside the process (``_outside.py``: the parent's time around it), and "other" is at most 10% of
each rank's wall (issue 32's goal). The process-group share is the time inside ``init_process_group``;
the script's clock brackets that call and ``dist.get_rank()`` only, on the same host clock, so the two
agree within scheduling noise on a loaded CI machine: 50 ms plus 10% of the interval.

The DDP job is shared (``tests/_torchrun_jobs.py``, once per session) with test_library_breaks.py,
which reads torch's logs of DDPOptimizer's split of the same run: the model is wide enough that DDP's
buckets cut it in two, as they do in a real model.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._torchrun_jobs import Job, time_split_job
from tests._torchrun_jobs import time_split_env as _env

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
OTHER_AT_MOST = 0.10
"""Issue 32: "other" at most 10% of each rank's wall."""


def _report(tmp: Path, command: list[str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "xlabridge.cli", "report", "--events", str(tmp / "events"), "--json",
         str(tmp / "report.json"), "--", *command],
        cwd=REPO, env=_env(tmp), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((tmp / "report.json").read_text())


def _run(job: Job) -> dict:
    return {"report": job.report, "clocks": job.clocks, "outside": job.outside, "events": job.events}


@pytest.fixture(scope="module")
def ddp(ddp_inductor_job):
    return _run(ddp_inductor_job)


@pytest.fixture(scope="module")
def fsdp2(tmp_path_factory):
    return _run(time_split_job(tmp_path_factory.mktemp("fsdp2"), "fsdp2", "--compile", "blocks"))


def _starts(events: Path) -> dict[int, dict]:
    out = {}
    for log in events.glob("events-*.jsonl"):
        first = json.loads(log.read_text().splitlines()[0])
        out[first["pid"]] = first
    return out


def _launcher(run: dict) -> tuple[dict, dict]:
    """The launcher's split and start: torchrun (``-m torch.distributed.run`` here), the ranks' parent."""
    starts = _starts(run["events"])
    parents = {starts[split["pid"]]["parent_pid"] for split in _ranks(run).values()}
    assert len(parents) == 1
    launcher = next(split for split in run["report"]["time"] if split["pid"] in parents)
    assert starts[launcher["pid"]]["argv_kind"] == "module"
    return launcher, starts[launcher["pid"]]


def _ranks(run: dict) -> dict[int, dict]:
    rows = {p["pid"]: p for p in run["report"]["processes"]}
    return {rows[s["pid"]]["rank"]: s for s in run["report"]["time"] if rows[s["pid"]].get("rank") is not None}


@pytest.mark.parametrize("config", ["ddp", pytest.param("fsdp2", marks=pytest.mark.slow)])
def test_each_rank_has_at_most_a_tenth_other(config, request):
    run = request.getfixturevalue(config)
    ranks = _ranks(run)
    assert sorted(ranks) == [0, 1], "two ranks, each one column: helpers are folded into them"
    for rank, split in ranks.items():
        assert split["other"] <= OTHER_AT_MOST * split["wall"], (rank, split)
        assert sum(split[s] for s in ("imports", "process_group", "tracing", "backend_compile", "xla_compile",
                                      "execution", "lazy", "eager", "transfers", "cpu_fallback", "collective_wait",
                                      "waiting_for_ranks", "exit", "other")) == pytest.approx(split["wall"])


@pytest.mark.parametrize("config", ["ddp", pytest.param("fsdp2", marks=pytest.mark.slow)])
def test_process_group_share_is_the_scripts_own_interval(config, request):
    run = request.getfixturevalue(config)
    for rank, split in _ranks(run).items():
        clock = run["clocks"][rank]
        interval = clock["pg"] - clock["imported"]
        assert split["process_group"] == pytest.approx(interval, abs=0.05 + 0.1 * interval), (rank, split, clock)


@pytest.mark.parametrize("config", ["ddp", pytest.param("fsdp2", marks=pytest.mark.slow)])
def test_the_shares_cover_the_script_and_stay_inside_the_outside_wall(config, request):
    run = request.getfixturevalue(config)
    starts = _starts(run["events"])
    launcher, launcher_start = _launcher(run)
    outside = run["outside"]
    # the launcher's observed time lies within its wall as its parent saw it
    assert outside["start"] <= launcher_start["wall_time"]
    assert launcher_start["wall_time"] + launcher["wall"] <= outside["end"] + 0.05
    assert launcher["waiting_for_ranks"] > 0 and launcher["other"] <= OTHER_AT_MOST * launcher["wall"], launcher
    for rank, split in _ranks(run).items():
        clock, start = run["clocks"][rank], starts[split["pid"]]["wall_time"]
        # the rank's split starts before its script's first line and ends after its last, at its exit
        assert start <= clock["start"] and start + split["wall"] >= clock["end"]
        assert start + split["wall"] <= outside["end"] + 0.05
        assert split["exit"] > 0


def test_ddp_waits_in_collectives(ddp):
    for rank, split in _ranks(ddp).items():
        assert split["collective_wait"] > 0, (rank, split)  # DDP's broadcast at construction, its all-reduce


def test_no_helper_has_a_column(ddp):
    starts = _starts(ddp["events"])
    in_split = {s["pid"] for s in ddp["report"]["time"]}
    helpers = {pid for pid, start in starts.items() if start.get("argv_kind") == "command"}
    assert not in_split & helpers
    assert sum(s["helpers"] for s in ddp["report"]["time"]) == len(helpers)


def test_helpers_are_folded_into_their_parent(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text("import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'pass'], check=True)\n")
    report = _report(tmp_path, [sys.executable, str(script)])
    assert len(report["time"]) == 1 and len(report["processes"]) == 1, report["time"]
    parent = report["time"][0]
    assert parent["helpers"] == 1 and 0 < parent["helper_seconds"] <= parent["wall"]


@pytest.mark.slow  # two inductor compiles of a training loop: the pinned suite runs it
def test_warm_inductor_loop_has_at_most_a_tenth_other_and_names_its_pool_exit(tmp_path):
    subprocess.run([sys.executable, str(HERE / "_inductor_loop.py"), str(tmp_path / "cold.json")], cwd=REPO,
                   env=_env(tmp_path), check=True, capture_output=True, timeout=600)  # fills the caches
    started = time.time()
    report = _report(tmp_path, [sys.executable, str(HERE / "_outside.py"), str(tmp_path / "outside.json"),
                                sys.executable, str(HERE / "_inductor_loop.py"), str(tmp_path / "clock.json")])
    starts = _starts(tmp_path / "events")
    clock = json.loads((tmp_path / "clock.json").read_text())
    outside = json.loads((tmp_path / "outside.json").read_text())
    loop = next(s for s in report["time"] if starts[s["pid"]]["environment"]["argv"][0].endswith("_inductor_loop.py"))
    start = starts[loop["pid"]]["wall_time"]
    assert started <= outside["start"] <= start and start <= clock["start"]
    assert clock["end"] <= start + loop["wall"] <= outside["end"] + 0.05
    assert loop["other"] <= OTHER_AT_MOST * loop["wall"], loop
    assert loop["exit"] > 0
    if not clock["pool"]:
        return  # this torch has no maybe_warm_pool: no pool to name
    assert 0 < loop["compile_workers_exit"] <= loop["exit"]
    from xlabridge.diagnostics._build.report import COMPILE_WORKERS_COST

    named = [f for f in report["findings"] if f["kind"] == "compile-workers-exit"]
    assert bool(named) == (loop["compile_workers_exit"] >= COMPILE_WORKERS_COST)
    for finding in named:
        assert "TORCHINDUCTOR_COMPILE_THREADS" in finding["message"] and "compiled nothing" in finding["message"]
