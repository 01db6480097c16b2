"""Reports read from torch's structured trace (``TORCH_TRACE``) of runs that xlabridge did not observe,
checked against tlparse run on the same directory (graphs, breaks with their codes, recompiles with
the guard that failed) and against torch's own graph-break log; and xlabridge's rows written into the
trace of a run it observes, as tlparse lists them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import xlabridge.diagnostics as xd
from tests.conftest import requires_xla
from tests.diagnostics import _tlparse
from tests.diagnostics._torch_logs import expected_code, from_stderr, outside_frameworks
from xlabridge.diagnostics import _trace_artifacts
from xlabridge.diagnostics._observe import torch_trace

TRACED = Path(__file__).parent / "data" / "traced"
_AT = re.compile(r"in user code at (?P<file>.+):(?P<line>\d+)$", re.M)
_PAGE = re.compile(r"/gb/gb(\d+)\.html")


def assert_agrees_with_tlparse(report: xd.Report, parsed: _tlparse.Parsed, pid: int | None = None) -> None:
    """The report's graphs, breaks and recompiles of one process are those tlparse lists."""
    graphs = [g for g in report.dynamo_graphs if pid is None or g.pid == pid]
    breaks = [b for b in report.dynamo_breaks if pid is None or b.pid == pid]
    recompiles = [r for r in report.recompiles if pid is None or r.pid == pid]
    assert sorted(g.compile_id for g in graphs) == parsed.compile_ids("dynamo_output_graph")
    assert sorted((b.compile_id, b.code) for b in breaks) == sorted(
        (cid, f"GB{page.group(1)}" if (page := _PAGE.search(text)) else b_code)
        for (cid, text), b_code in zip(parsed.named("dynamo_graph_break_reason"),
                                       [b.code for b in sorted(breaks, key=lambda b: b.compile_id)]))
    # each break's line: torch's own ("in user code at FILE:LINE") where that is the user's code
    for (cid, text) in parsed.named("dynamo_graph_break_reason"):
        at = _AT.search(text)
        if at and outside_frameworks(at["file"]):
            assert (at["file"], int(at["line"])) in {(b.filename, b.lineno) for b in breaks if b.compile_id == cid}
    reasons = dict(parsed.named("recompile_reasons"))
    assert sorted(r.compile_id for r in recompiles) == sorted(reasons)
    for recompile in recompiles:
        assert recompile.guard and recompile.guard in reasons[recompile.compile_id]


def assert_logged_breaks_reported(logged: list, report: xd.Report) -> None:
    """Every break torch logged (``TORCH_LOGS=graph_breaks``) is a break of the report, as torch's record,
    with its compile id, type, code and line."""
    rows = {(b.compile_id, b.reason, b.code, b.filename, b.lineno) for b in report.dynamo_breaks if b.source == "torch"}
    for torch_break in logged:
        assert torch_break.compile_id, torch_break
        assert (torch_break.compile_id, torch_break.gb_type, expected_code(torch_break), torch_break.file,
                torch_break.line) in rows


