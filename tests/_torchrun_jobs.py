"""The torchrun jobs that tests in several files read, each run once per pytest session.

A DDP job as ``torchrun`` launches it (gloo, two ranks on the CPU) under ``xlabridge report`` costs
a launcher, two ranks' imports of torch and their compiles. Where the tests of two files check
different things of one job, they read one run of it, through a session-scoped fixture
(registered in ``tests/conftest.py``); what each test compares the report with stays its own.

``ddp_inductor_job``: ``xlabridge/examples/torchrun_train.py``, DDP compiled whole with inductor on
cold caches, each rank writing its clock, the launcher's wall measured from outside
(``tests/diagnostics/_outside.py``), and torch's own logs of graph breaks and of DDPOptimizer's
splits on (``TORCH_LOGS``, each line prefixed with its rank). The model is wide enough
(``--width``) that DDP's buckets (``--bucket-cap-mb``) cut its parameters in two, so DDPOptimizer
splits the compiled model. tests/diagnostics/test_time_shares.py checks its time split against the
clocks and the outside wall; tests/diagnostics/test_library_breaks.py checks, against torch's logs,
that inductor is named through DDPOptimizer's split.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "xlabridge" / "examples" / "torchrun_train.py"
OUTSIDE = REPO / "tests" / "diagnostics" / "_outside.py"
WIDTH = 256
BUCKET_CAP_MB = 4
"""At width 256 each block holds 2 MiB of parameters: DDP's first bucket (1 MiB) takes the head and
the last block's second layer, a 4 MiB bucket the rest, so DDPOptimizer cuts the model in two."""
SPLIT = ("--width", str(WIDTH), "--bucket-cap-mb", str(BUCKET_CAP_MB))
DDP_LOGS = "graph_breaks,ddp_graphs,torch._dynamo.backends.distributed"
"""torch's logs of graph breaks and of DDPOptimizer's buckets and split graphs."""


@dataclasses.dataclass
class Job:
    directory: Path
    done: subprocess.CompletedProcess
    report: dict
    """The JSON report, as ``--json`` wrote it."""
    clocks: dict[int, dict]
    """Each rank's own clock (``--out``), by rank."""
    outside: dict
    """When the launcher started and ended as its parent saw it (``_outside.py``)."""

    @property
    def events(self) -> Path:
        return self.directory / "events"


def needs_gloo() -> None:
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("this torch has no torch.distributed with gloo: the DDP job cannot run on the CPU")


def time_split_env(directory: Path) -> dict[str, str]:
    """The environment of the time split's runs: inductor's caches in ``directory`` (cold on a first run),
    its compile workers as torch sizes them."""
    env = dict(os.environ, PJRT_DEVICE="CPU", PYTHONPATH=str(REPO), TORCHINDUCTOR_CACHE_DIR=str(directory / "inductor"))
    env.pop("TORCHINDUCTOR_COMPILE_THREADS", None)
    return env


def time_split_job(directory: Path, mode: str, *extra: str, torch_logs: str | None = None) -> Job:
    """``xlabridge report --events --json`` on ``_outside.py`` around ``python -m torch.distributed.run`` of the
    example with inductor, each rank writing its clock (tests/diagnostics/test_time_shares.py)."""
    needs_gloo()
    env = time_split_env(directory)
    if torch_logs:
        env["TORCH_LOGS"] = torch_logs
    clock = directory / "clock"
    done = subprocess.run(
        [sys.executable, "-m", "xlabridge.cli", "report", "--events", str(directory / "events"), "--json",
         str(directory / "report.json"), "--", sys.executable, str(OUTSIDE), str(directory / "outside.json"),
         sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(SCRIPT),
         "--mode", mode, "--backend", "inductor", "--out", str(clock), *extra],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    (directory / "stderr.txt").write_text(done.stderr)
    assert done.returncode == 0, done.stderr[-3000:]
    return Job(directory, done, json.loads((directory / "report.json").read_text()),
               {r: json.loads(Path(f"{clock}.rank{r}.json").read_text()) for r in (0, 1)},
               json.loads((directory / "outside.json").read_text()))


@pytest.fixture(scope="session")
def ddp_inductor_job(tmp_path_factory) -> Job:
    return time_split_job(tmp_path_factory.mktemp("ddp_inductor"), "ddp", *SPLIT, torch_logs=DDP_LOGS)
