"""Graphs off XLA: the report holds the Dynamo side and the path each graph took. CUDA graphs and
graphs on a machine without torch_xla go to inductor; CPU graphs on a machine with torch_xla
compile as openxla would, and the report says their tensors are not on the XLA device."""

import pytest
import torch

import xlabridge.diagnostics as xd
from xlabridge import _optional

HAS_XLA = _optional.is_available("torch_xla")
DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")),
]

_TIMED = ("dynamo-break", "recompiles", "hlo-break")
"""Findings every report with breaks or recompiles has, ranked by their cost."""


def logs_then_scales(x):
    y = torch.relu(x) * 2
    print("logging inside the compiled function")  # BREAK
    return y.sum(dim=-1)


@pytest.mark.parametrize("device", DEVICES)
def test_native_graphs_report_dynamo_breaks_and_their_path(device):
    x = torch.randn(8, 16, device=device)
    expected = torch._dynamo.explain(logs_then_scales)(x)
    report = xd.explain(logs_then_scales)(x)
    assert (report.graph_count, report.break_count) == (expected.graph_count, len(expected.break_reasons))
    assert [g.op_count for g in report.dynamo_graphs] == [len(ops) for ops in expected.ops_per_graph]
    (only,) = report.dynamo_breaks
    assert only.category == "print-or-logging" and only.filename == __file__
    if device == "cpu" and HAS_XLA:
        assert {g.path for g in report.dynamo_graphs} == {"forward-only"}
        assert len(report.xla_graphs) == 2 and all(g.xla_graphs == 0 for g in report.xla_graphs)
        assert [f.kind for f in report.findings if f.kind not in _TIMED] == ["cpu-only-graph"] * 2
    else:
        assert {g.path for g in report.dynamo_graphs} == {"inductor"}
        assert report.xla_graphs == [] and report.hlo_break_count == 0
        assert [f for f in report.findings if f.kind not in _TIMED] == []