@pytest.fixture(scope="module")
def breaks_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``breaks.py`` traced without xlabridge, with ``TORCH_LOGS=graph_breaks``: its trace directory and
    its output (one run for the tests that only read it)."""
    directory = tmp_path_factory.mktemp("breaks") / "trace"
    return directory, _tlparse.trace(TRACED / "breaks.py", directory, env={"TORCH_LOGS": "graph_breaks"})


def test_a_trace_without_xlabridge_reads_as_tlparse_reads_it(tmp_path: Path, breaks_trace: tuple[Path, str]):
    directory, out = breaks_trace
    assert "xlabridge imported: False" in out
    (log,) = torch_trace.logs(directory)
    report = xd.read_trace(directory)
    parsed = _tlparse.parse_log(log, tmp_path / "tl")
    assert_agrees_with_tlparse(report, parsed)
    assert report.graph_count >= 5 and report.break_count >= 2 and len(report.recompiles) >= 2
    # every break torch logs (TORCH_LOGS=graph_breaks) is in the report with its type, code and line
    logged = from_stderr(out)
    assert logged
    assert_logged_breaks_reported(logged, report)
    assert {b.category for b in report.dynamo_breaks} == {"print-or-logging", "data-dependent-branch"}
    assert "shape-change" in {r.category for r in report.recompiles}
    assert any("not observed" in w and "no execution times" in w for w in report.warnings)
    assert report.time == [] and report.xla_graphs == []


def test_the_command_reads_a_trace_directory(tmp_path: Path, breaks_trace: tuple[Path, str]):
    directory, _ = breaks_trace
    done = subprocess.run([sys.executable, "-m", "xlabridge.cli", "report", "--trace-dir", str(directory),
                           "--json", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = xd.Report.from_dict(__import__("json").loads((tmp_path / "r.json").read_text()))
    assert f"Dynamo: {report.graph_count} graphs, {report.break_count} breaks" in done.stdout
    assert report.break_count >= 2
    # the command reads the directory as read_trace does
    read = xd.read_trace(directory)
    assert [(b.compile_id, b.code, b.lineno) for b in report.dynamo_breaks] == [
        (b.compile_id, b.code, b.lineno) for b in read.dynamo_breaks]
    refused = subprocess.run([sys.executable, "-m", "xlabridge.cli", "report", "--trace-dir", str(tmp_path / "none")],
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "is not a directory" in refused.stderr


def test_a_trace_of_two_ranks_merges_as_tlparse_all_ranks_reads_it(tmp_path: Path):
    _tlparse.trace(TRACED / "ranks.py", tmp_path / "trace", "29512")
    logs = torch_trace.logs(tmp_path / "trace")
    assert sorted(re.search(r"rank_(\d)", p.name).group(1) for p in logs) == ["0", "1"]
    report = xd.read_trace(tmp_path / "trace")
    assert len(report.processes) == 2 and sorted(p.rank for p in report.processes) == [0, 1]
    # a trace does not record how a process ended: no process is taken for one that died
    assert {p.ending for p in report.processes} == {"traced"}
    assert not [f for f in report.findings if f.kind == "process-ended"]
    _tlparse.run(tmp_path / "trace", tmp_path / "tl", all_ranks=True)
    for process in report.processes:
        parsed = _tlparse.read(tmp_path / "tl" / f"rank_{process.rank}")
        assert_agrees_with_tlparse(report, parsed, pid=process.pid)
    by_rank = {p.rank: [b for b in report.dynamo_breaks if b.pid == p.pid] for p in report.processes}
    assert len(by_rank[0]) == 0 and len(by_rank[1]) == 1


def test_xlabridge_rows_go_into_the_trace_of_a_run_it_observes(tmp_path: Path):
    env = {"TORCH_TRACE": str(tmp_path / "trace")}
    import os

    done = subprocess.run(
        [sys.executable, "-m", "xlabridge.cli", "report", "--", sys.executable, str(TRACED / "breaks.py")],
        capture_output=True, text=True, timeout=600, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-2000:]
    ours = [p for p in torch_trace.logs(tmp_path / "trace")
            if any(r.name == "dynamo_output_graph" for r in torch_trace.records(p)[0])]
    (log,) = ours
    parsed = _tlparse.parse_log(log, tmp_path / "tl")
    listed = {re.sub(r"_\d+\.(json|txt)$", "", a["name"]) for items in parsed.artifacts.values() for a in items}
    assert {_trace_artifacts.HLO_LOWERING, _trace_artifacts.FINDINGS, _trace_artifacts.REPORT} <= listed
    (findings_text,) = [text for _, text in parsed.named(_trace_artifacts.FINDINGS)]
    findings = __import__("json").loads(findings_text)
    assert {f["kind"] for f in findings} >= {"dynamo-break", "recompiles"}
    # the trace still reads as tlparse reads it, xlabridge's own rows aside
    assert_agrees_with_tlparse(xd.read_trace(tmp_path / "trace"), parsed, pid=torch_trace.records(log)[0][0].pid)


@requires_xla
@pytest.mark.slow
def test_the_demo_traced_under_xlabridge_reads_as_tlparse_reads_it(tmp_path: Path):
    """The bundled demo (a graph break, recompiles of the graph that resumes after it, an HLO lowering
    break) under ``xlabridge report`` with ``TORCH_TRACE`` set: the report read back from the trace has
    tlparse's graphs, break (with its code) and recompiles (with their guards), so has the report of
    the run, every break torch logs is in both, and the HLO lowering break, which a trace cannot
    otherwise hold, is in the trace as tlparse lists xlabridge's artifact."""
    import json
    import os

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "TORCH_TRACE": str(tmp_path / "trace"), "TORCH_LOGS": "graph_breaks",
           "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "xlabridge.cli", "report", "--json", str(tmp_path / "r.json"), "--",
                           sys.executable, "-m", "xlabridge.examples.demo"],
                          capture_output=True, text=True, timeout=900, env=env, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    observed = xd.Report.from_dict(json.loads((tmp_path / "r.json").read_text()))
    (log,) = [p for p in torch_trace.logs(tmp_path / "trace")
              if any(r.name == "dynamo_output_graph" for r in torch_trace.records(p)[0])]
    parsed = _tlparse.parse_log(log, tmp_path / "tl")
    report = xd.read_trace(tmp_path / "trace")
    assert_agrees_with_tlparse(report, parsed)
    assert_agrees_with_tlparse(observed, parsed)
    counts = (parsed.count("dynamo_output_graph"), parsed.count("dynamo_graph_break_reason"),
              parsed.count("recompile_reasons"))
    assert (report.graph_count, report.break_count, len(report.recompiles)) == counts
    assert (observed.graph_count, observed.break_count, len(observed.recompiles)) == counts
    assert counts[1] >= 1 and counts[2] >= 1
    logged = from_stderr(done.stderr)
    assert logged
    assert_logged_breaks_reported(logged, report)
    assert_logged_breaks_reported(logged, observed)
    # the HLO lowering break: in the run's report, and in the trace as xlabridge wrote it there
    assert {b.op for b in observed.hlo_breaks} == {"aten::exp2"}
    (lowering,) = [json.loads(text) for _, text in parsed.named(_trace_artifacts.HLO_LOWERING)]
    assert [(b["op"], b["category"], b["filename"], b["lineno"]) for b in lowering["breaks"]] == [
        (b.op, b.category, b.filename, b.lineno) for b in observed.hlo_breaks]
    assert len(lowering["graphs"]) == len(observed.xla_graphs)
    assert report.hlo_breaks == [] and any("HLO lowering" in w for w in report.warnings)


