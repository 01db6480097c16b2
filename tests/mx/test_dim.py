"""Casts along any dimension (``to_mxfp8(x, dim=...)``) and both layouts from one read
(``to_mxfp8_both``), bit for bit against the NumPy model of the spec applied to
``x.movedim(dim, -1)``: on the CPU (eager torch), on CUDA (the Triton kernels), on the XLA device
(the XLA computation), through JAX (formulation and Pallas kernel), and the Mosaic kernels in
interpret mode (XLA:CPU arithmetic, so the reference's ``ftz`` model).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import requires_cuda, requires_xla
from tests.mx._cases import DTYPES, ROUNDINGS, make_input
from tests.mx._reference import dequantize_reference, mxfp8_reference
from xlabridge import _optional, mx

DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]
requires_jax = pytest.mark.skipif(not _optional.is_available("jax"), reason="needs jax (pip install 'xlabridge[xla]')")
requires_libtpu = pytest.mark.skipif(
    not _optional.is_available("libtpu"), reason="needs libtpu for TPU compiles (pip install 'xlabridge[tpu-compile]')"
)


def _expected(x: torch.Tensor, dim: int, block_size: int, rounding: str, ftz: bool = False):
    return mxfp8_reference(x.movedim(dim, -1).double().cpu().numpy(), block_size, rounding, ftz=ftz)


def assert_exact(data, scale, expected) -> None:
    data_ref, scale_ref = expected
    data = np.asarray(data.cpu().view(torch.uint8).numpy() if isinstance(data, torch.Tensor) else np.asarray(data).view(np.uint8))
    scale = np.asarray(scale.cpu().numpy() if isinstance(scale, torch.Tensor) else scale)
    assert data.shape == data_ref.shape and scale.shape == scale_ref.shape, (data.shape, data_ref.shape, scale.shape)
    bad = np.argwhere(scale != scale_ref)
    assert bad.size == 0, f"{len(bad)} scale bytes differ, first at {bad[0]}: {scale[tuple(bad[0])]} != {scale_ref[tuple(bad[0])]}"
    bad = np.argwhere(data != data_ref)
    assert bad.size == 0, f"{len(bad)} data bytes differ, first at {bad[0]}: {data[tuple(bad[0])]:#x} != {data_ref[tuple(bad[0])]:#x}"


# hidden-size-like shapes (a few rows of a 2048 hidden size; a 4-D activation) and odd ones
SHAPES = [(64, 2048), (3, 96, 64), (2, 64, 3, 32)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dim_is_bit_exact(device, dtype, rounding):
    """Every dimension of each shape, 40% special blocks (NaN, Inf, subnormals, zeros, ties)."""
    for seed, shape in enumerate(SHAPES):
        x = make_input(shape, dtype, seed=60 + seed).to(device)
        for dim in range(-len(shape), len(shape)):
            if shape[dim] % 32:
                continue
            q = mx.to_mxfp8(x, rounding=rounding, dim=dim)
            moved = x.movedim(dim, -1).shape
            assert q.data.shape == moved and q.data.is_contiguous() and q.orig_dtype == dtype
            assert_exact(q.data, q.scale, _expected(x, dim, 32, rounding))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_both_layouts_are_the_two_casts(device, dtype, rounding):
    for seed, shape in enumerate([(256, 2048), (3, 96, 64), (96, 160)]):
        x = make_input(shape, dtype, seed=70 + seed).to(device)
        rows, cols = mx.to_mxfp8_both(x, rounding=rounding)
        assert rows.data.shape == x.shape and cols.data.shape == x.transpose(-2, -1).shape
        assert_exact(rows.data, rows.scale, _expected(x, -1, 32, rounding))
        assert_exact(cols.data, cols.scale, _expected(x, -2, 32, rounding))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("block_size", [8, 16, 64])
def test_other_block_sizes(device, block_size):
    x = make_input((128, 256), torch.bfloat16, seed=80, block_size=block_size).to(device)
    q = mx.to_mxfp8(x, block_size=block_size, dim=0)
    assert_exact(q.data, q.scale, _expected(x, 0, block_size, "floor"))
    rows, cols = mx.to_mxfp8_both(x, block_size=block_size, rounding="rceil")
    assert_exact(rows.data, rows.scale, _expected(x, 1, block_size, "rceil"))
    assert_exact(cols.data, cols.scale, _expected(x, 0, block_size, "rceil"))


@pytest.mark.parametrize("device", DEVICES)
def test_strided_input_and_round_trip(device):
    base = make_input((96, 256), torch.float32, seed=81).to(device)
    x = base[::3, 64:192]  # a view with row stride 768, 32 x 128
    q = mx.to_mxfp8(x, dim=0, rounding="rceil")
    assert_exact(q.data, q.scale, _expected(x, 0, 32, "rceil"))
    # from_mxfp8 of a dim cast dequantizes the moved tensor
    expected = dequantize_reference(q.data.cpu().view(torch.uint8).numpy(), q.scale.cpu().numpy(), 32)
    np.testing.assert_array_equal(mx.from_mxfp8(q).cpu().numpy(), torch.from_numpy(expected).float().numpy())


def test_layout_is_torchaos_dim1():
    """For a matrix, ``dim=0`` encodes ``x.t()`` (torchao's dim1 cast): bit for bit the cast of
    the contiguous transposed copy."""
    x = make_input((128, 64), torch.bfloat16, seed=82)
    q, ref = mx.to_mxfp8(x, dim=0), mx.to_mxfp8(x.t().contiguous())
    assert q.data.shape == (64, 128) and q.scale.shape == (64, 4)
    assert torch.equal(q.data.view(torch.uint8), ref.data.view(torch.uint8)) and torch.equal(q.scale, ref.scale)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: mx.to_mxfp8(torch.zeros(32, 64), dim=2), ValueError, "dim must be a dimension of x"),
        (lambda: mx.to_mxfp8(torch.zeros(32, 64), dim=1.0), TypeError, "dim must be an int"),
        (lambda: mx.to_mxfp8(torch.zeros(48, 64), dim=0), ValueError, r"dimension 0 of x \(48"),
        (lambda: mx.to_mxfp8_both(torch.zeros(64)), ValueError, "at least two dimensions"),
        (lambda: mx.to_mxfp8_both(torch.zeros(40, 64)), ValueError, r"dimension 0 of x \(40"),
    ],
)
def test_bad_arguments_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


@requires_cuda
def test_cuda_is_one_launch_each():
    x = make_input((1024, 2048), torch.bfloat16, seed=83).cuda()
    for call in (lambda: mx.to_mxfp8(x, dim=0), lambda: mx.to_mxfp8_both(x)):
        call()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            call()
            torch.cuda.synchronize()
        kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        assert len(kernels) == 1 and "mxfp8_cast_cols_kernel" in kernels[0], kernels


@requires_cuda
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_column_kernel_tiles(dtype, rounding):
    """Column-wise casts whose blocked dimension ends in a partial tile (byte scale stores) or is a
    whole number of tiles (packed ones), and whose other dimension is no multiple of a tile."""
    for seed, (shape, dim) in enumerate((((2, 160, 264), 1), ((1056, 72), 0), ((4, 256, 40), -2), ((96, 3, 520), 0))):
        x = make_input(shape, dtype, seed=90 + seed).cuda()
        q = mx.to_mxfp8(x, rounding=rounding, dim=dim)
        assert_exact(q.data, q.scale, _expected(x, dim, 32, rounding))


@requires_cuda
def test_cuda_under_torch_compile():
    x = make_input((256, 512), torch.bfloat16, seed=84).cuda()

    @torch.compile(fullgraph=True)
    def f(t):
        rows, cols = mx.to_mxfp8_both(t * 2, rounding="rceil")
        col = mx.to_mxfp8(t, dim=0)
        return rows.data, rows.scale, cols.data, cols.scale, col.data, col.scale

    out = f(x)
    assert_exact(out[0], out[1], _expected(x * 2, -1, 32, "rceil"))
    assert_exact(out[2], out[3], _expected(x * 2, 0, 32, "rceil"))
    assert_exact(out[4], out[5], _expected(x, 0, 32, "floor"))


# ------------------------------------------------------------------ XLA device


@requires_xla
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_xla_every_dim_and_both(xla_device, dtype, rounding):
    x = make_input((4, 64, 96), dtype, seed=85)
    xd = x.to(xla_device)
    for dim in (0, 1):
        if x.shape[dim] % 32:
            continue
        q = mx.to_mxfp8(xd, rounding=rounding, dim=dim)
        assert_exact(q.data, q.scale, _expected(x, dim, 32, rounding, ftz=True))
    rows, cols = mx.to_mxfp8_both(xd, rounding=rounding)
    assert_exact(rows.data, rows.scale, _expected(x, -1, 32, rounding, ftz=True))
    assert_exact(cols.data, cols.scale, _expected(x, -2, 32, rounding, ftz=True))


# ------------------------------------------------------------------ JAX: formulation and Pallas


@requires_jax
@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_jax_and_pallas_dim(rounding):
    import jax
    import jax.numpy as jnp

    from xlabridge.mx import _jax, _pallas

    on_gpu = jax.default_backend() == "gpu"
    x = make_input((64, 3, 64), torch.bfloat16, seed=86)
    a = jnp.asarray(x.float().numpy()).astype(jnp.bfloat16)
    expected = _expected(x, 0, 32, rounding, ftz=not on_gpu)
    assert_exact(*jax.jit(lambda t: _jax.to_mxfp8(t, 32, rounding, dim=0))(a), expected)
    assert_exact(*_pallas.to_mxfp8(a, 32, rounding, interpret=not on_gpu, dim=0), expected)


# ------------------------------------------------------------------ Mosaic kernels, interpret mode


@pytest.fixture
def _xla_cpu():
    """Interpret mode on XLA:CPU (whose float32 arithmetic flushes subnormals as a TPU does)."""
    import jax

    with jax.default_device(jax.devices("cpu")[0]):
        yield


def _jax_array(x: torch.Tensor):
    import jax.numpy as jnp

    return jnp.asarray(x.float().numpy()).astype({torch.float32: jnp.float32, torch.bfloat16: jnp.bfloat16}[x.dtype])


@requires_jax
@pytest.mark.usefixtures("_xla_cpu")
@pytest.mark.parametrize(
    ("shape", "dtype", "rounding"),
    [
        ((256, 384), torch.bfloat16, "floor"),  # R below a 4096-row span: one tile, 3 lane steps
        ((2, 128, 256), torch.float32, "rceil"),  # leading dimension
        ((8192, 128), torch.bfloat16, "rceil"),  # two 4096-row spans
        ((4096, 256), torch.float32, "floor"),  # one 128-lane step of 4 scale rows per step (the odd/even path)
    ],
)
def test_mosaic_cols_and_both_interpret(shape, dtype, rounding):
    from xlabridge.mx._mosaic import cols as _mosaic_cols

    x = make_input(shape, dtype, seed=87)
    (rd, rs), (cd, cs) = _mosaic_cols.to_mxfp8_both(_jax_array(x), 32, rounding, interpret=True)
    assert_exact(rd, rs, _expected(x, -1, 32, rounding, ftz=True))
    col_expected = _expected(x, -2, 32, rounding, ftz=True)
    assert_exact(cd, cs, col_expected)
    assert_exact(*_mosaic_cols.to_mxfp8_cols(_jax_array(x), 32, rounding, interpret=True), col_expected)


@requires_jax
@pytest.mark.usefixtures("_xla_cpu")
@pytest.mark.parametrize("block_size", [8, 16])
def test_mosaic_other_block_sizes(block_size):
    from xlabridge.mx._mosaic import cols as _mosaic_cols

    x = make_input((256, 256), torch.bfloat16, seed=88, block_size=block_size)
    (rd, rs), (cd, cs) = _mosaic_cols.to_mxfp8_both(_jax_array(x), block_size, "floor", interpret=True)
    assert_exact(rd, rs, _expected(x, -1, block_size, "floor", ftz=True))
    assert_exact(cd, cs, _expected(x, -2, block_size, "floor", ftz=True))


@requires_jax
def test_mosaic_shapes_it_does_not_take():
    import jax.numpy as jnp

    from xlabridge.mx._mosaic import cols as _mosaic_cols

    assert not _mosaic_cols.supports((1, 96, 128), "bfloat16", 32)  # R not a multiple of 128
    assert not _mosaic_cols.supports((1, 128, 96), "bfloat16", 32)  # B not a multiple of 128
    assert not _mosaic_cols.supports((1, 128, 128), "float16", 32)
    assert not _mosaic_cols.supports((1, 128, 128), "bfloat16", 64)
    with pytest.raises(ValueError, match="multiples of 128"):
        _mosaic_cols.to_mxfp8_cols(jnp.zeros((96, 128), jnp.bfloat16))


# ------------------------------------------------------------------ compiled for TPU by libtpu

MB = 1 << 20
# (rows, K) bf16 shapes of 1 MB to 1 GB whose scales have at least 128 lanes both ways (see
# docs/guides/mxfp8.md: narrower scales get a relayout copy from XLA's choice of result layout)
COLS_SHAPES = {1: (4096, 128), 64: (4096, 8192), 256: (16384, 8192), 1024: (65536, 8192)}
BOTH_SHAPES = {32: (4096, 4096), 64: (4096, 8192), 256: (16384, 8192), 1024: (65536, 8192)}


@pytest.fixture(scope="module")
def compiler():
    from xlabridge import tpu

    with tpu.TpuCompiler("tpu:v5e") as session:
        yield session


@requires_jax
@requires_libtpu
@pytest.mark.parametrize("generation", ["v4", "v5e", "v5p", "v6e"])
@pytest.mark.parametrize(("kind", "size_mb"), [("cols", s) for s in COLS_SHAPES] + [("both", s) for s in BOTH_SHAPES])
def test_one_kernel_at_ideal_bytes(compiler, generation, kind, size_mb):
    """One custom call and nothing else; the program's buffers are the input and the outputs."""
    import functools

    import jax
    import jax.numpy as jnp

    from xlabridge.mx._mosaic import cols as _mosaic_cols

    rows, k = (COLS_SHAPES if kind == "cols" else BOTH_SHAPES)[size_mb]
    fn = _mosaic_cols.to_mxfp8_cols if kind == "cols" else _mosaic_cols.to_mxfp8_both
    result = compiler.compile_jax(functools.partial(fn, block_size=32, rounding="floor"),
                                  jax.ShapeDtypeStruct((rows, k), jnp.bfloat16), topology=f"tpu:{generation}")
    assert result.kernels == ("custom-call/tpu_custom_call",), result.kernels
    n = rows * k
    assert result.memory.argument_bytes == 2 * n
    ideal_out = (n + n // 32) * (2 if kind == "both" else 1)
    assert ideal_out <= result.memory.output_bytes <= ideal_out + 8192, result.memory
    assert result.memory.temp_bytes == 0, result.memory


@requires_jax
@requires_libtpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_float32_and_leading_dims_compile(compiler, dtype):
    import functools

    import jax

    from xlabridge.mx._mosaic import cols as _mosaic_cols

    for fn in (_mosaic_cols.to_mxfp8_cols, _mosaic_cols.to_mxfp8_both):
        result = compiler.compile_jax(functools.partial(fn, block_size=32, rounding="rceil"),
                                      jax.ShapeDtypeStruct((2, 4096, 8192), dtype))
        assert result.kernels == ("custom-call/tpu_custom_call",), result.kernels


# ------------------------------------------------------------------ through torch_xla, TPU lowering


@pytest.fixture
def tpu_lowering():
    from xlabridge.tpu import _lowering

    with _lowering.override_lowering(_lowering.LoweringTarget.TPU, generation="v5e"):
        yield


@requires_xla
@requires_jax
def test_lazy_graph_holds_one_tpu_custom_call_each(xla_device, tpu_lowering):
    import torch_xla

    x = torch.randn(4096, 256, dtype=torch.bfloat16).to(xla_device)
    q = mx.to_mxfp8(x, dim=0)
    rows, cols = mx.to_mxfp8_both(x)
    assert q.data.shape == (256, 4096) and cols.data.shape == (256, 4096) and cols.scale.shape == (256, 128)
    for tensors in ([q.data, q.scale], [rows.data, rows.scale, cols.data, cols.scale]):
        text = torch_xla._XLAC._get_xla_tensors_hlo(tensors)
        assert text.count('custom_call_target="tpu_custom_call"') == 1, text
        assert " fusion(" not in text and "reduce(" not in text and "transpose(" not in text
    del q, rows, cols  # never executed: XLA:CPU has no tpu_custom_call


@requires_xla
@requires_jax
@requires_libtpu
def test_kernel_count_through_torch_xla(xla_device):
    """``hlo.kernel_count(..., target="tpu:v5e")`` (the TPU lowering, compiled by libtpu): 1 each."""
    from xlabridge import hlo

    x = torch.randn(4096, 4096, dtype=torch.bfloat16)
    for fn in (lambda t: mx.to_mxfp8(t, dim=0), lambda t: mx.to_mxfp8_both(t)):
        report = hlo.kernel_count(fn, x, target="tpu:v5e")
        assert report.count == 1 and report.kernels == ("custom-call/tpu_custom_call",), report
