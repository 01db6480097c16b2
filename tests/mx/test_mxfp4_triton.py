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
from tests.mx._cases import DTYPES, ROUNDINGS, make_input
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


def test_dequantize_kernel_is_exact():
    from xlabridge.mx._triton import fp4

    x = make_input((8, 2880), torch.float32, seed=301, elem="e2m1")
    data, scale = mxfp4_reference(x.double().numpy(), 32, "floor")
    got = fp4.from_mxfp4(torch.from_numpy(data).to(DEVICE), torch.from_numpy(scale).to(DEVICE), 32, torch.float32)
    expected = dequantize_fp4_reference(data, scale, 32)
    got = got.cpu().double().numpy()
    assert (((got == expected) & (np.signbit(got) == np.signbit(expected))) | (np.isnan(got) & np.isnan(expected))).all()


@requires_interpreter
@pytest.mark.parametrize(("experts", "groups", "rows", "n", "k", "split", "ids", "bias"), [
    (1, 1, 3, 40, 96, 1, False, False),  # N and K not multiples of the tile: masked edges
    (4, 3, 5, 48, 256, 1, True, True),  # expert ids (one repeated), bias per expert
    (1, 1, 2, 32, 512, 2, False, True),  # split-K: partials, arrival counter, the last one adds
    (1, 1, 17, 16, 480, 4, False, False),  # 17 rows (one 16-row tile and a partial one); uneven split
])
def test_matmul_kernel_in_the_interpreter(experts, groups, rows, n, k, split, ids, bias):
    """The fused kernel's "triton" mode: equal to float64 dequantize-then-matmul within float16 rounding."""
    from xlabridge.mx import _eager
    from xlabridge.mx._triton import fp4_matmul

    g = torch.Generator().manual_seed(302)
    data = torch.randint(0, 256, (experts, n, k // 2), dtype=torch.uint8, generator=g)
    scale = torch.randint(118, 130, (experts, n, k // 32), dtype=torch.uint8, generator=g)
    x = torch.randn(groups, rows, k, generator=g).to(torch.float16)
    expert_ids = torch.tensor([experts - 1, 0, experts - 1][:groups], dtype=torch.int32) if ids else None
    b = torch.randn(experts, n, generator=g) if bias else None
    config = fp4_matmul.INTERPRET
    fp4_matmul.INTERPRET = fp4_matmul.Config("triton", 16, 32 if split > 1 else 64, 4, 1)
    split_k = fp4_matmul.split_k
    fp4_matmul.split_k = lambda programs, k, bk, sms: split
    try:
        y = fp4_matmul.matmul(x, data, scale, expert_ids, b)
    finally:
        fp4_matmul.INTERPRET, fp4_matmul.split_k = config, split_k
    w = _eager.from_mxfp4(data, scale, 32, torch.float64)
    if ids:
        w = w[expert_ids.long()]
    exact = x.double() @ w.transpose(-1, -2)
    if bias:
        exact = exact + (b[expert_ids.long()] if ids else b).double()[:, None, :]
    off = (y.double() - exact).abs()
    assert y.shape == (groups, rows, n) and y.dtype == torch.float16
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
def test_cast_and_dequantize_are_one_launch_each(rounding):
    from xlabridge import mx

    x = make_input((512, 2880), torch.bfloat16, seed=310, elem="e2m1").cuda()
    kernels = _cuda_kernels(lambda: mx.to_mxfp4(x, rounding=rounding))
    assert len(kernels) == 1 and "mxfp4_cast_kernel" in kernels[0], kernels
    q = mx.to_mxfp4(x, rounding=rounding)
    kernels = _cuda_kernels(lambda: mx.from_mxfp4(q))
    assert len(kernels) == 1 and "mxfp4_dequantize_kernel" in kernels[0], kernels


@requires_cuda
def test_matmul_is_one_launch_after_tuning_and_every_mode_is_right():
    """The first call times the candidates (``TUNING``): each left out says why, each timed one agreed
    with the exact mode; afterwards a call is one launch of the kernel."""
    from xlabridge import mx
    from xlabridge.mx._triton import fp4_matmul

    g = torch.Generator().manual_seed(311)
    weight = mx.to_mxfp4(torch.randn(5760, 2880, generator=g).cuda())
    x = torch.randn(4, 2880, generator=g).bfloat16().cuda()
    y = mx.mxfp4_linear(x, weight)
    key = next(k for k in fp4_matmul.TUNING if k[1:4] == (5760, 2880, 1))
    table = fp4_matmul.TUNING[key]
    assert len(table) == len(fp4_matmul.CONFIGS) and any("ms" in row for row in table)
    assert all(("ms" in row) != ("left_out" in row) for row in table)
    kernels = _cuda_kernels(lambda: mx.mxfp4_linear(x, weight))
    assert len(kernels) == 1 and "mxfp4_matmul_kernel" in kernels[0], kernels
    exact = (x.double() @ weight.dequantize(torch.float64).t()).float()
    ulp = torch.finfo(torch.bfloat16).eps * exact.abs()
    assert bool(((y.float() - exact).abs() <= ulp + 2**-16 * exact.abs().amax()).all())


@requires_cuda
@pytest.mark.parametrize("mode", ["triton", "ptx", "dot_scaled"])
def test_each_mode_on_extreme_scales(mode):
    """Each dequantization mode against float64, scale bytes 0 (2**-127) and 1 among ordinary ones,
    a split K, expert ids and bias: within bfloat16 rounding (the blocks of scale 2**-127 add too
    little to any output to matter at that tolerance, so ``dot_scaled``, whose emulation may take
    that scale as zero, is held to the same bound)."""
    from xlabridge.mx import _eager
    from xlabridge.mx._triton import fp4_matmul

    g = torch.Generator().manual_seed(312)
    data = torch.randint(0, 256, (3, 256, 1024), dtype=torch.uint8, generator=g).cuda()
    scale = torch.randint(120, 130, (3, 256, 64), dtype=torch.uint8, generator=g)
    scale[0, :8, 0], scale[1, :8, 1] = 0, 1
    scale = scale.cuda()
    x = torch.randn(2, 7, 2048, generator=g).bfloat16().cuda()
    ids = torch.tensor([1, 0], dtype=torch.int32, device="cuda")
    bias = torch.randn(3, 256, generator=g).cuda()
    y = torch.empty(2, 7, 256, dtype=torch.bfloat16, device="cuda")
    try:
        fp4_matmul._launch(fp4_matmul.Config(mode, 64, 256, 4, 3), x, data, scale, ids, bias, y)
    except Exception as error:  # noqa: BLE001 - a mode this Triton cannot build is left out by the tuner
        pytest.skip(f"{mode} does not build here: {type(error).__name__}: {str(error)[:200]}")
    w = _eager.from_mxfp4(data.cpu(), scale.cpu(), 32, torch.float64)[ids.long().cpu()]
    exact = (x.double().cpu() @ w.transpose(-1, -2) + bias.double().cpu()[ids.long().cpu()][:, None, :]).float()
    ulp = torch.finfo(torch.bfloat16).eps * exact.abs()
    assert bool(((y.float().cpu() - exact).abs() <= ulp + 2**-16 * exact.abs().amax()).all())


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
