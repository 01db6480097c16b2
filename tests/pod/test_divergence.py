"""Divergence between the processes of a real multi-process run, and its pure-data rules.

Three processes train one model data-parallel on PJRT CPU (``_rank_worker``: one XLA device
each, gradients averaged through gloo); at step 1 rank 1 takes a branch the others do not.
Each process is captured in a directory of its own, as the report does per process. Rank 0 and
rank 2 run identical programs: comparing them must report nothing.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from xlabridge import _optional
from xlabridge.pod import GraphCause, capture_environment, read_capture
from xlabridge.pod._lazy import GraphRun
from xlabridge.pod._divergence import ProcessRun, find_divergences

REPO = Path(__file__).resolve().parents[2]
STEPS, DIVERGE_AT, WORLD = 3, 1, 3


def _is_user(path: str) -> bool:
    return "site-packages" not in path and not path.startswith("<")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> dict[int, ProcessRun]:
    if not _optional.is_available("torch_xla"):
        pytest.skip("needs torch_xla (pip install 'xlabridge[xla]')")
    base = tmp_path_factory.mktemp("ranks")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    processes = []
    for rank in range(WORLD):
        env = dict(os.environ, PJRT_DEVICE="CPU", RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        env.pop("CPU_NUM_DEVICES", None)
        env.update(capture_environment(base / f"rank{rank}"))
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "tests.pod._rank_worker", str(STEPS), str(DIVERGE_AT)],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ))
    for process in processes:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err[-4000:]
        assert len(json.loads(out.strip().splitlines()[-1])["losses"]) == STEPS
    runs = {}
    for rank in range(WORLD):
        capture = read_capture(base / f"rank{rank}")
        runs[rank] = ProcessRun.from_capture(f"rank{rank}", capture.trace, capture.compiled)
    return runs


def _penalty_line() -> int:
    source = (REPO / "tests" / "pod" / "_rank_worker.py").read_text().splitlines()
    return next(i for i, line in enumerate(source, 1) if "the branch only rank 1 takes" in line)


def test_identical_processes_report_nothing(ranks):
    assert ranks[0].runs, "the capture saw no graph"
    assert find_divergences([ranks[0], ranks[2]], is_user=_is_user) == ([], [])


def test_the_branch_one_process_takes_is_reported_with_its_line(ranks):
    divergences, uneven = find_divergences([ranks[0], ranks[1], ranks[2]], is_user=_is_user)
    assert divergences
    assert {d.step for d in divergences} == {DIVERGE_AT}
    assert uneven == []
    for divergence in divergences:
        assert divergence.graphs["rank0"] == divergence.graphs["rank2"] != divergence.graphs["rank1"]
    rank1_lines = {line for d in divergences for diff in d.differences if diff.process == "rank1" for line in diff.lines}
    assert any(line.startswith(f"{REPO / 'tests' / 'pod' / '_rank_worker.py'}:{_penalty_line()} ") for line in rank1_lines)
    others = {line for d in divergences for diff in d.differences if diff.process != "rank1" for line in diff.lines}
    assert not any(f"_rank_worker.py:{_penalty_line()} " in line for line in others)


def _run(*places: tuple[int, str, bool]) -> tuple[GraphRun, ...]:
    return tuple(GraphRun(step, graph, GraphCause.SYNC, compiled) for step, graph, compiled in places)


def test_a_compile_on_some_processes_only_is_uneven():
    a = ProcessRun("a", _run((0, "g1", True), (1, "g1", False), (2, "g2", True)), {})
    b = ProcessRun("b", _run((0, "g1", True), (1, "g1", True), (2, "g2", True)), {})
    divergences, uneven = find_divergences([a, b])
    assert divergences == []
    assert [(u.step, u.position, u.graph_hash, u.compiled_on, u.cached_on) for u in uneven] == [(1, 0, "g1", ("b",), ("a",))]


def test_a_graph_only_one_process_runs_is_a_divergence():
    a = ProcessRun("a", _run((0, "g1", True), (0, "g2", True)), {})
    b = ProcessRun("b", _run((0, "g1", True)), {})
    divergences, _ = find_divergences([a, b])
    assert [(d.step, d.position, dict(d.graphs)) for d in divergences] == [(0, 1, {"a": "g2", "b": None})]


def test_one_process_is_not_a_comparison():
    with pytest.raises(ValueError, match="at least two"):
        find_divergences([ProcessRun("a", (), {})])
