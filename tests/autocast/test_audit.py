"""The audit against the dispatcher's registration lists and real autocast runs."""

from __future__ import annotations

import io
import json

import pytest
import torch

from tests.conftest import requires_xla
from xlabridge.autocast import audit
from xlabridge.autocast._cli import audit_command
from xlabridge.autocast._audit import DIFFERS_FROM_CUDA, MISSING_VS_CUDA
from xlabridge.autocast._ops import Policy


def _registered(key: str) -> set[str]:
    return set(torch._C._dispatch_get_registrations_for_dispatch_key(key))


@pytest.fixture(scope="module")
def report():
    return audit()


def test_rows_are_exactly_the_union_of_the_three_lists(report) -> None:
    expected = _registered("AutocastCUDA") | _registered("AutocastCPU") | _registered("AutocastXLA")
    assert {row.op for row in report.rows} == expected


def test_ops_cast_per_backend_are_the_registered_ones(report) -> None:
    for column, key in (("cuda", "AutocastCUDA"), ("cpu", "AutocastCPU"), ("xla", "AutocastXLA")):
        cast = {row.op for row in report.rows if row.policies[column] is not Policy.NONE}
        assert cast == _registered(key), column


def test_known_gaps_are_flagged(report) -> None:
    assert MISSING_VS_CUDA in report.row("aten::scaled_dot_product_attention").flags
    assert report.row("aten::log").policies["cuda"] is Policy.FP32
    assert report.row("aten::binary_cross_entropy").policies["cuda"] is Policy.BANNED


@requires_xla
def test_xla_column_matches_running_ops_on_xla(report, xla_device) -> None:
    """Real autocast on the XLA device is the independent reference for the XLA column."""
    a = torch.randn(4, 4).to(xla_device)
    with torch.autocast("xla", dtype=torch.bfloat16):
        assert (a @ a).dtype == torch.bfloat16
        assert torch.log_softmax(a.bfloat16(), 1).dtype == torch.float32
        assert torch.cat([a, a.bfloat16()]).dtype == torch.float32
        assert torch.cat([a.bfloat16(), a.bfloat16()]).dtype == torch.bfloat16
    assert report.row("aten::mm").policies["xla"] is Policy.LOWER_PRECISION
    assert report.row("aten::mm").flags == ()
    assert report.row("aten::log_softmax.int").policies["xla"] is Policy.FP32
    assert report.row("aten::cat").policies["xla"] is Policy.PROMOTE
    assert report.torch_xla_version


@requires_xla
def test_parity_closes_the_gaps_it_registers(report) -> None:
    from xlabridge.autocast import disable_parity, enable_parity

    before = report.summary()
    result = enable_parity()
    try:
        after_report = audit()
    finally:
        disable_parity()
    after = after_report.summary()
    registered_gaps = [op for op in result.registered if MISSING_VS_CUDA in report.row(op).flags]
    assert after[MISSING_VS_CUDA] == before[MISSING_VS_CUDA] - len(registered_gaps)
    assert after["xla_ops"] == before["xla_ops"] + len(result.registered)
    assert after["xla_registered_by_xlabridge"] == len(result.registered)
    for op in result.registered:
        row = after_report.row(op)
        assert row.xla_by_xlabridge
        assert row.policies["xla"] is row.policies["cuda"]
        assert DIFFERS_FROM_CUDA not in row.flags
    assert audit().summary() == before


def test_renderings(report) -> None:
    data = json.loads(report.to_json())
    assert data["summary"] == report.summary()
    assert len(data["ops"]) == len(report.rows)
    text = str(report)
    assert text.startswith("autocast audit: torch ")
    assert "aten::scaled_dot_product_attention" in text
    out = io.StringIO()
    assert audit_command(as_json=True, stream=out) == 0
    assert json.loads(out.getvalue())["summary"] == report.summary()


def test_bad_argument_is_named() -> None:
    with pytest.raises(TypeError, match="'load_torch_xla' must be a bool"):
        audit(load_torch_xla="yes")
