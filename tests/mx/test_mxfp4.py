"""MXFP4 (``to_mxfp4``/``from_mxfp4``, the checkpoint layout, the MXFP4 linear) on CPU, CUDA and the
XLA device, bit for bit against the NumPy model of the spec (``tests/mx/_reference.py``) and
against transformers' own dequantization of gpt-oss checkpoints (``convert_moe_packed_tensors``).

XLA on CPU flushes float32 subnormals to zero, so the XLA device is compared with the model's
``ftz`` variant. Shapes include gpt-oss's hidden size (2880: 90 blocks, not a multiple of 128).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import requires_cuda, requires_xla
from tests.mx._cases import DTYPES, ROUNDINGS, make_input
from tests.mx._reference import (
    E2M1_TABLE,
    dequantize_fp4_reference,
    e2m1_codes,
    mxfp4_reference,
    pack_nibbles,
)
from xlabridge import _optional, mx

DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]
HIDDEN = 2880  # gpt-oss-20b's hidden and intermediate size
SHAPES = [(64, 256), (3, 5, 96), (4, HIDDEN), (1024,)]
requires_transformers = pytest.mark.skipif(
    not _optional.is_available("transformers"), reason="needs transformers (its convert_moe_packed_tensors)"
)


def assert_exact(q: mx.MXFP4Tensor, x: torch.Tensor, rounding: str, ftz: bool = False) -> None:
    data_ref, scale_ref = mxfp4_reference(x.double().cpu().numpy(), 32, rounding, ftz=ftz)
    data, scale = q.data.cpu().numpy(), q.scale.cpu().numpy()
    assert q.data.dtype == torch.uint8 and data.shape == data_ref.shape, (data.shape, data_ref.shape)
    assert q.scale.dtype == torch.uint8 and scale.shape == scale_ref.shape
    assert q.shape == x.shape
    bad = np.argwhere(scale != scale_ref)
    assert bad.size == 0, f"{len(bad)} scale bytes differ, first at {bad[0]}: {scale[tuple(bad[0])]} != {scale_ref[tuple(bad[0])]}"
    bad = np.argwhere(data != data_ref)
    assert bad.size == 0, f"{len(bad)} data bytes differ, first at {bad[0]}: {data[tuple(bad[0])]:#x} != {data_ref[tuple(bad[0])]:#x}"


def assert_values_equal(got: torch.Tensor, expected: np.ndarray) -> None:
    """Equal values, signed zeros included; NaN where NaN is expected."""
    got = got.cpu().double().numpy()
    same = (got == expected) & (np.signbit(got) == np.signbit(expected)) | (np.isnan(got) & np.isnan(expected))
    assert same.all(), f"{(~same).sum()} values differ, first at {np.argwhere(~same)[0]}"


# ------------------------------------------------------------------ the spec model itself


def test_reference_rounds_as_the_spec_says():
    """The model's E2M1 rounding on hand-picked values: the table, midpoints to the even code,
    saturation at 6, signed zeros."""
    assert list(E2M1_TABLE) == [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    values = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, 1e9, -0.0, -0.1, -5.1, 0.26])
    assert list(e2m1_codes(values)) == [0, 2, 2, 4, 4, 6, 6, 7, 7, 8, 8, 15, 1]
    assert list(pack_nibbles(np.array([[1, 2, 15, 8]], dtype=np.uint8))[0]) == [0x21, 0x8F]


# ------------------------------------------------------------------ cast and dequantize, bit for bit


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cast_is_bit_exact(device, dtype, rounding):
    """40% special blocks (zeros, NaN, Inf, subnormals, saturation, E2M1 ties, rceil boundaries)."""
    for seed, shape in enumerate(SHAPES):
        x = make_input(shape, dtype, seed=200 + seed, elem="e2m1").to(device)
        assert_exact(mx.to_mxfp4(x, rounding=rounding), x, rounding)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_dequantize_is_exact(device, dtype):
    x = make_input((16, HIDDEN), torch.float32, seed=210, elem="e2m1")
    data, scale = mxfp4_reference(x.double().numpy(), 32, "rceil")
    q = mx.MXFP4Tensor(torch.from_numpy(data).to(device), torch.from_numpy(scale).to(device), 32, torch.float32)
    got = mx.from_mxfp4(q, dtype)
    assert got.dtype == dtype and got.shape == (16, HIDDEN)
    assert_values_equal(got, torch.from_numpy(dequantize_fp4_reference(data, scale, 32)).to(dtype).double().numpy())
    assert q.dequantize().dtype == torch.float32


@settings(max_examples=40, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from(DTYPES), rounding=st.sampled_from(ROUNDINGS),
       rows=st.integers(1, 5), blocks=st.integers(1, 5), special=st.floats(0.0, 1.0))
def test_property_cpu(seed, dtype, rounding, rows, blocks, special):
    x = make_input((rows, 32 * blocks), dtype, seed=seed, special_fraction=special, elem="e2m1")
    assert_exact(mx.to_mxfp4(x, rounding=rounding), x, rounding)


def test_nan_blocks_have_scale_0xff_and_zero_data_and_dequantize_to_nan():
    x = torch.ones(2, 64)
    x[0, 3], x[1, 40] = float("nan"), float("-inf")
    q = mx.to_mxfp4(x)
    assert q.scale.tolist() == [[255, 127 - 2], [127 - 2, 255]]  # 1.0 has floor scale 2**-2
    assert (q.data[0, :16] == 0).all() and (q.data[1, 16:] == 0).all()
    back = mx.from_mxfp4(q)
    assert back[0, :32].isnan().all() and back[1, 32:].isnan().all() and (back[0, 32:] == 1).all()


def test_round_trip_error_is_within_e2m1_precision():
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(0))
    back = mx.from_mxfp4(mx.to_mxfp4(x, rounding="rceil"))
    # rceil never saturates and its scale is below amax / 3, so values above half their block's
    # maximum scale to at least 1.5, E2M1's normal range, where one mantissa bit leaves a relative
    # error of at most 2**-2
    big = x.abs() > x.abs().reshape(64, 8, 32).amax(-1).repeat_interleave(32, -1) / 2
    assert ((back - x).abs()[big] <= x.abs()[big] * 2**-2).all()


# ------------------------------------------------------------------ gpt-oss checkpoints and transformers


def _checkpoint(experts: int, rows: int, seed: int, extremes: bool = True):
    """``*_blocks``/``*_scales`` of a gpt-oss-shaped expert weight (``[E, rows, 90, 16]``, 90 blocks of
    the 2880 hidden size): random bytes, scales over the range checkpoints use (``extremes``: and the
    scale bytes 0, 1, 253 and 254)."""
    g = torch.Generator().manual_seed(seed)
    blocks = torch.randint(0, 256, (experts, rows, HIDDEN // 32, 16), dtype=torch.uint8, generator=g)
    scales = torch.randint(100, 140, (experts, rows, HIDDEN // 32), dtype=torch.uint8, generator=g)
    if extremes:
        scales[0, 0, :4] = torch.tensor([0, 1, 253, 254], dtype=torch.uint8)
    return blocks, scales


def test_checkpoint_layout_round_trips_without_copies():
    blocks, scales = _checkpoint(2, 8, seed=220)
    w = mx.MXFP4Tensor.from_checkpoint(blocks, scales)
    assert w.shape == (2, 8, HIDDEN) and w.block_size == 32
    assert w.data.data_ptr() == blocks.data_ptr()  # a view
    back_blocks, back_scales = w.to_checkpoint()
    assert torch.equal(back_blocks, blocks) and back_scales is scales


def test_checkpoint_dequantization_follows_the_spec_model():
    blocks, scales = _checkpoint(2, 8, seed=221)
    w = mx.MXFP4Tensor.from_checkpoint(blocks, scales)
    data = blocks.reshape(2, 8, HIDDEN // 2).numpy()
    expected = dequantize_fp4_reference(data, scales.numpy(), 32)
    assert_values_equal(mx.from_mxfp4(w, torch.float32), torch.from_numpy(expected).float().double().numpy())


@requires_transformers
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_dequantization_equals_transformers_bit_for_bit(device, dtype):
    """transformers' ``convert_moe_packed_tensors`` returns the transposed ``[E, 2880, rows]``; ours is
    ``[E, rows, 2880]``: transposed, 0 differing bytes (random bytes; scale bytes 0, 1, 253, 254 among them)."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    blocks, scales = _checkpoint(2, 32, seed=222)
    theirs = convert_moe_packed_tensors(blocks.to(device), scales.to(device), dtype=dtype)
    ours = mx.from_mxfp4(mx.MXFP4Tensor.from_checkpoint(blocks.to(device), scales.to(device)), dtype).transpose(1, 2)
    bits = torch.int16 if dtype == torch.bfloat16 else torch.int32
    differing = (theirs.contiguous().view(bits) != ours.contiguous().view(bits)).sum().item()
    assert theirs.shape == ours.shape and differing == 0, f"{differing} values differ"


