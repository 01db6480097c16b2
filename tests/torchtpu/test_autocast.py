"""The autocast audit with TorchTPU's policy (AutocastPrivateUse1, registered by torch_tpu)."""

import pytest
import torch

from tests.torchtpu.conftest import REASON

pytest.importorskip("torch_tpu", reason=REASON)

from xlabridge.autocast import audit
from xlabridge.autocast._audit import (
    TORCHTPU_DIFFERS_FROM_CUDA,
    TORCHTPU_MISSING_VS_CUDA,
)
from xlabridge.autocast._ops import Policy

KEY = "AutocastPrivateUse1"


@pytest.fixture(scope="module")
def report():
    return audit()


def _kernels(key: str) -> set[str]:
    """Ops with a kernel of their own, not a fallthrough, for ``key``: what the dispatcher lists."""
    return {op for op in torch._C._dispatch_get_registrations_for_dispatch_key(key)
            if not torch._C._dispatch_kernel_for_dispatch_key_is_fallthrough(op, key)}


def test_torchtpu_column_is_its_registered_kernels(report):
    assert report.torch_tpu_version == "0.2.0" and "torchtpu" in report.columns
    cast = {row.op for row in report.rows if row.policies["torchtpu"] is not Policy.NONE}
    assert cast == _kernels(KEY) and len(cast) > 100
    for op in ("aten::mm", "aten::einsum"):  # every kernel is TorchTPU's own (none in torch alone)
        assert "csrc/eager/amp_policies.cc" in torch._C._dispatch_dump_table(op)


def test_torchtpu_policy_against_cuda(report):
    """Matmuls and einsum in lower precision as on CUDA; softmax, layer_norm, sums not kept in fp32."""
    for op in ("aten::mm", "aten::matmul", "aten::einsum", "aten::scaled_dot_product_attention"):
        assert report.row(op).policies["torchtpu"] is report.row(op).policies["cuda"] is Policy.LOWER_PRECISION
    for op in ("aten::softmax.int", "aten::log_softmax.int", "aten::layer_norm", "aten::sum"):
        row = report.row(op)
        assert row.policies["cuda"] is Policy.FP32 and row.policies["torchtpu"] is Policy.NONE
        assert TORCHTPU_MISSING_VS_CUDA in row.flags
    assert TORCHTPU_DIFFERS_FROM_CUDA in report.row("aten::binary_cross_entropy").flags  # CUDA bans, fp32 here
    summary = report.summary()
    assert summary["torchtpu_ops"] == len(_kernels(KEY))
    assert any(line.startswith("op ") and "torchtpu" in line for line in str(report).splitlines()) and report.to_dict()["torch_tpu"] == "0.2.0"
