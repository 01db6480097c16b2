"""The CUDA MXFP4 decode kernel (``xlabridge/mx/_cuda``): its source compiled by NVRTC for Hopper in
every environment (a compiler, no GPU needed); on a Hopper GPU, every candidate the tuning times
against the float64 product of the NumPy model of the OCP MX spec, with the scale bytes at their
extremes, expert ids and both bias dtypes; and the operands it refuses, with why.
"""

from __future__ import annotations

import pytest
import torch

from tests.mx._cases import assert_within_bf16_of, mxfp4_extreme_scales
from tests.mx._reference import dequantize_fp4_reference
from xlabridge.mx._cuda import _runtime, fp4_decode
from xlabridge.mx._triton import fp4_matmul


def _nvrtc_or_skip() -> None:
    try:
        _runtime.nvrtc()
    except _runtime.CudaError as error:
        pytest.skip(str(error))


HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)
requires_hopper = pytest.mark.skipif(not HOPPER, reason="needs a CUDA GPU of compute capability 9.0 or newer (the device machine)")
CANDIDATES = [(key, config.decode) for key, configs in fp4_matmul.DECODE.items() for config in configs]


# ---------------------------------------------------------------- any machine


@pytest.mark.parametrize("config, nt, bias, ids", [
    (fp4_decode.Config(1, 1, 8, 1), 1, 0, False),  # registers, one span a step
    (fp4_decode.Config(2, 1, 16, 1, True), 2, 1, True),  # registers, the next step's loads first
    (fp4_decode.Config(2, 1, 8, 2, min_blocks=2), 4, 2, False),  # two spans a step, budgeted registers
    (fp4_decode.Config(2, 1, 8, 1, stages=3, x_async=True), 2, 2, True),  # the ring, x through it
    (fp4_decode.Config(1, 1, 8, 1, stages=3, x_paired=True), 8, 1, False),  # the ring, x paired by the host
], ids=["registers", "double", "two-spans", "ring-x", "ring-paired"])
def test_each_code_path_compiles_for_hopper_with_nvrtc(config, nt, bias, ids):
    """The source, with each way of keeping loads in flight, is valid CUDA for ``sm_90`` to the NVRTC
    this environment's torch brings: a GPU binary (ELF) whose symbol is the kernel's name."""
    _nvrtc_or_skip()
    name = fp4_decode._name(config, nt, bias, ids)
    binary = _runtime.compile_cubin(fp4_decode.SOURCE.read_text(), name, "90", fp4_decode._options(config, nt, bias, ids, name))
    assert binary[:4] == b"\x7fELF" and name.encode() in binary


def test_a_compile_error_names_the_program_and_quotes_nvrtc_s_log():
    _nvrtc_or_skip()
    with pytest.raises(_runtime.CudaError, match=r"could not compile broken:\n.*undefined"):
        _runtime.compile_cubin('extern "C" __global__ void k() { undefined_name(); }', "broken", "90", [])


@pytest.mark.parametrize("kwargs, message", [
    ({"rt": 0}, "rt must be a positive int"),
    ({"stages": 1}, "stages must be 0"),
    ({"x_async": True}, "x_async needs stages"),
    ({"wn": 8, "wk": 8}, "at most 1024"),
])
def test_bad_configurations_say_which_field_and_what_was_expected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        fp4_decode.Config(**kwargs)


def test_every_candidate_fits_a_hopper_sm_at_its_token_tiles():
    for key, config in CANDIDATES:
        assert config.fits(key), (key, config)


def test_operands_off_a_hopper_gpu_are_refused_with_why():
    x = torch.zeros(1, 4, 64, dtype=torch.bfloat16)
    data, scale = torch.zeros(1, 16, 32, dtype=torch.uint8), torch.zeros(1, 16, 2, dtype=torch.uint8)
    assert "float32" in fp4_decode.refusal(x.float(), data, scale, None, None)
    if not HOPPER:
        assert "not a CUDA GPU of compute capability 9.0" in fp4_decode.refusal(x, data, scale, None, None)


# ---------------------------------------------------------------- on a Hopper GPU


def _operands(rows: int, seed: int):
    """``mxfp4_extreme_scales`` for three experts' weights of 200 rows (not a multiple of 16), scale
    bytes around 2**-4, and 129 and 130 planted too (past the one-multiplication decode); experts 1
    and 0 chosen for x's two groups of rows."""
    g = torch.Generator().manual_seed(seed)
    planted = ((0, slice(40, 48), 7, 129), (1, slice(40, 48), 60, 130))
    return (*mxfp4_extreme_scales(g, 200, rows, 118, 128, planted), torch.tensor([1, 0], dtype=torch.int32))


def _exact(x, data, scale, ids, bias):
    w = torch.from_numpy(dequantize_fp4_reference(data.numpy(), scale.numpy(), 32))[ids.long()]
    out = x.double() @ w.transpose(-1, -2)
    return out if bias is None else out + bias.double()[ids.long()][:, None, :]


