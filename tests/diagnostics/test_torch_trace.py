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


def test_a_trace_without_xlabridge_reads_as_tlparse_reads_it(tmp_path: Path):
    out = _tlparse.trace(TRACED / "breaks.py", tmp_path / "trace", env={"TORCH_LOGS": "graph_breaks"})
    assert "xlabridge imported: False" in out
    (log,) = torch_trace.logs(tmp_path / "trace")
    report = xd.read_trace(tmp_path / "trace")
    parsed = _tlparse.parse_log(log, tmp_path / "tl")
    assert_agrees_with_tlparse(report, parsed)
    assert report.graph_count >= 5 and report.break_count >= 2 and len(report.recompiles) >= 2
    # every break torch logs (TORCH_LOGS=graph_breaks) is in the report with its type, code and line
    logged = from_stderr(out)
    assert logged
    rows = {(b.reason, b.code, b.filename, b.lineno) for b in report.dynamo_breaks}
    for torch_break in logged:
        assert (torch_break.gb_type, expected_code(torch_break), torch_break.file, torch_break.line) in rows
    assert {b.category for b in report.dynamo_breaks} == {"print-or-logging", "data-dependent-branch"}
    assert "shape-change" in {r.category for r in report.recompiles}
    assert any("not observed" in w and "no execution times" in w for w in report.warnings)
    assert report.time == [] and report.xla_graphs == []


def test_the_command_reads_a_trace_directory(tmp_path: Path):
    _tlparse.trace(TRACED / "breaks.py", tmp_path / "trace")
    done = subprocess.run([sys.executable, "-m", "xlabridge.cli", "report", "--trace-dir", str(tmp_path / "trace"),
                           "--json", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = xd.Report.from_dict(__import__("json").loads((tmp_path / "r.json").read_text()))
    assert f"Dynamo: {report.graph_count} graphs, {report.break_count} breaks" in done.stdout
    assert report.break_count >= 2
    refused = subprocess.run([sys.executable, "-m", "xlabridge.cli", "report", "--trace-dir", str(tmp_path / "none")],
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "is not a directory" in refused.stderr


def test_a_trace_of_two_ranks_merges_as_tlparse_all_ranks_reads_it(tmp_path: Path):
    _tlparse.trace(TRACED / "ranks.py", tmp_path / "trace", "29512")
    logs = torch_trace.logs(tmp_path / "trace")
    assert sorted(re.search(r"rank_(\d)", p.name).group(1) for p in logs) == ["0", "1"]
    report = xd.read_trace(tmp_path / "trace")
    assert len(report.processes) == 2 and sorted(p["rank"] for p in report.processes) == [0, 1]
    _tlparse.run(tmp_path / "trace", tmp_path / "tl", all_ranks=True)
    for process in report.processes:
        parsed = _tlparse.read(tmp_path / "tl" / f"rank_{process['rank']}")
        assert_agrees_with_tlparse(report, parsed, pid=process["pid"])
    by_rank = {p["rank"]: [b for b in report.dynamo_breaks if b.pid == p["pid"]] for p in report.processes}
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
    rows = {(b.reason, b.code, b.filename, b.lineno) for b in report.dynamo_breaks}
    for torch_break in logged:
        assert (torch_break.gb_type, expected_code(torch_break), torch_break.file, torch_break.line) in rows
    done = subprocess.run(
        [sys.executable, "-m", "xlabridge.cli", "report", "--json", str(tmp_path / "r.json"), "--",
         sys.executable, str(TRACED / script), *args],
        capture_output=True, text=True, timeout=900, cwd=root,
        env={**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])})
    assert done.returncode == 0, done.stderr[-3000:]
    observed = xd.Report.from_dict(json.loads((tmp_path / "r.json").read_text()))
    rows = {(b.reason, b.code, b.filename, b.lineno) for b in observed.dynamo_breaks}
    for torch_break in from_stderr(done.stderr):
        assert (torch_break.gb_type, expected_code(torch_break), torch_break.file, torch_break.line) in rows
    assert all(b.source == "torch" for b in observed.dynamo_breaks)
    assert sorted(g.compile_id for g in observed.dynamo_graphs) == sorted(g.compile_id for g in report.dynamo_graphs)


@pytest.mark.slow
@pytest.mark.parametrize(("script", "args"), REAL, ids=[" ".join((s, *a)) for s, a in REAL])
def test_real_scripts_read_from_their_trace(tmp_path: Path, script: str, args: tuple[str, ...]):
    check_real_script(tmp_path, script, args)
