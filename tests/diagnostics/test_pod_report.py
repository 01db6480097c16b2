"""``xlabridge report --pod`` on sharded and multi-process runs (PJRT CPU, real torch_xla).

Each run is the CLI on an unmodified program, as a user runs it: the example's tensor-parallel
MLP (``xlabridge.examples.sharded_train``, one planted all-gather) on 4 and 8 host devices,
lazily and under ``torch.compile``, with and without the fix; the pod tests' worker for GPT-2
(small config, FSDP style) and for bitwise neutrality; three ranks of a data-parallel run as
separate processes, one diverging. Collective counts and bytes are checked against a reading of
the binary module proto XLA dumped (``tests/pod/_proto_reference``), not against the text parser
the report uses; lazy graphs against torch_xla's own metrics; lines against ``inspect``.
``--xla_backend_optimization_level=0`` (LLVM only; partitioning and collectives unchanged) keeps
the XLA:CPU compiles short.
"""

from __future__ import annotations

import collections
import concurrent.futures
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import requires_xla
from tests.pod import _proto_reference
from xlabridge.diagnostics import build_report, write_html
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics.report import Report

from xlabridge.diagnostics._observe import pod as _pod  # noqa: E402

pytestmark = [
    requires_xla,
    pytest.mark.skipif(_pod.unsupported() is not None, reason=f"{_pod.unsupported()}"),
]

REPO = Path(__file__).resolve().parents[2]
XLA_FLAGS = "--xla_backend_optimization_level=0"
EXAMPLE = ("-m", "xlabridge.examples.sharded_train", "--steps", "3")
# name: (devices, command after the interpreter)
RUNS = {
    "lazy4": (4, EXAMPLE),
    "fixed4": (4, (*EXAMPLE, "--fixed")),
    "compile4": (4, (*EXAMPLE, "--compile")),
    "fixed_compile4": (4, (*EXAMPLE, "--fixed", "--compile")),
    "lazy8": (8, EXAMPLE),
    "worker4": (4, ("-m", "tests.pod._sharded_worker", "{out}", "mlp", "mlp_compile", "gpt2")),
}
STEPS, DIVERGE_AT, WORLD = 3, 1, 3


def _env(devices: int | None) -> dict[str, str]:
    # The child must import this checkout's xlabridge (and tests), whatever the venv has installed.
    env = dict(os.environ, PJRT_DEVICE="CPU", XLA_FLAGS=XLA_FLAGS, PYTHONPATH=str(REPO))
    if devices is not None:
        env["CPU_NUM_DEVICES"] = str(devices)
    return env


def _report(directory: Path, devices: int | None, command: tuple[str, ...], *, pod: bool = True) -> Report:
    out = directory / "out"
    out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "xlabridge.cli", "report", "--events", str(directory / "events"),
            "--json", str(directory / "report.json"), *(["--pod"] if pod else []), "--",
            sys.executable, *(part.format(out=out) for part in command)]
    done = subprocess.run(argv, cwd=REPO, env=_env(devices), capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    (directory / "stdout.txt").write_text(done.stdout)
    return Report.from_dict(json.loads((directory / "report.json").read_text()))


def _plain(directory: Path, devices: int, command: tuple[str, ...]) -> None:
    out = directory / "out"
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, *(part.format(out=out) for part in command)], cwd=REPO,
                          env=_env(devices), capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Report, Path]]:
    base = tmp_path_factory.mktemp("pod_report")
    jobs = {name: (base / name, devices, command) for name, (devices, command) in RUNS.items()}
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        reports = {name: pool.submit(_report, *job) for name, job in jobs.items()}
        plain = pool.submit(_plain, base / "plain4", 4, RUNS["worker4"][1])
        ranks = pool.submit(_report, base / "ranks", None,
                            ("-m", "tests.pod._ranks_launcher", str(WORLD), str(STEPS), str(DIVERGE_AT)), pod=False)
        result = {name: (future.result(), jobs[name][0]) for name, future in reports.items()}
        plain.result()
        result["ranks"] = (ranks.result(), base / "ranks")
    result["plain4"] = (None, base / "plain4")
    return result


def _line(function, text: str) -> int:
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _planted_line() -> int:
    from xlabridge.examples.sharded_train import Block

    return _line(Block.forward, "self.down(")


def _sync_line() -> int:
    from xlabridge.examples.sharded_train import train

    return _line(train, "torch_xla.sync()")


def _dumped_proto(directory: Path, pid: int, module_id: int) -> bytes:
    found = list((directory / "events" / f"pod-{pid}" / "xla_dump").glob(
        f"module_{module_id:04d}.*after_optimizations.hlo.pb"))
    assert len(found) == 1, found
    return found[0].read_bytes()


@pytest.mark.parametrize("name", ["lazy4", "compile4", "lazy8", "worker4"])
def test_collectives_per_graph_equal_a_count_from_the_dumped_proto(runs, name):
    report, directory = runs[name]
    assert report.collectives, "a sharded training step communicates"
    by_module = collections.defaultdict(list)
    for group in report.collectives:
        by_module[(group.pid, group.module_id)].append(group)
    for (pid, module_id), groups in by_module.items():
        reference = collections.Counter()
        for collective in _proto_reference.collectives(_dumped_proto(directory, pid, module_id)):
            runs_ = collective["executions"] or 1
            reference[(collective["kind"], "count")] += runs_
            reference[(collective["kind"], "bytes")] += collective["bytes"] * runs_
        reported = collections.Counter()
        for group in groups:
            reported[(group.kind, "count")] += group.count
            reported[(group.kind, "bytes")] += group.bytes
        assert reported == reference, (name, module_id)
    # the per-graph totals of the graphs table agree with the groups
    for graph in report.run_graphs:
        groups = [g for g in report.collectives if g.hash == graph.hash and g.pid == graph.pid]
        assert graph.collectives == sum(g.count for g in groups)
        assert graph.collective_bytes == sum(g.bytes for g in groups)
        if groups:
            assert graph.num_partitions == RUNS[name][0]


