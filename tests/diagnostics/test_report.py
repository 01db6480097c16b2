"""Reports are built from events only: a report rebuilt from a saved log equals the live one,
JSON round-trips, causes are applied when the report is built, and the time split adds up to
the wall time measured by the test itself."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import torch

import xlabridge.diagnostics as xd
from tests.conftest import requires_xla
from xlabridge.diagnostics import build_report, render_text
from xlabridge.diagnostics._build import causes
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics.report import Report


def _step(x: torch.Tensor) -> torch.Tensor:
    y = torch.exp2((x * 3).sin())
    print(end="")  # a Dynamo graph break
    return y.cos()


@requires_xla
def test_a_report_rebuilt_from_the_saved_log_equals_the_live_one(xla_device, tmp_path: Path) -> None:
    import torch_xla

    log = tmp_path / "events.jsonl"
    compiled = torch.compile(_step, backend="openxla", dynamic=False)
    with xd.diagnose(log=log, capture_hlo=True) as live:
        for size in (16, 16, 16, 16, 16, 32):
            compiled(torch.randn(size, device=xla_device, requires_grad=True)).sum().backward()
            torch_xla.sync()
    contents = ev.read_log(log)
    assert contents.skipped == 0
    rebuilt = build_report(contents.events)
    assert rebuilt == live
    assert Report.from_dict(live.to_dict()) == live
    assert live.graph_count == 4 and live.break_count == 2 and len(live.recompiles) == 2
    assert any(g.role == "backward" for g in live.xla_graphs)
    assert max(g.calls for g in live.xla_graphs) == 5
    hlo_files = [f for g in live.xla_graphs for f in g.hlo_files]
    assert hlo_files and all(f and (tmp_path / f).stat().st_size > 0 for f in hlo_files)
    assert sum(len(g.hashes) for g in live.xla_graphs) == sum(g.xla_graphs for g in live.xla_graphs)


def _events_with_recompile(reason: str) -> list[ev.Event]:
    stamp = {"pid": 7, "rank": None, "world": None}
    frame = ev.Frame("/home/u/train.py", 3, "step")
    return [
        ev.ProcessStart(t=0.0, **stamp, framework_paths={"torch": ["/site/torch"]}, main_file="/home/u/train.py"),
        ev.DynamoCompile(t=1.0, **stamp, compile_id="0/1", start=0.5),
        ev.GraphCaptured(t=1.0, **stamp, compile_id="0/1", backend="openxla", op_count=1, frames=[frame]),
        ev.Recompile(t=1.0, **stamp, compile_id="0/1", reason=reason, code=frame),
        ev.ProcessEnd(t=2.0, **stamp, start=0.0),
    ]


def test_every_recompile_carries_a_reason_and_its_cause_even_when_dynamo_names_no_guard() -> None:
    report = build_report(_events_with_recompile("0/0: "))
    (recompile,) = report.recompiles
    assert recompile.category == "another-backend"
    assert "another backend" in recompile.reason and recompile.reason.startswith("0/0")
    assert (recompile.filename, recompile.lineno, recompile.function) == ("/home/u/train.py", 3, "step")
    (group,) = report.recompile_groups
    assert group.count == 1 and group.first_reason == group.last_reason == recompile.reason


def test_causes_are_applied_when_the_report_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """A newer cause table re-reads an older log: categories are not stored in events."""
    events = _events_with_recompile("0/0: tensor 'x' size mismatch at index 0. expected 4, actual 8")
    assert build_report(events).recompiles[0].category == "shape-change"
    newer = (causes.Cause("batch-size", r"size mismatch at index 0", "Pad the last batch."), *causes.RECOMPILE_CAUSES)
    monkeypatch.setattr(causes, "RECOMPILE_CAUSES", newer)
    (recompile,) = build_report(events).recompiles
    assert (recompile.category, recompile.suggestion) == ("batch-size", "Pad the last batch.")


def test_the_user_frame_rule_travels_with_the_log() -> None:
    """Frames are classified with the recording process's directories, not the reader's."""
    events = _events_with_recompile("0/0: x")
    other_machine = dataclasses.replace(events[0], framework_paths={"torch": ["/home/u"]}, main_file=None)
    report = build_report([other_machine, *events[1:]])
    assert report.dynamo_graphs[0].filename == "<unknown>"


@requires_xla
def test_demo_time_split_adds_up_to_the_independently_measured_wall_time(xla_device) -> None:
    import torch_xla.debug.metrics as met
    from torch._dynamo.utils import get_compilation_metrics

    from xlabridge.examples import demo

    torch._dynamo.reset()
    compile_before = (met.metric_data("CompileTime") or (0, 0.0))[1]
    def key(record):
        return str(record.compile_id), record.is_forward, record.start_time_us

    dynamo_records = {key(r) for r in get_compilation_metrics()}  # Dynamo keeps its last 64 records
    began = time.perf_counter()
    with xd.diagnose() as report:
        demo.train(steps=5, backend="openxla")
        wall = time.perf_counter() - began
    compile_seconds = ((met.metric_data("CompileTime") or (0, 0.0))[1] - compile_before) / 1e9
    dynamo_seconds = sum(
        m.entire_frame_compile_time_s or 0.0 for m in get_compilation_metrics() if key(m) not in dynamo_records
    )

    (split,) = report.time
    shares = [split.tracing, split.xla_compile, split.execution, split.cpu_fallback, split.other]
    assert all(share >= 0 for share in shares), split
    assert sum(shares) == pytest.approx(wall, rel=0.05)
    assert split.wall == pytest.approx(wall, rel=0.05)
    # each share against torch's and torch_xla's own measurements of the same work
    assert split.xla_compile == pytest.approx(compile_seconds, rel=1e-6)
    assert split.tracing >= 0.9 * dynamo_seconds > 0  # tracing holds Dynamo's compile time (and extractions)
    assert split.tracing + split.xla_compile <= wall
    assert split.cpu_fallback > 0  # the demo's exp2 runs on the host at every call
    text = render_text(report)
    assert "Time:" in text and "XLA compile" in text
