"""Training as ``torchrun`` launches it, rank by rank: a DDP job (gloo, two ranks on the CPU) under
``xlabridge report``, with torch's own per-rank logs and the job's own clock and output as references.

* One rank alone takes a branch on a host read inside the compiled forward from step 3 on
  (``torchrun_train.py --uneven-rank 1``): torch's ``TORCH_LOGS=recompiles,graph_breaks`` of that rank
  log the recompile and the break, the other rank's log neither; the report names that rank, the
  line and the step, and says what the other rank did meanwhile. Every rank's loss and final
  parameters are bitwise those of the job run without xlabridge.
* One rank killed by SIGKILL: torchrun's own "Root Cause (first observed failure)" names it; the
  report leads with its death and tells the launcher's teardown of the rest as what followed.
* One rank slow before a step while the other waits for it (``--stall-after``): the report names
  the slow rank and its line, and what the other waits in.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve().parents[2] / "xlabridge" / "examples" / "torchrun_train.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")
STEPS = 6

pytestmark = pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed beside this Python")


def _line(marker: str) -> int:
    """The line of ``torchrun_train.py`` holding ``marker``: the script's own source as the reference."""
    return next(n for n, text in enumerate(SCRIPT.read_text().splitlines(), start=1) if marker in text)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLABRIDGE_", "TORCH_LOGS", "TORCHELASTIC"))}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", PJRT_DEVICE="CPU", **extra)
    return env


def _torchrun(*args: str) -> list[str]:
    return [str(TORCHRUN), "--standalone", "--nproc_per_node=2", str(SCRIPT), "--backend", "aot_eager", *args]


def _report(tmp: Path, *args: str, options: tuple[str, ...] = (), env: dict[str, str] | None = None
            ) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp / "report.json"
    done = subprocess.run([sys.executable, "-m", "xlabridge.cli", "report", "--json", str(out), *options, "--",
                           *_torchrun(*args)], capture_output=True, text=True, env=env or _env(), timeout=600,
                          cwd=tmp)
    return done, json.loads(out.read_text())


def _rank_pid(report: dict, rank: int) -> int:
    """The pid of rank ``rank``'s own process: the first started of those carrying its rank."""
    return min((p for p in report["processes"] if p["role"] == "rank" and p["rank"] == rank),
               key=lambda p: p["started"])["pid"]


def _ranks_output(text: str) -> dict[int, str]:
    """``rank R: loss L params P`` lines the ranks print."""
    # two ranks print at once: a line can hold the end of the other's
    return {int(m.group(1)): m.group(0) for m in re.finditer(r"rank (\d): loss -?[\d.]+ params [0-9a-f]{16}", text)}


def _logged(stderr: str, rank: int, what: str) -> list[int]:
    """Lines of the script torch's ``TORCH_LOGS`` names for ``rank``: ``recompiles`` or ``graph_breaks``."""
    lines = [line for line in stderr.splitlines() if line.startswith(f"[rank{rank}]:")]
    text = "\n".join(lines)
    if what == "graph_breaks":
        return [int(n) for n in re.findall(r"Graph break in user code at \S*torchrun_train\.py:(\d+)", text)]
    return [int(n) for n in re.findall(r"Recompiling function \S+ in \S*torchrun_train\.py:(\d+)", text)]


