"""The TPU findings in a report of a ``backend="openxla"`` run: an f32 language-model head with GPT-2's
vocabulary (50257), a hidden size of 200 and a batch of 6, each of which XLA:TPU's tiles pad, next to
the same head fixed (50304, 256, a batch of 8, autocast to bf16), which has none of them.

What each finding says of its program is checked against libtpu's compiled HLO in
``tests/tpu/test_findings.py``; here, that the report carries them under their own heading, below
what was measured, at the user's line, with what compiled them, in the text, JSON, HTML and
Perfetto views.
"""

from __future__ import annotations

import inspect
import json

import pytest
import torch

from tests.conftest import requires_xla
from tests.tpu.conftest import requires_tpu_compiler
from xlabridge.diagnostics import diagnose, render_text, write_html
from xlabridge.diagnostics.report import Report
from xlabridge.diagnostics.views import _trace

pytestmark = [requires_xla, requires_tpu_compiler]

TOPOLOGY = "v5e:2x2"
TPU_KINDS = {"tpu-padding", "tpu-f32-matmul", "tpu-copy", "tpu-hbm", "tpu-uncosted"}


def _head(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(hidden @ weight, dim=-1)


def _report(batch: int, width: int, vocab: int, autocast: bool) -> Report:
    import torch_xla

    device = torch_xla.device()
    torch._dynamo.reset()
    hidden, weight = torch.randn(batch, width).to(device), (torch.randn(width, vocab) / width).to(device)
    compiled = torch.compile(_head, backend="openxla")
    with diagnose(tpu=TOPOLOGY) as report, torch.no_grad():
        with torch.autocast("xla", dtype=torch.bfloat16, enabled=autocast):
            compiled(hidden, weight)
        torch_xla.sync()
    return report


@pytest.fixture(scope="module")
def reports():
    return _report(6, 200, 50257, False), _report(8, 256, 50304, True)


def test_the_padded_f32_head_has_its_findings_and_the_fixed_one_none(reports):
    padded, fixed = reports
    found = [f for f in padded.findings if f.kind in TPU_KINDS]
    sizes = {(f.message.split("a dimension of ")[1].split(" ")[0]) for f in found if f.kind == "tpu-padding"}
    assert {"50257", "200", "6"} <= sizes
    assert any(f.kind == "tpu-f32-matmul" for f in found)
    row_findings = [f for row in padded.tpu.graphs for f in row.findings]
    assert {f["detail"]["size"] for f in row_findings if f["kind"] == "tpu-padding"} >= {50257, 200, 6}
    assert not [f for f in fixed.findings if f.kind in ("tpu-padding", "tpu-f32-matmul")]
    line = inspect.getsourcelines(_head)[1] + 1
    for finding in found:
        assert "not run" in finding.compiled_for and "libtpu" in finding.compiled_for
        assert finding.cost_seconds is None
        assert finding.filename.endswith("test_tpu_findings.py") and finding.lineno == line
    costs = [f.cost_model_seconds for f in found if f.cost_model_seconds is not None]
    assert costs and costs == sorted(costs, reverse=True)


def test_tpu_findings_rank_below_the_measured_ones_under_their_own_heading(reports, tmp_path):
    report = reports[0]
    kinds = [f.kind in TPU_KINDS for f in report.findings if f.cost_seconds is not None or f.kind in TPU_KINDS]
    assert kinds == sorted(kinds)  # measured first, then the compiled
    text = render_text(report)
    assert "Fix first on TPU:" in text and "by the cost model" in text and "a dimension of 50257 pads to 50304" in text
    assert text.index("Fix first:") < text.index("Fix first on TPU:") < text.index("Time:")
    page = write_html(report, tmp_path / "report.html").read_text()
    assert 'id="tpu-summary"' in page and "cost model (not run)" in page
    trace = _trace.trace_events(report)["traceEvents"]
    (process,) = [e for e in trace if e["name"] == "process_name" and "TPU findings" in e["args"]["name"]]
    slices = [e for e in trace if e.get("pid") == process["pid"] and e["ph"] in ("X", "i")]
    assert {e["cat"] for e in slices} == {f.kind for f in report.findings if f.kind in TPU_KINDS}
    again = Report.from_dict(json.loads(report.to_json()))
    assert again.to_dict() == report.to_dict()
    assert [f.compiled_for for f in again.findings] == [f.compiled_for for f in report.findings]
