"""Dynamo's side of the diagnostics on CPU tensors, with no XLA involved: what runs on a machine
without torch_xla (the newest torch). Breaks and op counts against ``torch._dynamo.explain``,
recompiles against the shapes the test changes, locations against this file's lines."""

from __future__ import annotations

import dataclasses

import inspect
import time
from pathlib import Path

import pytest
import torch

import xlabridge.diagnostics as xd
from tests.diagnostics._torch_logs import expected_code, logged_breaks, outside_frameworks
from tests.diagnostics.test_explain import DYNAMO_CASES
from xlabridge.diagnostics import build_report
from xlabridge.diagnostics import events as ev


def _line_of(fn, marker: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if marker in line)


@pytest.mark.parametrize(("fn", "category"), DYNAMO_CASES, ids=[f.__name__ for f, _ in DYNAMO_CASES])
def test_breaks_on_cpu_match_torch_dynamo_explain(fn, category):
    x = torch.randn(16)
    expected = torch._dynamo.explain(fn)(x)
    with logged_breaks() as logged:
        report = xd.explain(fn, backend="aot_eager")(x)
    assert report.graph_count == expected.graph_count
    assert [g.op_count for g in report.dynamo_graphs] == [len(ops) for ops in expected.ops_per_graph]
    assert report.break_count == len(expected.break_reasons) == len(logged) == 1
    # the break as torch logs it (TORCH_LOGS=graph_breaks): its type, code and line
    assert [(b.reason, b.code) for b in report.dynamo_breaks] == [(t.gb_type, expected_code(t)) for t in logged]
    assert all((b.filename, b.lineno) == (t.file, t.line)
               for b, t in zip(report.dynamo_breaks, logged) if outside_frameworks(t.file))
    (only,) = report.dynamo_breaks
    assert only.category == category
    assert (only.filename, only.function) == (inspect.getsourcefile(fn), fn.__name__)
    assert all(p.state == "ok" for p in report.probes), report.probes


def test_recompiles_carry_the_guard_and_the_user_s_line():
    def scaled(x):
        return x * 2

    compiled = torch.compile(scaled, backend="aot_eager", dynamic=False)
    with xd.diagnose() as report:
        for size in (4, 8, 8, 16):
            compiled(torch.randn(size))
    assert report.graph_count == 3
    assert [r.category for r in report.recompiles] == ["shape-change"] * 2
    assert all("size mismatch" in r.reason for r in report.recompiles)
    assert {(r.filename, r.lineno, r.function) for r in report.recompiles} == {
        (__file__, _line_of(scaled, "def scaled"), "scaled")
    }


def test_a_recompile_for_another_backend_says_so():
    def doubled(x):
        return x * 2

    x = torch.randn(4)
    torch.compile(doubled, backend="eager")(x)
    with xd.diagnose() as report:
        torch.compile(doubled, backend="aot_eager")(x)
    (recompile,) = report.recompiles
    assert recompile.category == "another-backend"
    assert "another backend" in recompile.reason or "different backend" in recompile.reason  # torch 2.9 | newer


def test_recompiles_of_a_compiled_torch_module_point_at_the_calling_line():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    compiled = torch.compile(model, backend="aot_eager", dynamic=False)
    with xd.diagnose() as report:
        for rows in (2, 3, 5):
            compiled(torch.randn(rows, 4))  # CALL
    line = _line_of(test_recompiles_of_a_compiled_torch_module_point_at_the_calling_line, "# CALL")
    assert [(r.filename, r.lineno) for r in report.recompiles] == [(__file__, line)] * 2
    assert [(g.filename, g.lineno) for g in report.dynamo_graphs] == [(__file__, line)] * 3
    (group,) = report.recompile_groups
    assert group.count == 2 and "expected 2, actual 3" in group.first_reason


def test_a_cpu_run_round_trips_through_its_log_and_its_time_adds_up(tmp_path: Path):
    def step(x):
        y = x.sin()
        print(end="")  # a Dynamo graph break
        return y.cos()

    compiled = torch.compile(step, backend="aot_eager", dynamic=False)
    metrics = torch._dynamo.utils.compilation_time_metrics  # torch's own account of its compiles
    compiled_before = sum(metrics.get("_compile.compile_inner", []))
    began = time.perf_counter()
    with xd.diagnose(log=tmp_path / "events.jsonl") as report:
        for size in (8, 8, 16):
            compiled(torch.randn(size, requires_grad=True)).sum().backward()
        wall = time.perf_counter() - began
    torch_compiling = sum(metrics.get("_compile.compile_inner", [])) - compiled_before
    assert build_report(ev.read_log(tmp_path / "events.jsonl").events) == report
    (split,) = report.time
    shares = [getattr(split, f.name) for f in dataclasses.fields(split) if f.name not in ("pid", "wall")]
    assert all(share >= 0 for share in shares)
    assert sum(shares) == pytest.approx(wall, rel=0.05)
    # torch's own account of its compiles: all in the tracing share, but for the modules first imported
    # inside them (their own share)
    assert torch_compiling > 0
    assert split.tracing <= 1.1 * torch_compiling
    assert split.tracing + split.imports >= 0.9 * torch_compiling
    assert split.xla_compile == split.execution == split.cpu_fallback == 0