@pytest.mark.parametrize("name", ["lazy4", "compile4", "lazy8"])
def test_planted_all_gather_is_reported_at_its_line(runs, name):
    report, _ = runs[name]
    gathers = [g for g in report.collectives if g.kind == "all-gather" and g.lineno and not g.place_note]
    assert gathers, "the planted sharding produced no all-gather with a user line"
    assert {(Path(g.filename).name, g.lineno) for g in gathers} == {("sharded_train.py", _planted_line())}
    # the backward pass's all-gathers have no line of their own: their graph's, said so
    assert all(g.lineno and g.place_note for g in report.collectives if g.kind == "all-gather" and g not in gathers)
    assert all(g.avoidable for g in report.collectives if g.kind == "all-gather")
    assert any(f.kind == "avoidable-collective" and "all-gather" in f.message for f in report.findings)


@pytest.mark.parametrize("name", ["fixed4", "fixed_compile4"])
def test_the_fix_removes_the_all_gather(runs, name):
    report, _ = runs[name]
    assert report.collectives, "the fixed model still communicates (its all-reduces)"
    assert [g for g in report.collectives if g.kind == "all-gather"] == []


def test_lazy_graphs_match_torch_xla_metrics_and_name_the_sync(runs):
    """The example runs 3 steps lazily: one graph per step, cut at its torch_xla.sync()."""
    report, directory = runs["lazy4"]
    lazy = [g for g in report.run_graphs if g.origin == "lazy"]
    assert sum(g.executions for g in lazy) == STEPS
    synced = [g for g in lazy if g.cause == "sync"]
    assert synced and all((Path(g.filename).name, g.lineno) == ("sharded_train.py", _sync_line()) for g in synced)
    # torch_xla's own metrics of the same process (the xla.metrics probe's snapshot at exit)
    log = next((directory / "events").glob("events-*.jsonl"))
    events = ev.read_log(log).events
    seen = [e for e in events if isinstance(e, ev.XlaGraphSeen) and e.origin == ev.GraphOrigin.LAZY]
    assert {e.hash for e in seen} == {g.hash for g in lazy}
    assert all(e.num_partitions == 4 and e.frames for e in seen)
    compiles = sum(e.count for e in events if isinstance(e, ev.XlaCompile))
    assert sum(g.compiles for g in report.run_graphs) == compiles


def test_compiled_graphs_are_reported_beside_dynamo(runs):
    report, _ = runs["compile4"]
    assert report.graph_count >= 1
    assert {g.origin for g in report.run_graphs} == {"dynamo", "lazy"}
    dynamo = [g for g in report.run_graphs if g.origin == "dynamo"]
    assert all(g.executions == STEPS for g in dynamo)
    # torch_xla's debug file hashes a graph otherwise than the bridge's _get_graph_hash: count,
    # against the XLA graphs the bridge probe saw extracted
    assert len(dynamo) == sum(graph.xla_graphs for graph in report.xla_graphs)


def test_observing_changes_no_number(runs):
    observed = json.loads((runs["worker4"][1] / "out" / "results.json").read_text())
    plain = json.loads((runs["plain4"][1] / "out" / "results.json").read_text())
    for scenario in ("mlp", "mlp_compile", "gpt2"):
        assert observed[scenario]["losses"] == plain[scenario]["losses"], scenario
        assert observed[scenario]["weights"] == plain[scenario]["weights"], scenario


def test_text_and_html_show_the_pod_sections(runs, tmp_path):
    report, directory = runs["lazy4"]
    text = (directory / "stdout.txt").read_text()
    assert "XLA graphs run:" in text and "Collectives:" in text and "all-gather" in text
    page = write_html(report, tmp_path / "r.html").read_text()
    assert "<h2>Collectives</h2>" in page and "conflicting-sharding" in page


def _rank_logs(directory: Path) -> dict[int, list[ev.Event]]:
    logs = {}
    for path in (directory / "events").glob("events-*.jsonl"):
        events = ev.read_log(path).events
        if events[0].rank is not None:
            logs[events[0].rank] = events
    return logs


def test_diverging_rank_is_reported_with_its_line(runs):
    report, directory = runs["ranks"]
    from tests.pod import _rank_worker

    branch = _line(_rank_worker.main, "the branch only rank 1 takes")
    assert len(_rank_logs(directory)) == WORLD, "each rank captured automatically (WORLD_SIZE > 1)"
    assert report.divergences
    assert {d.step for d in report.divergences} == {DIVERGE_AT}
    assert {name for d in report.divergences for name in d.differences} == {"rank 1"}
    lines = [line for d in report.divergences for line in d.differences["rank 1"]]
    assert any(line.endswith(f"_rank_worker.py:{branch} (main)") for line in lines)
    assert any(f.kind == "divergence" for f in report.findings)
    assert "Processes:" in (directory / "stdout.txt").read_text()


def test_identical_ranks_report_no_divergence(runs):
    _, directory = runs["ranks"]
    logs = _rank_logs(directory)
    report = build_report(logs[0] + logs[2])
    assert len({g.pid for g in report.run_graphs}) == 2
    assert report.divergences == [] and report.uneven_compiles == []
