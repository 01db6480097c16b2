"""explain/diagnose against independent references: torch._dynamo.explain for the Dynamo
side, torch_xla's own metrics for the HLO side, and the source lines of this file."""

from __future__ import annotations

import copy
import inspect
import os
import warnings

import pytest
import torch

import xlabridge
from tests.diagnostics._torch_logs import expected_code, logged_breaks, outside_frameworks
import xlabridge.diagnostics as xd
from tests import models
from tests.conftest import requires_xla
from xlabridge.diagnostics._observe.probes import xla_bridge
from xlabridge.errors import DiagnosticsWarning

pytestmark = requires_xla


def _line_of(fn, marker: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if marker in line)


def branch_on_value(x):
    y = x.sin()
    if y.sum() > 0:  # BREAK
        return y.cos()
    return y.tan()


def calls_print(x):
    y = x.sin()
    print("step")  # BREAK
    return y.cos()


def calls_item(x):
    y = x.sin()
    scale = y.sum().item()  # BREAK
    return y * scale


def calls_nonzero(x):
    y = x.sin()
    index = torch.nonzero(y > 0)  # BREAK
    return index.float().sum() + y.sum()


def calls_deepcopy(x):
    y = x.sin()
    z = copy.deepcopy(y)  # BREAK
    return z.cos()


def calls_exp2(x):
    y = (x * 3).sin()
    z = torch.exp2(y)  # FALLBACK
    return (z + 1).cos()


DYNAMO_CASES = [
    (branch_on_value, "data-dependent-branch"),
    (calls_print, "print-or-logging"),
    (calls_item, "tensor-item"),
    (calls_nonzero, "dynamic-shape-op"),
    (calls_deepcopy, "deepcopy"),
]


@pytest.mark.parametrize(("fn", "category"), DYNAMO_CASES, ids=[f.__name__ for f, _ in DYNAMO_CASES])
def test_dynamo_breaks_match_torch_dynamo_explain(fn, category, xla_device):
    x = torch.randn(16, device=xla_device)
    expected = torch._dynamo.explain(fn)(x)
    with logged_breaks() as logged:
        report = xd.explain(fn)(x)

    assert report.graph_count == expected.graph_count
    assert report.break_count == len(expected.break_reasons) == expected.graph_break_count == len(logged)
    # each break as torch logs it (TORCH_LOGS=graph_breaks): its type, code and line
    assert [(b.reason, b.code) for b in report.dynamo_breaks] == [(t.gb_type, expected_code(t)) for t in logged]
    assert all((b.filename, b.lineno) == (t.file, t.line)
               for b, t in zip(report.dynamo_breaks, logged) if outside_frameworks(t.file))
    # a code for each: the page torch's message names (torch 2.9 and later), else its registry's by the
    # break's type (torch 2.8), which lists the data-dependent branch's as "_gb_type" (the name of the
    # variable generic_jump passes, not its value): torch 2.8 has no code for that one
    assert all(b.code.startswith("GB") or (not t.code and b.reason == "Data-dependent branching")
               for b, t in zip(report.dynamo_breaks, logged))
    assert all(b.hints for b in report.dynamo_breaks)
    (only,) = report.dynamo_breaks
    assert only.category == category
    assert (only.filename, only.lineno, only.function) == (__file__, _line_of(fn, "# BREAK"), fn.__name__)
    assert only.suggestion
    assert report.hlo_break_count == 0


def test_exp2_is_an_hlo_break_matching_torch_xla_fallback_metrics(xla_device):
    import torch_xla
    import torch_xla.debug.metrics as met

    x = torch.randn(64, device=xla_device)
    with xd.diagnose() as report:
        compiled = torch.compile(calls_exp2, backend="openxla")
        compiled(x)
        met.clear_all()
        compiled(x)
        torch_xla.sync()
        executions = met.metric_data("RunCachedGraphOutputData")[0]
        fallback_ops = met.executed_fallback_ops()

    assert report.graph_count == 1 and report.break_count == 0
    assert [b.op for b in report.hlo_breaks] == fallback_ops == ["aten::exp2"]
    (hlo_break,) = report.hlo_breaks
    assert (hlo_break.filename, hlo_break.lineno) == (__file__, _line_of(calls_exp2, "# FALLBACK"))
    assert "torch.pow(2.0, x)" in hlo_break.suggestion
    (graph,) = report.xla_graphs
    assert [s.kind for s in graph.segments] == ["xla", "cpu", "xla"]
    assert graph.xla_graphs == 2
    assert graph.executions_per_call == executions == 2
    assert graph.transfers_per_call == 2
    assert graph.calls == 2


