"""MXFP8 cast on CPU and CUDA tensors, bit for bit against the NumPy model of the spec."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import requires_cuda
from tests.mx._cases import DTYPES, ROUNDINGS, make_input
from tests.mx._reference import dequantize_reference, mxfp8_reference
from xlabridge import mx

DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]


def assert_matches_reference(x: torch.Tensor, result: mx.MXTensor, block_size: int, rounding: str) -> None:
    data_ref, scale_ref = mxfp8_reference(x.double().cpu().numpy(), block_size, rounding)
    data = result.data.cpu().view(torch.uint8).numpy()
    scale = result.scale.cpu().numpy()
    assert result.data.dtype == torch.float8_e4m3fn and result.data.shape == x.shape
    assert result.scale.dtype == torch.uint8 and result.scale.shape == x.shape[:-1] + (x.shape[-1] // block_size,)
    bad = np.argwhere(scale != scale_ref)
    assert bad.size == 0, f"{len(bad)} scale bytes differ, first at {bad[0]}: {scale[tuple(bad[0])]} != {scale_ref[tuple(bad[0])]}"
    bad = np.argwhere(data != data_ref)
    assert bad.size == 0, f"{len(bad)} data bytes differ, first at {bad[0]}: {data[tuple(bad[0])]:#x} != {data_ref[tuple(bad[0])]:#x}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_seeded_sweep_is_bit_exact(device, dtype, rounding):
    for seed, shape in enumerate([(64, 256), (3, 5, 96), (1024,)]):
        x = make_input(shape, dtype, seed=seed).to(device)
        assert_matches_reference(x, mx.to_mxfp8(x, rounding=rounding), 32, rounding)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("block_size", [1, 4, 16, 64])
def test_other_block_sizes(device, block_size):
    x = make_input((8, 128), torch.bfloat16, seed=7, block_size=block_size).to(device)
    assert_matches_reference(x, mx.to_mxfp8(x, block_size=block_size), block_size, "floor")


@pytest.mark.parametrize("device", DEVICES)
def test_strided_rows_and_empty_inputs(device):
    base = make_input((16, 128), torch.float32, seed=3).to(device)
    x = base[::2, 32:96]  # rows 256 elements apart, 64 wide: a view, not contiguous
    assert_matches_reference(x, mx.to_mxfp8(x, rounding="rceil"), 32, "rceil")
    empty = mx.to_mxfp8(torch.empty(0, 64, device=device))
    assert empty.data.shape == (0, 64) and empty.scale.shape == (0, 2)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**32 - 1),
    dtype=st.sampled_from(DTYPES),
    rounding=st.sampled_from(ROUNDINGS),
    rows=st.integers(1, 6),
    blocks=st.integers(1, 6),
    special=st.floats(0.0, 1.0),
)
def test_property_cpu(seed, dtype, rounding, rows, blocks, special):
    x = make_input((rows, 32 * blocks), dtype, seed=seed, special_fraction=special)
    assert_matches_reference(x, mx.to_mxfp8(x, rounding=rounding), 32, rounding)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_dequantize_matches_reference(device, dtype):
    x = make_input((32, 128), torch.float32, seed=11).to(device)
    q = mx.to_mxfp8(x)
    expected = dequantize_reference(q.data.cpu().view(torch.uint8).numpy(), q.scale.cpu().numpy(), 32)
    got = mx.from_mxfp8(q, dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.cpu().double().numpy(), torch.from_numpy(expected).to(dtype).double().numpy())
    assert q.dequantize().dtype == torch.float32


def test_round_trip_error_is_within_e4m3_precision():
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(0))
    back = mx.from_mxfp8(mx.to_mxfp8(x, rounding="rceil"))
    # rceil never saturates and e4m3 keeps 3 mantissa bits: relative error at most 2**-4 for
    # values within a factor 4 of their block maximum (all normal e4m3 numbers)
    big = x.abs() > x.abs().reshape(64, 8, 32).amax(-1).repeat_interleave(32, -1) / 4
    assert ((back - x).abs()[big] <= x.abs()[big] * 2**-4).all()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"x": torch.zeros(4, 30)}, ValueError, "last dimension of x"),
        ({"x": torch.zeros(4, 32, dtype=torch.int32)}, TypeError, "x must have dtype"),
        ({"x": torch.zeros(4, 32), "block_size": 0}, ValueError, "block_size must be a positive"),
        ({"x": torch.zeros(4, 32), "block_size": 32.0}, TypeError, "block_size must be an int"),
        ({"x": torch.zeros(4, 32), "rounding": "ceil"}, ValueError, "rounding must be one of"),
        ({"x": torch.tensor(1.0)}, ValueError, "at least one dimension"),
        ({"x": [1.0] * 32}, TypeError, "x must be a torch.Tensor"),
    ],
)
def test_bad_input_is_rejected_clearly(kwargs, error, match):
    with pytest.raises(error, match=match):
        mx.to_mxfp8(**kwargs)


def test_bad_dequantize_input():
    with pytest.raises(TypeError, match="mx must be an MXTensor"):
        mx.from_mxfp8(torch.zeros(4))
    with pytest.raises(TypeError, match="dtype must be one of"):
        mx.from_mxfp8(mx.to_mxfp8(torch.zeros(1, 32)), torch.int8)


@requires_cuda
@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_cuda_is_one_kernel_launch_without_input_copies(rounding):
    x = make_input((512, 1024), torch.bfloat16, seed=5).cuda()
    mx.to_mxfp8(x, rounding=rounding)  # compile outside the profile
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        mx.to_mxfp8(x, rounding=rounding)
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert len(kernels) == 1 and "mxfp8_cast_kernel" in kernels[0], kernels


@requires_cuda
def test_cuda_under_torch_compile():
    x = make_input((128, 256), torch.bfloat16, seed=9).cuda()

    @torch.compile(fullgraph=True)
    def f(t):
        q = mx.to_mxfp8(t * 2, rounding="rceil")
        return q.data, q.scale

    data, scale = f(x)
    expected = mx.to_mxfp8(x * 2, rounding="rceil")
    assert torch.equal(data.view(torch.uint8), expected.data.view(torch.uint8))
    assert torch.equal(scale, expected.scale)


@pytest.mark.parametrize("device", DEVICES)
def test_rounding_modes_are_an_enum_that_their_names_still_select(device):
    x = make_input((4, 64), torch.float32, seed=11).to(device)
    for mode in mx.Rounding:
        by_enum, by_name = mx.to_mxfp8(x, rounding=mode), mx.to_mxfp8(x, rounding=mode.value)
        assert torch.equal(by_enum.scale, by_name.scale)
        assert torch.equal(by_enum.data.view(torch.uint8), by_name.data.view(torch.uint8))
        assert_matches_reference(x, by_enum, 32, mode.value)
    assert mx.ROUNDING_MODES == tuple(mode.value for mode in mx.Rounding) == ("floor", "rceil")
