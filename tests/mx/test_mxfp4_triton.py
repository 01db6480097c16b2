"""The MXFP4 Triton kernels: on a CUDA GPU, one launch each and the fused matmul's tuning; without
one, the same kernels in Triton's CPU interpreter (``TRITON_INTERPRET=1``) on small shapes, bit for
bit against the NumPy spec model.

The interpreter computes bfloat16 through its own conversions, which neither round to nearest even
nor keep subnormals, and multiplies bfloat16 matrices as their raw bits; so the interpreted
matmul runs with float16 activations (NumPy's own type), and the interpreted dequantization is
checked in float32. The bfloat16 paths are the GPU tests' (here and in ``test_mxfp4.py``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import requires_cuda
from tests.mx._cases import DTYPES, ROUNDINGS, assert_within_bf16_of, make_input, mxfp4_extreme_scales
from tests.mx._reference import dequantize_fp4_reference, mxfp4_reference
from xlabridge import _optional

pytestmark = pytest.mark.skipif(not _optional.is_available("triton"), reason="needs triton")
ON_GPU = torch.cuda.is_available()
requires_interpreter = pytest.mark.skipif(ON_GPU, reason="the interpreter runs where no GPU is (the GPU runs the kernels)")
DEVICE = "cuda" if ON_GPU else "cpu"


@pytest.fixture(scope="module", autouse=True)
def _interpreter():
    """Without a GPU: the interpreter, which ``tests/mx/conftest.py`` turns on before Triton is imported.
    Triton 3.5's interpreter turns loop bounds into ints with ``int(array)``, which NumPy 2.4 refuses
    for its one-element arrays; that conversion is patched for these tests."""
    if ON_GPU:
        yield
        return
    import triton.language as tl
    import triton.runtime.interpreter as interpreter
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(tl.zeros, InterpretedFunction):
        pytest.skip("Triton was imported before tests/mx/conftest.py set TRITON_INTERPRET=1: run tests/mx on its own")
    previous = interpreter._patch_lang_tensor

    def patch(tensor):
        previous(tensor)
        tensor.__index__ = lambda self: int(self.handle.data.reshape(-1)[0])

    interpreter._patch_lang_tensor = patch
    yield
    interpreter._patch_lang_tensor = previous


def _exact(data, scale, x, rounding):
    data_ref, scale_ref = mxfp4_reference(x.double().cpu().numpy(), 32, rounding)
    assert (scale.cpu().numpy() == scale_ref).all(), int((scale.cpu().numpy() != scale_ref).sum())
    assert (data.cpu().numpy() == data_ref).all(), int((data.cpu().numpy() != data_ref).sum())


@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cast_kernel_is_bit_exact(dtype, rounding):
    """The kernel itself (not through the dispatch), a strided view included."""
    from xlabridge.mx._triton import fp4

    x = make_input((16, 2 * 2880), dtype, seed=300, elem="e2m1").to(DEVICE)
    _exact(*fp4.to_mxfp4(x, 32, rounding), x, rounding)
    view = x[::2, 64:2944]  # rows 5760 elements apart: the non-contiguous index path
    _exact(*fp4.to_mxfp4(view, 32, rounding), view, rounding)


@pytest.mark.parametrize("config", [(64, 2, False), (16, 2, True)], ids=["thread-per-block", "four-threads-per-block"])
def test_bf16_cast_kernel_layouts_are_bit_exact(config):
    """Both layouts of the bfloat16 word kernel, a strided view included."""
    from xlabridge.mx._triton import fp4

    x = make_input((16, 2 * 2880), torch.bfloat16, seed=303, elem="e2m1").to(DEVICE)
    saved = fp4.BF16_CAST_CONFIG
    fp4.BF16_CAST_CONFIG = config
    try:
        for rounding in ROUNDINGS:
            _exact(*fp4.to_mxfp4(x, 32, rounding), x, rounding)
            view = x[::2, 64:2944]
            _exact(*fp4.to_mxfp4(view, 32, rounding), view, rounding)
    finally:
        fp4.BF16_CAST_CONFIG = saved


def test_dequantize_kernel_is_exact():
    from xlabridge.mx._triton import fp4

    x = make_input((8, 2880), torch.float32, seed=301, elem="e2m1")
    data, scale = mxfp4_reference(x.double().numpy(), 32, "floor")
    got = fp4.from_mxfp4(torch.from_numpy(data).to(DEVICE), torch.from_numpy(scale).to(DEVICE), 32, torch.float32)
    expected = dequantize_fp4_reference(data, scale, 32)
    got = got.cpu().double().numpy()
    assert (((got == expected) & (np.signbit(got) == np.signbit(expected))) | (np.isnan(got) & np.isnan(expected))).all()


@requires_interpreter
@pytest.mark.parametrize(("experts", "groups", "rows", "n", "k", "split", "ids", "bias", "permute"), [
    (1, 1, 3, 40, 96, 1, False, False, True),  # N and K not multiples of the tile: masked edges
    (1, 1, 3, 40, 96, 1, False, False, False),  # the same in memory order
    (4, 3, 5, 48, 256, 1, True, True, True),  # expert ids (one repeated), bias per expert
    (1, 1, 2, 32, 512, 2, False, True, True),  # split-K: partials, arrival counter, the last one adds
    (1, 1, 17, 16, 480, 2, False, False, True),  # 17 rows (two row tiles); a split of whole steps, then one ending in a partial step
])
def test_matmul_kernel_in_the_interpreter(experts, groups, rows, n, k, split, ids, bias, permute):
    """The fused kernel's "triton" mode, in the permuted K order the GPU runs and in memory order:
    equal to float64 dequantize-then-matmul within float16 rounding."""
    from xlabridge.mx import _eager
    from xlabridge.mx._triton import fp4_matmul

    g = torch.Generator().manual_seed(302)
    data = torch.randint(0, 256, (experts, n, k // 2), dtype=torch.uint8, generator=g)
    scale = torch.randint(118, 130, (experts, n, k // 32), dtype=torch.uint8, generator=g)
    x = torch.randn(groups, rows, k, generator=g).to(torch.float16)
    expert_ids = torch.tensor([experts - 1, 0, experts - 1][:groups], dtype=torch.int32) if ids else None
    b = torch.randn(experts, n, generator=g) if bias else None
    saved = fp4_matmul.split_k, fp4_matmul.PERMUTE
    fp4_matmul.split_k = lambda programs, k, bk, sms, per_sm: split
    fp4_matmul.PERMUTE = permute
    try:
        y = fp4_matmul.matmul(x, data, scale, expert_ids, b)
    finally:
        fp4_matmul.split_k, fp4_matmul.PERMUTE = saved
    w = _eager.from_mxfp4(data, scale, 32, torch.float64)
    if ids:
        w = w[expert_ids.long()]
    exact = x.double() @ w.transpose(-1, -2)
    if bias:
        exact = exact + (b[expert_ids.long()] if ids else b).double()[:, None, :]
    off = (y.double() - exact).abs()
    assert y.shape == (groups, rows, n) and y.dtype == torch.float16
    assert bool((off <= 2**-11 * exact.abs() + 2**-14 * exact.abs().max()).all()), off.max()


@requires_interpreter
@pytest.mark.parametrize("split", [1, 2])
def test_matmul_kernel_with_x_put_in_order_first_in_the_interpreter(split):
    """``x_in_order``: ``x`` permuted by its own launch (K = 352: two spans of 128 and a partial
    one, padded with zeros) and read as it is by the matmul: equal to float64
    dequantize-then-matmul within float16 rounding."""
    from xlabridge.mx import _eager
    from xlabridge.mx._triton import fp4_matmul

    g = torch.Generator().manual_seed(303)
    n, k = 24, 352
    data = torch.randint(0, 256, (1, n, k // 2), dtype=torch.uint8, generator=g)
    scale = torch.randint(118, 130, (1, n, k // 32), dtype=torch.uint8, generator=g)
    x = torch.randn(1, 3, k, generator=g).to(torch.float16)
    saved = fp4_matmul.split_k
    fp4_matmul.split_k = lambda programs, k, bk, sms, per_sm: split
    try:
        y = fp4_matmul._launch(fp4_matmul.Config("triton", 16, 128, 4, 1, 1, 0, True), x, data, scale, None, None,
                               torch.empty(1, 3, n, dtype=torch.float16))
    finally:
        fp4_matmul.split_k = saved
    exact = x.double() @ _eager.from_mxfp4(data, scale, 32, torch.float64).transpose(-1, -2)
    off = (y.double() - exact).abs()
    assert bool((off <= 2**-11 * exact.abs() + 2**-14 * exact.abs().max()).all()), off.max()


# ------------------------------------------------------------------ on the GPU


def _cuda_kernels(fn) -> list[str]:
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


@requires_cuda
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize(("dtype", "kernel"), [(torch.bfloat16, "mxfp4_cast_bf16_kernel"), (torch.float32, "mxfp4_cast_kernel")])
def test_cast_and_dequantize_are_one_launch_each(rounding, dtype, kernel):
    from xlabridge import mx

    x = make_input((512, 2880), dtype, seed=310, elem="e2m1").cuda()
    kernels = _cuda_kernels(lambda: mx.to_mxfp4(x, rounding=rounding))
    assert len(kernels) == 1 and kernel in kernels[0], kernels
    q = mx.to_mxfp4(x, rounding=rounding)
    kernels = _cuda_kernels(lambda: mx.from_mxfp4(q))
    assert len(kernels) == 1 and "mxfp4_dequantize_kernel" in kernels[0], kernels


@requires_cuda
def test_bf16_cast_kernel_at_every_scale():
    """The word kernel's PTX at every scale byte a finite block can have: blocks whose largest
    magnitude is 2**e for every e from -133 (the smallest bfloat16 subnormal) to 127, the other 31
    values drawn uniformly from the bfloat16 bit patterns below it (subnormals included, either
    sign), bit for bit against the spec model, both roundings."""
    from xlabridge.mx._triton import fp4

    g = torch.Generator().manual_seed(314)
    maxima = torch.tensor([2.0**e for e in range(-133, 128)], dtype=torch.float64).to(torch.bfloat16)
    top = maxima.view(torch.int16).long().repeat_interleave(64)[:, None]
    magnitude = (torch.rand(top.numel(), 31, generator=g, dtype=torch.float64) * (top + 1)).long()
    sign = torch.randint(0, 2, magnitude.shape, generator=g) << 15
    bits = torch.cat([top, magnitude | sign], dim=1).to(torch.int32).to(torch.int16)
    x = bits.view(torch.bfloat16).reshape(-1, 32 * 16).cuda()
    for rounding in ROUNDINGS:
        _exact(*fp4.to_mxfp4(x, 32, rounding), x, rounding)


@requires_cuda
def test_matmul_is_one_launch_after_tuning_and_every_mode_is_right():
    """The first call times the candidates (``TUNING``): each left out says why, each timed one agreed
    with the exact mode; afterwards a call is one launch of the kernel (or, where the timing chose
    them, the reordering of ``x`` and the kernel, the CUDA decode kernel, or the dequantization and
    PyTorch's matmul)."""
    from xlabridge import mx
    from xlabridge.mx._triton import fp4_matmul

    g = torch.Generator().manual_seed(311)
    weight = mx.to_mxfp4(torch.randn(5760, 2880, generator=g).cuda())
    x = torch.randn(4, 2880, generator=g).bfloat16().cuda()
    y = mx.mxfp4_linear(x, weight)
    key = next(k for k in fp4_matmul.TUNING if k[1:4] == (5760, 2880, 1))
    table = fp4_matmul.TUNING[key]
    assert len(table) == len(fp4_matmul._candidates(x)) and any("ms" in row for row in table)
    assert all(("ms" in row) != ("left_out" in row) for row in table)
    kernels = _cuda_kernels(lambda: mx.mxfp4_linear(x, weight))
    chosen = fp4_matmul._CHOSEN[key]
    if chosen.mode == "dequantize":  # the timing found dequantize-then-matmul faster here
        assert "mxfp4_dequantize_kernel" in kernels[0] and not any("mxfp4_matmul_kernel" in k for k in kernels), kernels
    elif chosen.mode == "cuda":  # the CUDA decode kernel (after x's copy in pairs, where its config asks for one)
        assert len(kernels) == 1 + chosen.decode.x_paired and "mxfp4_decode" in kernels[-1], kernels
    elif chosen.x_in_order:  # x put in the kernel's order by a launch of its own, then the matmul
        assert len(kernels) == 2 and "x_in_order_kernel" in kernels[0] and "mxfp4_matmul_kernel" in kernels[1], kernels
    else:
        assert len(kernels) == 1 and "mxfp4_matmul_kernel" in kernels[0], kernels
    exact = (x.double() @ weight.dequantize(torch.float32).double().t()).float()
    ulp = torch.finfo(torch.bfloat16).eps * exact.abs()
    assert bool(((y.float() - exact).abs() <= ulp + 2**-16 * exact.abs().amax()).all())


@requires_cuda
@pytest.mark.parametrize("mode", ["triton", "asm", "dequantize"])
@pytest.mark.parametrize("rows", [7, 29, 64])
def test_each_mode_on_extreme_scales(mode, rows):
    """Each dequantization mode (and the dequantize-then-matmul path) against float64 at each row
    tile (16, 32, 64, with the scale bytes prefetched 0, 1 and 2 steps ahead, ``x`` put in the
    kernel's order first at 7 and 64 rows), with a split K that
    ends in a partial step, expert ids and bias, and among ordinary scales the extreme ones: bytes
    0 (2**-127) and 1, 253 and 254 (over nibbles up to 1.5: finite in bfloat16), and 0xFF (NaN
    rows): within bfloat16 rounding of each output row's scale, NaN where the definition has NaN."""
    from xlabridge.mx import _eager
    from xlabridge.mx._triton import fp4_matmul

    g = torch.Generator().manual_seed(312)
    x, data, scale = mxfp4_extreme_scales(g, 256, rows, 120, 130)
    ids = torch.tensor([1, 0], dtype=torch.int32)
    bias = torch.randn(3, 256, generator=g)
    y = torch.empty(2, rows, 256, dtype=torch.bfloat16, device="cuda")
    config = fp4_matmul.Config(mode, 64, 256, 4, 2, 4, ahead={7: 0, 29: 1, 64: 2}[rows], x_in_order=rows != 29)
    fp4_matmul._launch(config, x.cuda(), data.cuda(), scale.cuda(), ids.cuda(), bias.cuda(), y)
    w = _eager.from_mxfp4(data, scale, 32, torch.float64)[ids.long()]
    assert_within_bf16_of(y, x.double() @ w.transpose(-1, -2) + bias.double()[ids.long()][:, None, :])


@requires_cuda
def test_cuda_under_torch_compile():
    from xlabridge import mx

    weight = mx.to_mxfp4(torch.randn(256, 512).cuda())

    @torch.compile(fullgraph=True)
    def f(t):
        q = mx.to_mxfp4(t * 2, rounding="rceil")
        return q.data, q.scale, mx.mxfp4_linear(t.bfloat16(), weight)

    x = make_input((64, 512), torch.float32, seed=313, special_fraction=0.0, elem="e2m1").cuda()
    data, scale, y = f(x)
    q = mx.to_mxfp4(x * 2, rounding="rceil")
    assert torch.equal(data, q.data) and torch.equal(scale, q.scale)
    assert torch.equal(y, mx.mxfp4_linear(x.bfloat16(), weight))