def test_lowering_rewrite_removes_the_hlo_break(xla_device):
    def with_pow(x):
        return (torch.pow(2.0, (x * 3).sin()) + 1).cos()

    report = xd.explain(with_pow)(torch.randn(64, device=xla_device))
    assert report.hlo_break_count == 0
    assert [g.xla_graphs for g in report.xla_graphs] == [1]


def test_recompiles_from_new_shapes_carry_guard_reasons(xla_device):
    def scaled(x):
        return x * 2

    compiled = torch.compile(scaled, backend="openxla", dynamic=False)
    with xd.diagnose() as report:
        for size in (4, 8, 8, 16):
            compiled(torch.randn(size, device=xla_device))
    assert report.graph_count == 3
    assert len(report.recompiles) == 2
    for recompile in report.recompiles:
        assert "size mismatch" in recompile.reason
        assert (recompile.filename, recompile.function) == (__file__, "scaled")


def test_diagnose_does_not_change_results_or_add_executions(xla_device):
    import torch_xla.debug.metrics as met

    def step(backend: str, observe: bool):
        torch._dynamo.reset()
        model, inputs = models.build("gpt2", xla_device)
        compiled = torch.compile(model, backend=backend)
        with xd.diagnose() if observe else _no_report():
            loss = models.loss_of(compiled(**inputs))
            loss.backward()
            met.clear_all()
            loss = models.loss_of(compiled(**inputs))
            loss.backward()
            runs = met.metric_data("RunCachedGraphOutputData")[0]
        grads = [p.grad.cpu() for p in model.parameters() if p.grad is not None]
        return loss.cpu(), grads, runs

    plain_loss, plain_grads, plain_runs = step("openxla", observe=False)
    seen_loss, seen_grads, seen_runs = step("openxla", observe=True)
    assert torch.equal(plain_loss, seen_loss)
    assert all(torch.equal(a, b) for a, b in zip(plain_grads, seen_grads))
    assert seen_runs == plain_runs


class _no_report:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_a_failure_in_collection_warns_once_and_the_model_still_runs(xla_device, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("simulated bookkeeping bug")

    monkeypatch.setattr(xla_bridge, "_segments", broken)
    x = torch.randn(64, device=xla_device)
    expected = torch.compile(calls_exp2, backend="openxla")(x).cpu()
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = xd.explain(calls_exp2)(x)
    messages = [str(w.message) for w in caught if issubclass(w.category, DiagnosticsWarning)]
    assert len(messages) == 1 and "simulated bookkeeping bug" in messages[0] and "'xla.bridge'" in messages[0]
    assert report.warnings == messages
    assert [(p.name, p.state) for p in report.probes if p.state != "ok"] == [("xla.bridge", "failed")]
    assert report.graph_count == 1
    torch._dynamo.reset()
    with xd.diagnose():
        actual = torch.compile(calls_exp2, backend="xlabridge")(x).cpu()
    assert torch.equal(actual, expected)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "bert", "t5", "llama", "resnet18"])
def test_real_models_match_torch_dynamo_explain(name, xla_device):
    model, inputs = models.build(name, xla_device)
    model.eval()
    batch = models.without_labels(model, inputs)
    expected = torch._dynamo.explain(model)(**batch)
    with logged_breaks() as logged:
        report = xd.explain(model)(**batch)
    assert report.graph_count == expected.graph_count
    assert [g.op_count for g in report.dynamo_graphs] == [len(ops) for ops in expected.ops_per_graph]
    # explain counts a break per graph that ends in one; torch's record also has the breaks that end
    # none (before a frame's first op, or one that makes Dynamo skip the rest of its frame: T5's
    # config deepcopy reached from nested frames), which the report lists with ends_graph false
    assert [b.reason for b in report.dynamo_breaks if b.ends_graph] == [
        r.reason.strip().splitlines()[0] for r in expected.break_reasons
    ]
    # every break torch logs (TORCH_LOGS=graph_breaks) is the report's, with its type, code and line
    rows = {(b.reason, b.code, b.filename, b.lineno) for b in report.dynamo_breaks}
    for torch_break in logged:
        assert (torch_break.gb_type, expected_code(torch_break), torch_break.file, torch_break.line) in rows
    framework_dirs = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch, xlabridge))
    for dynamo_break in report.dynamo_breaks:
        assert not os.path.realpath(dynamo_break.filename).startswith(framework_dirs), dynamo_break.filename
        assert dynamo_break.lineno > 0
    assert report.xla_graphs and all(g.xla_graphs >= 1 for g in report.xla_graphs)
    assert sum(g.fx_ops for g in report.xla_graphs) > 0
    assert all(p.state == "ok" for p in report.probes), report.probes


