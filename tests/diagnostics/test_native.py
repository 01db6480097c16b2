"""Without XLA (a CPU or CUDA machine), the report still holds the Dynamo side, through inductor."""

import pytest
import torch

import xlabridge.diagnostics as xd

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")),
]


def logs_then_scales(x):
    y = torch.relu(x) * 2
    print("logging inside the compiled function")  # BREAK
    return y.sum(dim=-1)


@pytest.mark.parametrize("device", DEVICES)
def test_native_graphs_report_dynamo_breaks_and_the_inductor_path(device):
    x = torch.randn(8, 16, device=device)
    expected = torch._dynamo.explain(logs_then_scales)(x)
    report = xd.explain(logs_then_scales)(x)
    assert (report.graph_count, report.break_count) == (expected.graph_count, len(expected.break_reasons))
    (only,) = report.dynamo_breaks
    assert only.category == "print-or-logging" and only.filename == __file__
    assert {g.path for g in report.dynamo_graphs} == {"inductor"}
    assert report.xla_graphs == [] and report.hlo_break_count == 0
