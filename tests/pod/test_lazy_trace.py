"""The graphs of a lazily traced run, read from torch_xla's own debug files.

``_lazy_worker`` trains three steps lazily (``torch_xla.sync()`` per step, a host read in the
second) and calls a ``torch.compile``d function twice, with the capture switches set when it
starts. The reference is torch_xla itself: its compilation and execution counters
(``CompileTime``, ``ExecuteTime``) in that process, and the marked lines of the worker's source.
It runs on whatever torch_xla the interpreter has (2.9 pinned; 2.8 in the compatibility env).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import requires_xla
from xlabridge.pod import DEFAULT, CaptureWay, GraphCause, LazyTrace, capture_environment, read_capture

pytestmark = requires_xla

REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "tests" / "pod" / "_lazy_worker.py"


def _line(marker: str) -> int:
    return next(i for i, line in enumerate(WORKER.read_text().splitlines(), 1) if marker in line)


def _is_user(path: str) -> bool:
    return "site-packages" not in path and not path.startswith("<")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    directory = tmp_path_factory.mktemp("lazy")
    env = dict(os.environ, PJRT_DEVICE="CPU")
    env.pop("CPU_NUM_DEVICES", None)
    env.update(capture_environment(directory, DEFAULT | CaptureWay.SAVED_GRAPHS))
    done = subprocess.run([sys.executable, "-m", "tests.pod._lazy_worker"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return read_capture(directory), json.loads(done.stdout.strip().splitlines()[-1])


def test_compiles_and_executions_are_torch_xlas_counts(run):
    capture, counted = run
    graphs = capture.trace.graphs
    assert sum(g.compiles for g in graphs) == counted["compiles"]
    assert sum(g.executions for g in graphs) == counted["executions"]
    assert len(capture.trace.runs) == counted["executions"]


def test_each_graph_has_its_cause_and_the_users_line(run):
    capture, _ = run
    by_cause = {}
    for graph in capture.trace.graphs:
        by_cause.setdefault(graph.cause, []).append(graph)
    [sync] = by_cause[GraphCause.SYNC]
    [host_read] = by_cause[GraphCause.HOST_READ]
    [compiled] = by_cause[GraphCause.DYNAMO_EXECUTE]
    assert (sync.compiles, sync.executions) == (1, 3)
    assert (host_read.compiles, host_read.executions) == (1, 1)
    assert (compiled.compiles, compiled.executions) == (1, 2)
    assert sync.user_frame(_is_user).lineno == _line("marker: step end")
    assert host_read.user_frame(_is_user).lineno == _line("marker: host read")
    assert host_read.user_frame(_is_user).function == "read_on_host"
    # The debug file cuts a Dynamo graph's stack inside torch; the saved graph keeps all of it.
    assert compiled.user_frame(_is_user).lineno == _line("torch.compile(lambda")


def test_steps_end_at_each_sync(run):
    capture, _ = run
    places = [(r.step, r.cause) for r in capture.trace.runs]
    assert places[:4] == [(0, GraphCause.SYNC), (1, GraphCause.HOST_READ), (1, GraphCause.SYNC), (2, GraphCause.SYNC)]
    assert [r.compiled for r in capture.trace.runs[:4]] == [True, True, False, False]


def test_every_graph_has_its_hlo_and_compiled_module(run):
    capture, _ = run
    for graph in capture.trace.graphs:
        assert graph.hlo and "ENTRY" in graph.hlo
        assert capture.module_of(graph) is not None


def test_the_trace_round_trips_through_json(run):
    capture, _ = run
    data = json.loads(json.dumps(capture.trace.to_dict()))
    assert LazyTrace.from_dict(data) == capture.trace