@pytest.fixture(scope="module")
def uneven(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("uneven")
    done, report = _report(tmp, "--uneven-rank", "1", "--out", str(tmp / "clock"),
                           env=_env(TORCH_LOGS="recompiles,graph_breaks"))
    assert done.returncode == 0, done.stderr[-3000:]
    plain = subprocess.run(_torchrun("--uneven-rank", "1"), capture_output=True, text=True, env=_env(), timeout=600,
                           cwd=tmp)
    assert plain.returncode == 0, plain.stderr[-3000:]
    clocks = {r: json.loads((tmp / f"clock.rank{r}.json").read_text()) for r in (0, 1)}
    return {"done": done, "report": report, "plain": plain, "clocks": clocks}


def test_the_launcher_and_each_rank_are_named(uneven) -> None:
    processes = uneven["report"]["processes"]
    launchers = [p for p in processes if p["role"] == "launcher"]
    assert len(launchers) == 1 and launchers[0]["rank"] is None
    assert sorted(p["rank"] for p in processes if p["role"] == "rank" and p["pid"] != launchers[0]["pid"]) \
        [:2] == [0, 1]
    assert "launcher (pid" in uneven["done"].stdout


def test_each_rank_took_the_steps_its_clock_counts(uneven) -> None:
    for rank, clock in uneven["clocks"].items():
        # the rank's own process: the one that stepped (a process it starts inherits its RANK)
        steps = max(p["steps"] for p in uneven["report"]["processes"] if p["role"] == "rank" and p["rank"] == rank)
        assert steps == len(clock["steps"]) == STEPS


def test_the_rank_that_compiled_alone_is_named_at_its_line_and_step(uneven) -> None:
    stderr = uneven["done"].stderr
    # torch's own logs: rank 1 broke and recompiled where rank 0 did neither
    host_read = _line("x.norm().item()")
    assert host_read in _logged(stderr, 1, "graph_breaks")
    assert host_read not in _logged(stderr, 0, "graph_breaks")
    assert _logged(stderr, 1, "recompiles") and not _logged(stderr, 0, "recompiles")
    report = uneven["report"]
    differences = report["pod"]["rank_differences"]
    assert differences and all(d["ranks"] == ["rank 1"] and d["others"] == ["rank 0"] for d in differences)
    assert {d["lineno"] for d in differences} >= {host_read}
    # the branch starts at step 3 (``i >= 3``): three optimizer steps before it
    assert min(s for d in differences for s in d["steps"]) == 3
    findings = [f for f in report["findings"] if f["kind"] == "uneven-compile"]
    rank1 = _rank_pid(report, 1)
    assert findings and all(f["pid"] == rank1 for f in findings)
    assert any(f["lineno"] == host_read and "rank 1 alone compiled" in f["message"] and "rank 0" in f["message"]
               for f in findings)
    # the recompiles and breaks torch logged for rank 1 are the report's, rank by rank
    for rank in (0, 1):
        pid = _rank_pid(report, rank)
        assert len([r for r in report["dynamo"]["recompiles"] if r["pid"] == pid]) == \
            len(_logged(stderr, rank, "recompiles"))


def test_the_ranks_compute_what_they_compute_without_xlabridge(uneven) -> None:
    observed = _ranks_output(uneven["done"].stdout)
    assert observed and observed == _ranks_output(uneven["plain"].stdout)


def test_the_first_death_leads_with_what_followed(tmp_path: Path) -> None:
    done, report = _report(tmp_path, "--die", "1:3")
    assert done.returncode != 0
    # torchrun's own account: the root cause is rank 1, killed by signal 9
    root = done.stderr[done.stderr.index("Root Cause (first observed failure)"):]
    assert re.search(r"rank\s*:\s*1\b", root) and "SIGKILL" in root
    ended = [f for f in report["findings"] if f["kind"] == "process-ended"]
    assert len(ended) == 1
    lead = ended[0]
    assert lead["pid"] == _rank_pid(report, 1) and "SIGKILL" in lead["message"]
    assert "what followed from it" in lead["message"] and "rank 0" in lead["message"]
    assert "the launcher" in lead["message"] and "ChildFailedError" in lead["message"]
    assert "====" not in lead["message"]
    # no placeholder where a process ended without a line
    assert all(p["filename"] != "<unknown>" for p in report["processes"])


def test_a_rank_that_holds_the_others_up_is_named(tmp_path: Path) -> None:
    done, report = _report(tmp_path, "--slow", "1:3", "--slow-seconds", "5", "--mean-loss", "--out",
                           str(tmp_path / "clock"), options=("--stall-after", "2"))
    assert done.returncode == 0, done.stderr[-3000:]
    clock = json.loads((tmp_path / "clock.rank0.json").read_text())
    assert clock["steps"][3] > 4, "rank 0's own clock: it waited for rank 1 at step 3"
    holdups = [f for f in report["findings"] if f["category"] == "rank-holdup"]
    assert len(holdups) == 1 and holdups[0]["pid"] == _rank_pid(report, 1)
    assert holdups[0]["lineno"] == _line("time.sleep(a.slow_seconds)")
    assert "rank 1 holds up rank 0" in holdups[0]["message"] and "backward()" in holdups[0]["message"]
    assert not [f for f in report["findings"] if f["kind"] == "stall" and f["pid"] == next(
        p["pid"] for p in report["processes"] if p["role"] == "launcher")]