REAL = [("trainer.py", ()), ("models_step.py", ("bert", "inference")), ("models_step.py", ("llama", "training")),
        ("models_step.py", ("gpt2", "inference"))]
"""Real scripts: GPT-2 under Hugging Face's Trainer, and transformers models of ``tests/models.py``."""


def check_real_script(tmp_path: Path, script: str, args: tuple[str, ...]) -> None:
    """Traced without xlabridge with ``TORCH_LOGS=graph_breaks``: the report read from the trace agrees
    with tlparse, and every break torch logs is in it with its type, code and line; then the same
    script observed by ``xlabridge report`` reports the same breaks (torch's own record, in process)."""
    pytest.importorskip("transformers")
    if script == "trainer.py":
        pytest.importorskip("accelerate")
    import json
    import os

    root = Path(__file__).resolve().parents[2]
    env = {"TORCH_LOGS": "graph_breaks", "PYTHONPATH": str(root), "TPU_SKIP_MDS_QUERY": "1"}
    out = _tlparse.trace(TRACED / script, tmp_path / "trace", *args, env=env)
    assert "xlabridge imported: False" in out
    (log,) = torch_trace.logs(tmp_path / "trace")
    report = xd.read_trace(tmp_path / "trace")
    assert_agrees_with_tlparse(report, _tlparse.parse_log(log, tmp_path / "tl"))
    logged = from_stderr(out)
    assert logged or script != "trainer.py"  # the Trainer's GPT-2 breaks at its loss function's logger call
    assert_logged_breaks_reported(logged, report)
    done = subprocess.run(
        [sys.executable, "-m", "xlabridge.cli", "report", "--json", str(tmp_path / "r.json"), "--",
         sys.executable, str(TRACED / script), *args],
        capture_output=True, text=True, timeout=900, cwd=root,
        env={**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])})
    assert done.returncode == 0, done.stderr[-3000:]
    observed = xd.Report.from_dict(json.loads((tmp_path / "r.json").read_text()))
    logged = from_stderr(done.stderr)
    assert logged or script != "trainer.py"
    assert_logged_breaks_reported(logged, observed)
    # Any other break is a graph that ended where torch logged no break, reported with the reason its
    # backend was handed. Torch 2.9 logs none for a graph that Dynamo ends after restarting its
    # analysis on an error a nested call raised at an instruction it cannot split at
    # (InstructionTranslatorBase.step: compile_subgraph_reason "step_unsupported", no log_graph_break):
    # GPT-2's forward under the Trainer, whose loss_function calls a logger, ends so (TORCH_LOGS names
    # [0/0] and [2/0], not [1/0]). Torch 2.15 logs that break too.
    unlogged = [b for b in observed.dynamo_breaks if b.source != "torch"]
    assert not {b.compile_id for b in unlogged} & {b.compile_id for b in logged}
    assert all(b.reason == "step_unsupported" and b.ends_graph for b in unlogged)
    assert {b.compile_id for b in unlogged} <= {g.compile_id for g in observed.dynamo_graphs if g.ends_in_break}
    assert sorted(g.compile_id for g in observed.dynamo_graphs) == sorted(g.compile_id for g in report.dynamo_graphs)


@pytest.mark.slow
@pytest.mark.parametrize(("script", "args"), REAL, ids=[" ".join((s, *a)) for s, a in REAL])
def test_real_scripts_read_from_their_trace(tmp_path: Path, script: str, args: tuple[str, ...]):
    check_real_script(tmp_path, script, args)