def index_with_cpu_index(xt, i):
    return xt[i]  # HOST


def to_host(t):
    return t.cpu()  # HOST


def method_exp2(t):
    return t.exp2().cos()  # HOST


HLO_CASES = [
    (index_with_cpu_index, "aten::index", "host-tensor"),
    (to_host, "aten::_to_copy", "host-tensor"),
    (method_exp2, "aten::exp2", "cpu-fallback"),
]


@pytest.mark.parametrize(("fn", "op", "category"), HLO_CASES, ids=[c[0].__name__ for c in HLO_CASES])
def test_hlo_breaks_of_forward_only_graphs_are_openxla_s(fn, op, category, xla_device):
    """The forward-only path lists the same HLO lowering breaks as openxla: indexing with a CPU
    index, ``.cpu()``, method calls, so the report does not depend on the path a graph took."""
    args = (torch.randn(6, 4, device=xla_device), torch.tensor([0, 2])) if fn is index_with_cpu_index else (
        torch.randn(5, device=xla_device),)
    seen = {}
    for backend in ("openxla", "xlabridge"):
        torch._dynamo.reset()
        with torch.no_grad(), xd.diagnose() as report:
            torch.compile(fn, backend=backend)(*args)
        seen[backend] = [(b.op, b.category, b.filename, b.lineno) for b in report.hlo_breaks]
        if backend == "xlabridge":
            assert [g.path for g in report.dynamo_graphs] == ["forward-only"]
    assert seen["xlabridge"] == seen["openxla"] == [(op, category, __file__, _line_of(fn, "# HOST"))]


def test_a_recompile_for_another_backend_carries_a_reason(xla_device):
    def scaled(x):
        return x * 2

    x = torch.randn(4, device=xla_device)
    torch.compile(scaled, backend="openxla")(x)
    with xd.diagnose() as report:
        torch.compile(scaled, backend="xlabridge")(x)
    (recompile,) = report.recompiles
    assert recompile.category == "another-backend" and "another backend" in recompile.reason
    assert (recompile.filename, recompile.function) == (__file__, "scaled")


def test_recompiles_of_a_compiled_module_are_located_at_the_user_s_call(xla_device):
    """``torch.compile(nn.Sequential(...))`` compiles a wrapper in torch/_dynamo/external_utils.py;
    the report locates its recompiles at the user's line that called the module, the line to change."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).to(xla_device)
    compiled = torch.compile(model, backend="openxla", dynamic=False)
    with xd.diagnose() as report:
        for rows in (2, 3, 5):
            compiled(torch.randn(rows, 4, device=xla_device))  # CALL
    line = _line_of(test_recompiles_of_a_compiled_module_are_located_at_the_user_s_call, "# CALL")
    assert [(r.filename, r.lineno) for r in report.recompiles] == [(__file__, line)] * 2
    assert all("size mismatch" in r.reason and r.category == "shape-change" for r in report.recompiles)
    assert all("external_utils.py" in r.code for r in report.recompiles)
    (group,) = report.recompile_groups
    assert (group.count, group.filename, group.lineno) == (2, __file__, line)
    assert "expected 2, actual 3" in group.first_reason and "expected 3, actual 5" in group.last_reason


def test_a_graph_on_the_cpu_only_is_a_finding_for_openxla_too(xla_device):
    with xd.diagnose() as report:
        torch.compile(lambda t: t.sin() * 2, backend="openxla")(torch.randn(8))
    (finding,) = [f for f in report.findings if f.kind == "cpu-only-graph"]
    assert finding.graph == 0
    assert report.xla_graphs[0].xla_graphs == 0