@requires_transformers
@pytest.mark.parametrize("device", DEVICES)
def test_nan_blocks_against_transformers(device):
    """A block the cast marks NaN (scale 0xFF, zero data). transformers dequantizes it with
    ``torch.ldexp(0, 128)``: NaN where that runs on the CPU (``0 * 2**128``, float32's ``0 * inf``),
    0 where it runs on CUDA (whose ldexp keeps a zero zero), whichever device its output says it
    ran on. xlabridge's dequantization is NaN on every device (the guide's documented choice)."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    x = torch.ones(1, 2, 64)
    x[0, 0, 5] = float("nan")
    q = mx.to_mxfp4(x.to(device))
    assert q.scale[0, 0, 0].item() == 0xFF and not q.data[0, 0, :16].any()
    theirs = convert_moe_packed_tensors(*q.to_checkpoint(), dtype=torch.float32).transpose(1, 2)
    if theirs.device.type == "cpu":
        assert theirs[0, 0, :32].isnan().all()
    else:
        assert bool((theirs[0, 0, :32] == 0).all())
    assert bool((theirs[0, 0, 32:] == 1).all()) and bool((theirs[0, 1] == 1).all())
    ours = mx.from_mxfp4(q)
    assert ours[0, 0, :32].isnan().all() and bool((ours[0, 0, 32:] == 1).all())


# ------------------------------------------------------------------ the MXFP4 linear


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bias", [False, True])
def test_linear_is_dequantize_then_linear(device, bias):
    """The definition on CPU (bit for bit); the fused CUDA kernel within bfloat16's rounding of it."""
    g = torch.Generator().manual_seed(230)
    weight = mx.to_mxfp4(torch.randn(96, HIDDEN, generator=g).to(device))
    b = torch.randn(96, generator=g).to(device) if bias else None
    for tokens in (1, 5, 64):
        x = torch.randn(tokens, HIDDEN, generator=g).to(torch.bfloat16).to(device)
        got = mx.mxfp4_linear(x, weight, b)
        expected = torch.nn.functional.linear(x, weight.dequantize(torch.bfloat16), None if b is None else b.bfloat16())
        if device == "cpu":
            assert torch.equal(got, expected)
        else:
            exact = (x.double() @ weight.dequantize(torch.float32).double().t() + (0 if b is None else b.double())).float()
            assert_within_bf16_rounding(got, exact)


