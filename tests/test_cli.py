"""``xlabridge report`` on unmodified scripts, run as a user would run it: each process writes
an event log, the command merges them (process ids kept apart) and can re-read them later."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import requires_xla

pytestmark = requires_xla

SCRIPT = textwrap.dedent(
    """
    import torch, torch_xla

    def step(x):
        y = (x * 3).sin()
        print("logging inside the step")
        return torch.exp2(y).cos()

    compiled = torch.compile(step, backend="openxla")
    x = torch.randn(32, device=torch_xla.device())
    for _ in range(3):
        compiled(x)
        torch_xla.sync()
    {ending}
    """
)


def _report(tmp_path: Path, ending: str, *extra: str) -> tuple[subprocess.CompletedProcess, dict, Path]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(ending=ending))
    json_path, html_path = tmp_path / "report.json", tmp_path / "report.html"
    result = subprocess.run(
        [sys.executable, "-m", "xlabridge.cli", "report", "--json", str(json_path), "--html", str(html_path),
         *extra, "--", sys.executable, str(script)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    return result, json.loads(json_path.read_text()), script


@pytest.mark.parametrize("ending", ["print('done')", "raise RuntimeError('the script failed')"])
def test_report_on_an_unmodified_script_also_when_it_raises(tmp_path, ending):
    result, report, script = _report(tmp_path, ending)
    raised = "raise" in ending
    assert (result.returncode != 0) == raised, result.stderr[-2000:]
    assert ("the script failed" in result.stderr) == raised
    assert report["schema"] == "xlabridge.report/4"
    assert report["environment"]["torch_xla"] and report["environment"]["pjrt_device"] == "CPU"
    dynamo, hlo = report["dynamo"], report["hlo"]
    assert (dynamo["graph_count"], dynamo["break_count"]) == (2, 1)
    (dynamo_break,) = dynamo["breaks"]
    assert (dynamo_break["filename"], dynamo_break["lineno"], dynamo_break["category"]) == (
        str(script), 6, "print-or-logging"
    )
    assert [(b["op"], b["filename"], b["lineno"]) for b in hlo["breaks"]] == [("aten::exp2", str(script), 7)]
    assert [g["calls"] for g in hlo["graphs"]] == [3, 3]
    assert "aten::exp2" in result.stdout and f"{script.name}:6" in result.stdout
    assert (tmp_path / "report.html").read_text().count('class="fx-graph"') == len(hlo["graphs"])  # one picture each
    ((time,),) = [report["time"]]
    assert 0 < time["tracing"] < time["wall"] and 0 < time["xla_compile"] < time["wall"]
    assert all(p["state"] == "ok" for p in report["probes"]), report["probes"]


CHILD = textwrap.dedent(
    """
    import subprocess, sys, torch, torch_xla

    def scale(x):
        return (x * 2).sin()

    torch.compile(scale, backend="openxla")(torch.randn(8, device=torch_xla.device()))
    torch_xla.sync()
    if len(sys.argv) == 1:  # the parent starts one child running the same script
        subprocess.run([sys.executable, __file__, "child"], check=True)
    """
)


def test_report_merges_the_event_logs_of_every_process_and_reads_them_back(tmp_path):
    script, events_dir = tmp_path / "launch.py", tmp_path / "events"
    script.write_text(CHILD)
    json_path = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "xlabridge.cli", "report", "--json", str(json_path), "--events", str(events_dir),
         "--", sys.executable, str(script)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    logs = sorted(events_dir.glob("events-*.jsonl"))
    assert len(logs) == 2
    report = json.loads(json_path.read_text())
    pids = {int(log.stem.split("-")[1]) for log in logs}
    assert {p["pid"] for p in report["processes"]} == pids
    assert {g["pid"] for g in report["dynamo"]["graphs"]} == pids
    assert [g["compile_id"] for g in report["dynamo"]["graphs"]] == ["0/0", "0/0"]  # per process, kept apart
    assert len(report["time"]) == 2
    reread = subprocess.run(
        [sys.executable, "-m", "xlabridge.cli", "report", "--read", str(events_dir), "--json", str(tmp_path / "again.json")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert reread.returncode == 0, reread.stderr[-2000:]
    assert json.loads((tmp_path / "again.json").read_text()) == report


def test_report_needs_a_command():
    result = subprocess.run(
        [sys.executable, "-m", "xlabridge.cli", "report"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "give the command to run after '--'" in result.stderr


def test_compare_runs_the_bundled_step_lazily_and_compiled(tmp_path):
    json_path = tmp_path / "compare.json"
    result = subprocess.run(
        [sys.executable, "-m", "xlabridge.cli", "compare", "--steps", "2", "--warmup", "1", "--json", str(json_path),
         "xlabridge/examples/compare_step.py"],
        capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[1],
    )
    assert result.returncode == 0, result.stderr[-2000:]
    comparison = json.loads(json_path.read_text())
    assert comparison["lazy"]["steps"] == comparison["compiled"]["steps"] == 2
    assert comparison["dynamo"]["graph_breaks"], "the demo step breaks at .item() and .backward()"
    assert comparison["compiled"]["xla_graphs_per_step"] > comparison["lazy"]["xla_graphs_per_step"]
    assert "verdict: " in result.stdout


@pytest.mark.parametrize(
    ("target", "message"),
    [("no/such/file.py", "is not a file"), ("xlabridge/examples/demo.py", "defines no function 'make_step'")],
)
def test_compare_names_a_bad_target(target, message):
    result = subprocess.run(
        [sys.executable, "-m", "xlabridge.cli", "compare", target],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1],
    )
    assert result.returncode != 0 and message in result.stderr
