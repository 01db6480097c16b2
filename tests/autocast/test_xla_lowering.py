"""Under ``torch.autocast("xla", bfloat16)`` on PJRT CPU: dtypes, HLO and numbers, per op.

References are independent of xlabridge: the HLO text torch_xla emits, fp32 runs of the same
op, and the dispatcher's state before ``enable_parity()``.
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.autocast._cases import FP32, LOWER, PROMOTE, UNREACHABLE_ON_XLA, make_inputs
from tests.conftest import requires_xla
from xlabridge.autocast import _probe
from xlabridge.autocast._ops import SPECS_BY_NAME, TPU_EXCEPTIONS, CastPolicy, Policy

pytestmark = requires_xla

# A dot or convolution whose two operands are both bf16: the MXU work autocast is for.
BF16_MATMUL = re.compile(r" (?:dot|convolution)\(bf16\[[^)]*, bf16\[")
AUTOCAST = dict(device_type="xla", dtype=torch.bfloat16)


def _flat(value) -> list[torch.Tensor]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def _hlo(tensors: list[torch.Tensor]) -> str:
    import torch_xla

    return torch_xla._XLAC._get_xla_tensors_hlo(tensors)


def _on(device, tensors, dtype=torch.float32) -> list[torch.Tensor]:
    return [t.to(dtype).to(device) for t in tensors]


@pytest.fixture(scope="module")
def parity():
    """enable_parity() for this module, recording first what autocast did without it."""
    import torch_xla

    from xlabridge.autocast import disable_parity, enable_parity

    device = torch_xla.device()
    before = {}
    for op, (call, specs) in LOWER.items():
        with torch.autocast(**AUTOCAST):
            before[op] = _flat(call(*_on(device, make_inputs(specs))))[0].dtype
    result = enable_parity()
    yield result, before
    disable_parity()


def test_einsum_is_bf16_by_default(xla_device) -> None:
    call, specs = LOWER["aten::einsum"]
    with torch.autocast(**AUTOCAST):
        out = call(*_on(xla_device, make_inputs(specs)))
    assert out.dtype == torch.bfloat16
    assert BF16_MATMUL.search(_hlo([out]))


def test_every_registered_op_has_a_test_case(parity) -> None:
    result, _ = parity
    assert result.registered, "torch_xla 2.9 lacks dozens of CUDA's ops; parity registered none"
    covered = set(LOWER) | set(FP32) | set(PROMOTE) | UNREACHABLE_ON_XLA
    assert sorted(set(result.registered) - covered) == []
    assert not set(result.registered) & set(TPU_EXCEPTIONS)


@pytest.mark.parametrize("op", sorted(set(LOWER) - {"aten::einsum"}))
def test_lower_precision_op_runs_in_bf16(op, parity, xla_device) -> None:
    result, before = parity
    if op not in result.registered:
        pytest.skip(f"{op} already had an AutocastXLA kernel (torch_xla's own)")
    if not torch._C._dispatch_has_kernel_for_dispatch_key(op, "CompositeImplicitAutograd"):
        # Composite ops may reach a bf16 kernel through their decomposition; others cannot.
        assert before[op] == torch.float32, "without parity the op should have stayed fp32"
    call, specs = LOWER[op]
    inputs = _on(xla_device, make_inputs(specs))
    with torch.autocast(**AUTOCAST):
        outs = _flat(call(*inputs))
    assert {o.dtype for o in outs} == {torch.bfloat16}
    assert BF16_MATMUL.search(_hlo(outs)), _hlo(outs)
    reference = _flat(call(*inputs))
    for out, ref in zip(outs, reference):
        torch.testing.assert_close(out.cpu().float(), ref.cpu(), rtol=4e-2, atol=4e-2)


@pytest.mark.parametrize("op", sorted(FP32))
def test_fp32_op_computes_in_f32(op, parity, xla_device) -> None:
    result, _ = parity
    if op not in result.registered:
        pytest.skip(f"{op} already had an AutocastXLA kernel (torch_xla's own)")
    call, specs = FP32[op]
    inputs = _on(xla_device, make_inputs(specs), torch.bfloat16)
    with torch.autocast(**AUTOCAST):
        out = call(*inputs)
    assert out.dtype == torch.float32
    reference = call(*[t.float() for t in inputs])  # same bf16 values, computed in f32
    torch.testing.assert_close(out.cpu(), reference.cpu(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", sorted(UNREACHABLE_ON_XLA))
def test_named_overloads_get_the_fp32_kernel(op, parity) -> None:
    result, _ = parity
    assert op in result.registered
    assert _probe.probe(op, "AutocastXLA").policy is Policy.FP32


@pytest.mark.parametrize("op", sorted(PROMOTE))
def test_promote_op_widens_mixed_inputs(op, parity, xla_device) -> None:
    result, _ = parity
    if op not in result.registered:
        pytest.skip(f"{op} already had an AutocastXLA kernel (torch_xla's own)")
    call, specs = PROMOTE[op]
    inputs = make_inputs(specs)
    mixed = _on(xla_device, inputs[:1]) + _on(xla_device, inputs[1:], torch.bfloat16)
    with torch.autocast(**AUTOCAST):
        out = call(*mixed)
        low = call(*_on(xla_device, inputs, torch.bfloat16))
    assert out.dtype == torch.float32
    assert low.dtype == torch.bfloat16
    reference = call(*[t.float() for t in mixed])
    torch.testing.assert_close(out.cpu(), reference.cpu(), rtol=1e-5, atol=1e-5)


GRAD_OPS = [
    "aten::einsum",
    "aten::mv",
    "aten::convolution",
    "aten::lstm_cell",
    "aten::linalg_multi_dot",
    "aten::layer_norm",
    "aten::logsumexp",
    "aten::cumsum",
    "aten::norm.ScalarOpt_dim",
    "aten::tensordot",
]


@pytest.mark.parametrize("op", GRAD_OPS)
def test_gradients_match_fp32_within_bf16_tolerance(op, parity, xla_device) -> None:
    call, specs = {**LOWER, **FP32, **PROMOTE}[op]
    base = make_inputs(specs)

    def grads(autocast: bool) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        leaves = [t.to(xla_device).requires_grad_() for t in base]
        with torch.autocast(**AUTOCAST, enabled=autocast):
            outs = _flat(call(*leaves))
        weights = [torch.linspace(-1, 1, o.numel()).view(o.shape).to(xla_device) for o in outs]
        loss = sum((o.float() * w).sum() for o, w in zip(outs, weights))
        return outs, list(torch.autograd.grad(loss, leaves))

    outs, got = grads(True)
    _, expected = grads(False)
    if SPECS_BY_NAME[op].cast is CastPolicy.lower_precision_fp:
        assert {o.dtype for o in outs} == {torch.bfloat16}
        assert BF16_MATMUL.search(_hlo(got)), "the backward matmuls should run in bf16 too"
    for g, e in zip(got, expected):
        assert g.dtype == torch.float32
        scale = max(1.0, e.abs().max().item())
        torch.testing.assert_close(g.cpu(), e.cpu(), rtol=5e-2, atol=5e-2 * scale)


def _exception_evidence(op: str, device) -> bool:
    """Whether the reason given in TPU_EXCEPTIONS[op] still holds for this torch_xla."""
    import torch_xla.debug.metrics as metrics

    bf = [t.to(torch.bfloat16).to(device) for t in make_inputs([((4, 3), "n"), ((4, 3), "n"), ((4,), "n"), ((3,), "n")])]
    if op == "aten::linalg_vecdot":
        hlo = _hlo([torch.linalg.vecdot(bf[0], bf[1])])
        return " dot(" not in hlo and "reduce(bf16[" in hlo and "bf16[] add(" in hlo
    if op == "aten::scaled_dot_product_attention":
        q = [t.to(torch.bfloat16).to(device) for t in make_inputs([((1, 2, 4, 8), "n")] * 3)]
        hlo = _hlo([torch.nn.functional.scaled_dot_product_attention(*q)])
        return " dot(f32[" in hlo and not BF16_MATMUL.search(hlo)
    if op == "aten::addmv":
        metrics.clear_all()
        torch.addmv(bf[2], bf[0], bf[3]).cpu()
        return "aten::addmv" in metrics.executed_fallback_ops()
    if op == "aten::addr":
        hlo = _hlo([torch.addr(bf[0], bf[2], bf[3])])
        return " dot(" not in hlo and "f32[4,3]{1,0} multiply(" in hlo
    raise KeyError(f"no evidence check for TPU exception {op}; add one here")


@pytest.mark.parametrize("op", sorted(TPU_EXCEPTIONS))
def test_tpu_exception_reason_still_holds_and_op_is_not_registered(op, parity, xla_device) -> None:
    assert _exception_evidence(op, xla_device), f"{op}: {TPU_EXCEPTIONS[op]} -- no longer true, revisit"
    assert not _probe.has_kernel(op, "AutocastXLA")