def assert_within_bf16_rounding(got: torch.Tensor, exact: torch.Tensor) -> None:
    """``got`` (bfloat16) is ``exact`` rounded to bfloat16, or a neighbour where float32 sums in another
    order land on the other side of a rounding boundary: at most one bfloat16 ulp off, plus float32
    accumulation error for outputs that cancel to near zero."""
    ulp = torch.finfo(torch.bfloat16).eps * exact.abs().clamp_min(torch.finfo(torch.bfloat16).tiny)
    off = (got.float() - exact).abs()
    assert bool((off <= ulp + 2**-16 * exact.abs().amax()).all()), f"max excess {(off - ulp).max().item()}"


@pytest.mark.parametrize("device", DEVICES)
def test_expert_linear_reads_the_chosen_experts(device):
    g = torch.Generator().manual_seed(231)
    blocks, scales = _checkpoint(4, 64, seed=232, extremes=False)
    weight = mx.MXFP4Tensor.from_checkpoint(blocks.to(device), scales.to(device))
    bias = torch.randn(4, 64, generator=g).to(device)
    x = torch.randn(3, 2, HIDDEN, generator=g).to(torch.bfloat16).to(device)
    ids = torch.tensor([3, 0, 3], dtype=torch.int32, device=device)
    got = mx.mxfp4_expert_linear(x, weight, ids, bias)
    w = weight.dequantize(torch.bfloat16)
    for a, e in enumerate(ids.tolist()):
        expected = torch.nn.functional.linear(x[a], w[e], bias[e].bfloat16())
        if device == "cpu":
            assert torch.equal(got[a], expected)
        else:
            exact = (x[a].double() @ w[e].double().t() + bias[e].double()).float()
            assert_within_bf16_rounding(got[a], exact)


def test_mxfp4_linear_module_from_linear():
    linear = torch.nn.Linear(HIDDEN, 64).bfloat16()
    layer = mx.MXFP4Linear.from_linear(linear, rounding="rceil")
    x = torch.randn(2, 3, HIDDEN, dtype=torch.bfloat16)
    expected = torch.nn.functional.linear(x, mx.to_mxfp4(linear.weight, rounding="rceil").dequantize(), linear.bias)
    assert torch.equal(layer(x), expected)
    assert "in_features=2880, out_features=64, bias=True" in repr(layer)