@requires_hopper
@pytest.mark.parametrize("key, config", CANDIDATES, ids=[f"{k}-{fp4_decode._name(c, k, 0, False)}" for k, c in CANDIDATES])
def test_each_candidate_against_the_spec_with_extreme_scales(key, config):
    """Every configuration the tuning may choose, at the most rows of its token tiles less three
    (a partial tile), with expert ids and a bias (bf16 for odd keys, float32 for even)."""
    rows = 8 * key - 3
    x, data, scale, ids = _operands(rows, 400 + key)
    bias = torch.randn(3, 200, generator=torch.Generator().manual_seed(key)).to(torch.bfloat16 if key % 2 else torch.float32)
    y = torch.empty(2, rows, 200, dtype=torch.bfloat16, device="cuda")
    assert fp4_decode.refusal(x.cuda(), data.cuda(), scale.cuda(), ids.cuda(), bias.cuda()) is None
    fp4_decode.launch(config, x.cuda(), data.cuda(), scale.cuda(), ids.cuda(), bias.cuda(), y)
    assert_within_bf16_of(y.cpu(), _exact(x, data, scale, ids, bias))


@requires_hopper
def test_one_token_without_ids_or_bias_matches_and_writes_only_its_row():
    x, data, scale, _ = _operands(1, 7)
    y = torch.full((1, 1, 200), 7.0, dtype=torch.bfloat16, device="cuda")
    config = fp4_matmul.DECODE[1][0].decode
    fp4_decode.launch(config, x[:1].cuda(), data[:1].cuda(), scale[:1].cuda(), None, None, y)
    assert_within_bf16_of(y.cpu(), _exact(x[:1], data[:1], scale[:1], torch.tensor([0]), None))


@requires_hopper
def test_the_product_times_the_decode_kernel_and_falls_back_for_what_it_refuses():
    """``mxfp4_linear`` at 4 tokens: the tuning timed the decode kernel's candidates beside the
    Triton kernel's (each timed or left out with why); an operand the kernel refuses (``x`` a view
    off 16-byte alignment) still gets the right result, from the Triton kernel."""
    from xlabridge import mx

    g = torch.Generator().manual_seed(9)
    weight = mx.to_mxfp4(torch.randn(1024, 2048, generator=g).cuda())
    x = torch.randn(4, 2048, generator=g).bfloat16().cuda()
    exact = x.double() @ weight.dequantize(torch.float32).double().t()
    bound = torch.finfo(torch.bfloat16).eps * exact.abs() + 2**-16 * exact.abs().amax()
    assert bool(((mx.mxfp4_linear(x, weight).double() - exact).abs() <= bound).all())
    key = next(k for k in fp4_matmul.TUNING if k[1:3] == (1024, 2048) and k[8] == 1)
    decode_rows = [row for row in fp4_matmul.TUNING[key] if row["mode"] == "cuda"]
    assert len(decode_rows) == len(fp4_matmul.DECODE[1]) and all("ms" in row for row in decode_rows), decode_rows
    shifted = torch.empty(4 * 2048 + 1, dtype=torch.bfloat16, device="cuda")[1:].view(4, 2048)
    shifted.copy_(x)
    assert fp4_decode.refusal(shifted[None], weight.data[None], weight.scale[None], None, None) is not None
    assert bool(((mx.mxfp4_linear(shifted, weight).double() - exact).abs() <= bound).all())


@requires_hopper
def test_under_a_cuda_graph_the_launch_is_captured_and_replayed():
    x, data, scale, ids = _operands(5, 11)
    x, data, scale, ids = x.cuda(), data.cuda(), scale.cuda(), ids.cuda()
    config = fp4_matmul.DECODE[1][0].decode
    y = torch.zeros(2, 5, 200, dtype=torch.bfloat16, device="cuda")
    fp4_decode.launch(config, x, data, scale, ids, None, y)  # loaded before the capture
    graph = torch.cuda.CUDAGraph()
    y.zero_()
    with torch.cuda.graph(graph):
        fp4_decode.launch(config, x, data, scale, ids, None, y)
    assert bool((y == 0).all())  # captured, not run
    graph.replay()
    torch.cuda.synchronize()
    assert_within_bf16_of(y.cpu(), _exact(x.cpu(), data.cpu(), scale.cpu(), ids.cpu(), None))


def test_paired_x_puts_each_element_where_the_kernel_s_loads_take_it():
    """``paired_x`` against the layout worked out element by element: K (200) padded to two spans
    with zeros; element ``128 s + 32 t + 8 q + e`` of a row lands at ``128 s + 32 q + 8 t + p``, where
    ``p`` is the MMA's pair order ``e`` = 0, 4, 1, 5, 2, 6, 3, 7."""
    x = torch.randn(2, 3, 200).bfloat16()
    got = fp4_decode.paired_x(x)
    assert got.shape == (2, 3, 256)
    expected = torch.zeros(2, 3, 256, dtype=torch.bfloat16)
    order = (0, 4, 1, 5, 2, 6, 3, 7)
    for k in range(200):
        s, t, q, e = k // 128, k % 128 // 32, k % 32 // 8, k % 8
        expected[:, :, 128 * s + 32 * q + 8 * t + order.index(e)] = x[:, :, k]
    assert torch.equal(got, expected)
