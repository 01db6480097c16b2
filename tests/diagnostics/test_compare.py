"""``compare``: its figures against torch_xla's counters read independently in the test.

The independent reference counts launches with other instruments than ``compare`` (which
reads the ``ExecuteTime`` metric): the ``ExecuteComputation`` counter for graphs run by
lazy tracing plus the ``RunCachedGraphOutputData`` metric for graphs the Dynamo bridge
runs, read by the test around its own runs of the same step. Expected fallback counts come
from the step's source (one ``torch.exp2`` call per step). ``compare`` and a report collected
with ``diagnose()`` over the same step agree on executions and breaks.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import torch

from xlabridge.diagnostics import diagnose
from xlabridge.diagnostics._compare import Comparison, compare

STEPS, WARMUP = 3, 2


def _exp2_in_the_middle(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (torch.exp2(torch.tanh(x @ w)) * 2).sum()


def _no_fallback(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (torch.pow(2.0, torch.tanh(x @ w)) * 2).sum()


def _print_break(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = torch.tanh(x @ w)
    print(end="")  # a Dynamo graph break that prints nothing
    return (y * 2).sum()


def _settle() -> None:
    import torch_xla
    import torch_xla.core.xla_model as xm

    torch_xla.sync()
    xm.wait_device_ops()


def _executions() -> int:
    """XLA graph launches: lazy tracing's (a counter) plus the Dynamo bridge's (a metric)."""
    import torch_xla.debug.metrics as met

    bridge = met.metric_data("RunCachedGraphOutputData")
    return (met.counter_value("ExecuteComputation") or 0) + (int(bridge[0]) if bridge else 0)


def _independent_graphs_per_step(fn: Callable[..., Any], *args: Any) -> float:
    """Warm ``fn`` up, then count XLA graph executions per synced step with the counter."""
    for _ in range(WARMUP):
        out = fn(*args)
        _settle()
        del out
    before = _executions()
    for _ in range(STEPS):
        out = fn(*args)
        _settle()
        del out
    return (_executions() - before) / STEPS


@pytest.fixture
def inputs(xla_device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x, w = torch.randn(8, 8, device=xla_device), torch.randn(8, 8, device=xla_device)
    _settle()
    return x, w


def _run(step: Callable[..., Any], inputs: tuple[torch.Tensor, ...]) -> Comparison:
    import torch_xla.debug.metrics as met

    before = (met.metric_data("ExecuteTime") or (0,))[0]
    result = compare(step, *inputs, steps=STEPS, warmup=WARMUP)
    _settle()
    total = (met.metric_data("ExecuteTime") or (0,))[0] - before
    modes = (result.lazy, result.compiled)
    assert total == sum(m.executions_warmup + m.executions_steady for m in modes)
    return result


@pytest.mark.parametrize("step", [_exp2_in_the_middle, _no_fallback, _print_break])
def test_graph_counts_match_an_independent_count(step: Callable[..., Any], inputs) -> None:
    result = _run(step, inputs)
    assert result.lazy.xla_graphs_per_step == _independent_graphs_per_step(step, *inputs)
    compiled = torch.compile(step, backend="openxla")
    assert result.compiled.xla_graphs_per_step == _independent_graphs_per_step(compiled, *inputs)
    assert result.compiled.compilations_steady == 0
    assert result.dynamo.fx_graphs_compiled_steady == 0
    assert Comparison.from_dict(json.loads(json.dumps(result.to_dict()))).to_dict() == result.to_dict()
    text = str(result)
    assert result.verdict in text
    share = result.attribution
    assert share.dynamo + share.hlo + share.outside == pytest.approx(share.gap)


def test_exp2_falls_back_in_both_modes_and_cuts_both(inputs) -> None:
    result = _run(_exp2_in_the_middle, inputs)
    assert result.lazy.fallback_ops_per_step == {"aten::exp2": 1.0}
    assert result.compiled.fallback_ops_per_step == {"aten::exp2": 1.0}
    # exp2 needs tanh(x @ w) on the host: lazy tracing runs it as a graph of its own, and
    # the bridge cuts the one FX graph into an XLA graph before the op and one after it.
    assert result.lazy.xla_graphs_per_step - result.lazy.graphs_at_sync_per_step == 1
    assert result.dynamo.fx_graph_calls_per_step == 1
    assert result.dynamo.xla_graphs_in_fx_per_step == 2
    assert result.compiled.transfers_per_step == 2
    assert result.compiled.xla_graphs_per_step == result.lazy.xla_graphs_per_step == 2
    assert "no graph gap; the CPU fallbacks (aten::exp2) cut lazy tracing as well" in result.verdict


def test_no_fallback_runs_the_same_graphs_compiled_and_lazily(inputs) -> None:
    result = _run(_no_fallback, inputs)
    assert result.lazy.fallback_ops_per_step == {}
    assert result.compiled.fallback_ops_per_step == {}
    assert result.compiled.xla_graphs_per_step == result.lazy.xla_graphs_per_step
    assert result.dynamo.fx_graph_calls_per_step == 1
    assert result.dynamo.graph_breaks == []
    assert "no graph gap" in result.verdict


def test_dynamo_break_is_named_as_the_cause(inputs) -> None:
    result = _run(_print_break, inputs)
    assert result.dynamo.fx_graph_calls_per_step == 2
    assert len(result.dynamo.graph_breaks) == 1
    assert result.compiled.xla_graphs_per_step > result.lazy.xla_graphs_per_step
    assert "Dynamo graph breaks" in result.verdict
    assert "HLO lowering breaks" not in result.verdict


def test_compare_and_a_report_agree_on_executions_and_breaks(inputs) -> None:
    result = _run(_print_break, inputs)
    torch._dynamo.reset()
    compiled = torch.compile(_print_break, backend="openxla")
    with diagnose() as report:
        for _ in range(WARMUP + STEPS):
            out = compiled(*inputs)
            _settle()
            del out
    per_step = sum(g.executions_per_call * g.calls for g in report.xla_graphs) / (WARMUP + STEPS)
    assert per_step == result.dynamo.xla_graphs_in_fx_per_step == result.compiled.xla_graphs_per_step == 2
    assert [b.reason for b in report.dynamo_breaks] == result.dynamo.graph_breaks
    assert len(result.dynamo.graph_breaks) == 1
    assert result.report.graph_count == report.graph_count == 2


@pytest.mark.parametrize(("name", "value"), [("steps", 0), ("steps", -1), ("warmup", -1), ("steps", 1.5)])
def test_bad_counts_are_refused_by_name(name: str, value: Any) -> None:
    with pytest.raises(ValueError, match=name):
        compare(_no_fallback, steps=value if name == "steps" else 1, warmup=value if name == "warmup" else 0)