def test_torch_compile_keeps_the_ops_in_one_graph():
    weight = mx.to_mxfp4(torch.randn(64, 256))

    def f(t):
        q = mx.to_mxfp4(t * 2, rounding="rceil")
        return q.data, q.scale, mx.mxfp4_linear(t.bfloat16(), weight)

    x = torch.randn(8, 256)
    explained = torch._dynamo.explain(f)(x)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    got = torch.compile(f, fullgraph=True)(x)
    for a, b in zip(got, f(x)):
        assert torch.equal(a, b)


# ------------------------------------------------------------------ arguments


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: mx.to_mxfp4(torch.zeros(4, 30)), ValueError, "last dimension of x"),
        (lambda: mx.to_mxfp4(torch.zeros(4, 32), block_size=31), ValueError, "positive even number"),
        (lambda: mx.to_mxfp4(torch.zeros(4, 32, dtype=torch.int8)), TypeError, "x must have dtype"),
        (lambda: mx.to_mxfp4(torch.zeros(4, 32), rounding="up"), ValueError, "rounding must be one of"),
        (lambda: mx.from_mxfp4(torch.zeros(4)), TypeError, "mx must be an MXFP4Tensor"),
        (lambda: mx.from_mxfp4(mx.MXFP4Tensor(torch.zeros(2, 16, dtype=torch.uint8), torch.zeros(2, 2, dtype=torch.uint8))),
         ValueError, r"scale must have shape \(2, 1\)"),
        (lambda: mx.from_mxfp4(mx.MXFP4Tensor(torch.zeros(2, 16), torch.zeros(2, 1, dtype=torch.uint8))),
         TypeError, "data must be uint8"),
        (lambda: mx.MXFP4Tensor.from_checkpoint(torch.zeros(2, 3, 16, dtype=torch.uint8), torch.zeros(2, 4, dtype=torch.uint8)),
         ValueError, "scales must have blocks' shape"),
        (lambda: mx.mxfp4_linear(torch.zeros(2, 64), mx.to_mxfp4(torch.zeros(8, 32))), ValueError, "in_features"),
        (lambda: mx.mxfp4_linear(torch.zeros(2, 32), mx.to_mxfp4(torch.zeros(8, 32)), torch.zeros(7)),
         ValueError, r"bias must have shape \(8,\)"),
        (lambda: mx.mxfp4_expert_linear(torch.zeros(3, 1, 32), mx.to_mxfp4(torch.zeros(2, 8, 32))),
         ValueError, "one group per expert"),
        (lambda: mx.mxfp4_expert_linear(torch.zeros(2, 1, 32), mx.to_mxfp4(torch.zeros(2, 8, 32)), torch.tensor([0.0, 1.0])),
         ValueError, "expert_ids must be an int32/int64"),
    ],
)
def test_bad_arguments_are_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


# ------------------------------------------------------------------ the XLA device


@requires_xla
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_xla_cast_and_dequantize_are_bit_exact(xla_device, dtype, rounding):
    x = make_input((4, 3, HIDDEN), dtype, seed=240, elem="e2m1")
    q = mx.to_mxfp4(x.to(xla_device), rounding=rounding)
    assert q.data.device.type == "xla"
    assert_exact(q, x, rounding, ftz=True)
    data, scale = mxfp4_reference(x.double().numpy(), 32, rounding, ftz=True)
    expected = torch.from_numpy(dequantize_fp4_reference(data, scale, 32, ftz=True)).to(torch.bfloat16).double().numpy()
    assert_values_equal(mx.from_mxfp4(q, torch.bfloat16), expected)


@requires_xla
def test_xla_linear_and_torch_compile_openxla(xla_device):
    g = torch.Generator().manual_seed(241)
    weight = mx.to_mxfp4(torch.randn(64, 256, generator=g))
    x = torch.randn(4, 256, generator=g).bfloat16()
    expected = mx.mxfp4_linear(x, weight)
    on_xla = mx.MXFP4Tensor(weight.data.to(xla_device), weight.scale.to(xla_device))
    assert torch.equal(mx.mxfp4_linear(x.to(xla_device), on_xla).cpu(), expected)

    @torch.compile(backend="openxla", fullgraph=True)
    def cast(t):
        q = mx.to_mxfp4(t, rounding="rceil")
        return q.data, q.scale

    data, scale = cast(x.float().to(xla_device))
    reference = mx.to_mxfp4(x.float(), rounding="rceil")
    assert torch.equal(data.cpu(), reference.data) and torch.equal(scale.cpu(), reference.scale)
