"""The Mosaic (Pallas TPU) kernel of the cast: bit-exact in interpret mode on the CPU, one kernel
when libtpu compiles it for TPU v4, v5e, v5p and v6e, and what reaches torch_xla's graph.

Interpret mode runs the kernel body with XLA:CPU arithmetic, which flushes float32 subnormals as
a TPU does, so results are compared with the reference's ``ftz`` model. TPU figures are compiled
here by libtpu's compile-only client (``xlabridge.tpu``), nothing runs on a TPU.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from xlabridge import _optional

pytestmark = pytest.mark.skipif(not _optional.is_available("jax"), reason="needs jax (pip install 'xlabridge[xla]')")

from tests.mx._cases import ROUNDINGS, make_input  # noqa: E402
from tests.mx._reference import mxfp8_reference  # noqa: E402

requires_libtpu = pytest.mark.skipif(
    not _optional.is_available("libtpu"), reason="needs libtpu for TPU compiles (pip install 'xlabridge[tpu-compile]')"
)
requires_xla = pytest.mark.skipif(not _optional.is_available("torch_xla"), reason="needs torch_xla")

DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # float16 as bfloat16 bits (see _mosaic.INPUT_DTYPES)
MB = 1 << 20
GENERATIONS = ("v4", "v5e", "v5p", "v6e")
SIZES_MB = (1, 16, 256, 1024)
K = 8192


@pytest.fixture(autouse=True)
def _interpret_on_xla_cpu():
    """Interpret mode on XLA:CPU, whose float32 arithmetic flushes subnormals as a TPU does; where
    JAX defaults to a GPU (the H100 machine), XLA:GPU keeps them and the ``ftz`` model would not hold."""
    import jax

    with jax.default_device(jax.devices("cpu")[0]):
        yield


def _jax_input(x: torch.Tensor):
    import jax.numpy as jnp

    dtype = {torch.float32: jnp.float32, torch.bfloat16: jnp.bfloat16, torch.float16: jnp.float16}[x.dtype]
    return jnp.asarray(x.float().numpy()).astype(dtype)


def _assert_exact(result, x: torch.Tensor, rounding: str, block_size: int = 32) -> None:
    data_ref, scale_ref = mxfp8_reference(x.double().numpy(), block_size, rounding, ftz=True)
    data, scale = (np.asarray(a) for a in result)
    assert data.shape == x.shape and scale.shape == scale_ref.shape
    bad = np.argwhere(scale != scale_ref)
    assert bad.size == 0, f"{len(bad)} scale bytes differ, first at {bad[0]}: {scale[tuple(bad[0])]} != {scale_ref[tuple(bad[0])]}"
    bad = np.argwhere(data.view(np.uint8) != data_ref)
    assert bad.size == 0, f"{len(bad)} data bytes differ, first at {bad[0]}"


def _cast(x: torch.Tensor, rounding: str, block_size: int = 32, **kwargs):
    from xlabridge.mx._mosaic import rows as _mosaic

    return _mosaic.to_mxfp8(_jax_input(x), block_size, rounding, interpret=True, **kwargs)


# ------------------------------------------------------------------ interpret mode, bit for bit


@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_special_values_every_dtype(dtype, rounding):
    """Seeded inputs with 40% special blocks (zeros, NaN, Inf, subnormals, saturation, ties), on a
    plain matrix and on an odd leading shape whose K (96) is not a whole number of lanes."""
    for seed, shape in enumerate([(64, 256), (3, 5, 96)]):
        x = make_input(shape, dtype, seed=40 + seed)
        _assert_exact(_cast(x, rounding), x, rounding)


@pytest.mark.parametrize(("shape", "rounding"), [((16, 32), "floor"), ((8, 8192), "rceil"), ((96,), "rceil")])
def test_narrow_wide_and_1d(shape, rounding):
    """K = 32 (one block per row), K = 8192 (two 4096-lane scale spans), and a 1-D input."""
    x = make_input(shape, torch.bfloat16, seed=50)
    _assert_exact(_cast(x, rounding), x, rounding)


@pytest.mark.parametrize("block_size", [16, 64])
def test_other_block_sizes(block_size):
    x = make_input((8, 512), torch.float32, seed=51, block_size=block_size)
    _assert_exact(_cast(x, "floor", block_size), x, "floor", block_size)


@pytest.mark.parametrize(
    ("shape", "tiles"),
    [
        ((300, 256), (1, 128, 256)),  # the last row tile has 44 of its 128 rows
        ((5, 8224), (1, 5, 4096)),  # the last lane tile has 32 of its 4096 lanes
        ((5, 7, 64), (2, 7, 64)),  # the last leading tile has 1 of its 2 matrices
    ],
)
def test_partial_tiles_with_nan_filled_padding(shape, tiles):
    """Tiles that run past the array: Pallas' TPU interpret mode fills what lies outside (and all
    uninitialised VMEM) with NaN, so garbage that leaked into a real block would show."""
    from jax.experimental.pallas import tpu as pltpu

    from xlabridge.mx._mosaic import rows as _mosaic

    x = make_input(shape, torch.bfloat16, seed=52)
    params = pltpu.InterpretParams(out_of_bounds_reads="uninitialized_value", uninitialized_memory="nan")
    shape3 = _mosaic.as_3d(shape)
    data, scale = _mosaic.cast_3d(_jax_input(x).reshape(shape3), 32, "rceil", _mosaic.Tiles(*tiles), interpret=params)
    result = (np.asarray(data).reshape(shape), np.asarray(scale).reshape(shape[:-1] + (shape[-1] // 32,)))
    _assert_exact(result, x, "rceil")


@settings(max_examples=12, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**32 - 1),
    dtype=st.sampled_from(DTYPES),
    rounding=st.sampled_from(ROUNDINGS),
    special=st.floats(0.0, 1.0),
)
def test_property(seed, dtype, rounding, special):
    # one shape, so each (dtype, rounding) pair is interpreted once and reused
    x = make_input((24, 384), dtype, seed=seed, special_fraction=special)
    _assert_exact(_cast(x, rounding), x, rounding)


def test_bad_arguments():
    import jax.numpy as jnp

    from xlabridge.mx._mosaic import rows as _mosaic

    with pytest.raises(ValueError, match="block_size must be one of"):
        _mosaic.to_mxfp8(jnp.zeros((4, 96)), 48)
    with pytest.raises(TypeError, match="bfloat16, float32 or float16"):
        _mosaic.to_mxfp8(jnp.zeros((4, 32), jnp.int32))
    with pytest.raises(ValueError, match="multiple of block_size"):
        _mosaic.to_mxfp8(jnp.zeros((4, 40)))


# ------------------------------------------------------------------ tiles


@pytest.mark.parametrize("vmem", [16 * MB, 128 * MB, None])
@pytest.mark.parametrize(
    ("shape", "itemsize"),
    [((1, 64, K), 2), ((1, 16384, K), 2), ((1, 65536, K), 2), ((1, 4096, 65536), 4), ((1000, 5, 96), 2), ((1, 1, 96), 4)],
)
def test_tiles_follow_mosaic_rules_and_vmem(shape, itemsize, vmem):
    """Mosaic's block rule (each of the two minor tile dimensions a multiple of the register tile
    or the whole dimension; the scale tile's lanes likewise), whole 128-row chunks, and an input
    tile within an eighth of the chip's VMEM."""
    from xlabridge.mx._mosaic import rows as _mosaic

    L, R, Kd = shape
    t = _mosaic.choose_tiles(shape, itemsize, 32, vmem)
    assert 1 <= t.leading <= L and 1 <= t.rows <= R and 1 <= t.lanes <= Kd
    assert t.rows == R or t.rows % 128 == 0
    assert t.lanes == Kd or t.lanes % (128 * 32) == 0
    assert t.leading * t.rows * t.lanes * itemsize <= (vmem or 16 * MB) // 8 or (t.rows <= 128 and t.lanes <= 128 * 32)
    steps = -(-L // t.leading) * -(-R // t.rows) * -(-Kd // t.lanes)
    assert steps >= min(4, L * -(-R // 128)), (t, steps)


# ------------------------------------------------------------------ compiled for TPU by libtpu


@pytest.fixture(scope="module")
def compiler():
    from xlabridge import tpu

    with tpu.TpuCompiler("tpu:v5e") as session:
        yield session


def _entry_computation(hlo_text: str) -> str:
    """The optimized module's entry computation, to search independently of ``parse_kernels``."""
    entry = hlo_text[hlo_text.index("\nENTRY") :]
    return entry[: entry.index("\n}")]


@requires_libtpu
@pytest.mark.parametrize("size_mb", SIZES_MB)
@pytest.mark.parametrize("generation", GENERATIONS)
def test_one_kernel_on_every_generation(compiler, generation, size_mb):
    """bf16, K = 8192, 1 MB to 1 GB: one custom call, no copy or transpose around it, and the
    executable's buffers are the input and the two outputs (ideal bytes)."""
    import jax
    import jax.numpy as jnp

    from xlabridge import tpu
    from xlabridge.mx._mosaic import rows as _mosaic

    rows = size_mb * MB // 2 // K
    fn = functools.partial(_mosaic.to_mxfp8, block_size=32, rounding="floor", vmem_bytes=tpu.CHIPS[generation].vmem_bytes)
    result = compiler.compile_jax(fn, jax.ShapeDtypeStruct((rows, K), jnp.bfloat16), topology=f"tpu:{generation}")
    assert result.kernels == ("custom-call/tpu_custom_call",), result.kernels
    entry = _entry_computation(result.hlo)
    assert entry.count(" custom-call(") == 1, entry
    assert not any(f" {op}(" in entry for op in ("copy", "copy-start", "transpose", "fusion")), entry
    assert result.memory.argument_bytes == rows * K * 2
    ideal_out = rows * K + rows * K // 32
    assert ideal_out <= result.memory.output_bytes <= ideal_out + 4096, result.memory


@requires_libtpu
@pytest.mark.parametrize(("dtype", "rounding"), [("float32", "rceil"), ("float32", "floor"), ("bfloat16", "rceil")])
def test_every_dtype_and_rounding_compiles(compiler, dtype, rounding):
    import jax

    from xlabridge.mx._mosaic import rows as _mosaic

    fn = functools.partial(_mosaic.to_mxfp8, block_size=32, rounding=rounding)
    result = compiler.compile_jax(fn, jax.ShapeDtypeStruct((2, 256, 4096), dtype))
    assert result.kernels == ("custom-call/tpu_custom_call",), result.kernels


# ------------------------------------------------------------------ through torch_xla


@pytest.fixture
def tpu_lowering():
    from xlabridge.tpu import _lowering

    with _lowering.override_lowering(_lowering.LoweringTarget.TPU, generation="v5e"):
        yield


def _graph_text(q) -> str:
    import torch_xla

    return torch_xla._XLAC._get_xla_tensors_hlo([q.data, q.scale])


@requires_xla
def test_lazy_graph_holds_one_tpu_custom_call(xla_device, tpu_lowering):
    """With the TPU lowering the cast is one ``tpu_custom_call`` in the lazy graph (counted in
    torch_xla's HLO text), lowered without loading libtpu into this process."""
    from xlabridge import mx

    q = mx.to_mxfp8(torch.randn(3, 64, 256, dtype=torch.bfloat16).to(xla_device), rounding="rceil")
    text = _graph_text(q)
    del q  # never executed: XLA:CPU has no tpu_custom_call
    assert text.count('custom_call_target="tpu_custom_call"') == 1, text
    assert " fusion(" not in text and "reduce(" not in text
    with open("/proc/self/maps") as maps:
        assert "libtpu" not in maps.read()


@requires_xla
def test_other_xla_devices_keep_the_xla_computation(xla_device):
    from xlabridge import mx

    q = mx.to_mxfp8(torch.randn(64, 256).to(xla_device))
    assert "tpu_custom_call" not in _graph_text(q)


@requires_xla
def test_float16_on_tpu_takes_the_kernel_and_says_so(xla_device, tpu_lowering):
    """float16 reaches the Mosaic kernel as bfloat16 bits (XLA's conversion is a kernel of its
    own: 2 kernels, not the XLA computation's 10), with a ``MosaicRelayoutWarning`` that says so."""
    from xlabridge import mx
    from xlabridge.errors import MosaicRelayoutWarning
    from xlabridge.mx._mosaic import lowering as _tpu

    _tpu._warn_relayouts.cache_clear()
    x = make_input((8, 64), torch.float16, seed=53)
    with pytest.warns(MosaicRelayoutWarning, match=r"\(8, 64\) and dtype float16 is at least 2 kernels"):
        q = mx.to_mxfp8(x.to(xla_device))
    text = _graph_text(q)
    del q
    assert text.count('custom_call_target="tpu_custom_call"') == 1, text


@requires_xla
@requires_libtpu
def test_lazy_graph_compiles_to_one_tpu_kernel(xla_device, tpu_lowering, compiler):
    """The graph torch_xla would hand XLA compiles for v5e into one kernel, and so does
    ``xlabridge.hlo.kernel_count(..., target="tpu:v5e")`` (which sets the TPU lowering itself)."""
    from xlabridge import hlo, mx

    x = torch.randn(1024, K, dtype=torch.bfloat16)
    q = mx.to_mxfp8(x.to(xla_device))
    result = compiler.compile_tensors([q.data, q.scale])
    del q
    assert result.kernels == ("custom-call/tpu_custom_call",), result.kernels
    report = hlo.kernel_count(lambda t: mx.to_mxfp8(t), x, target="tpu:v5e")
    assert report.count == 1 and report.kernels == ("custom-call/tpu_custom_call",), report


@requires_xla
def test_torch_compile_reaches_the_tpu_custom_call(xla_device, tpu_lowering):
    """Under ``torch.compile(backend="xlabridge")`` the custom op stays in Dynamo's graph (no
    break) and torch_xla's bridge, replaying it on XLA tensors, builds the TPU kernel: the graph
    it compiles holds a ``tpu_custom_call``, which XLA:CPU refuses by name."""
    from xlabridge import mx

    def cast(t):
        q = mx.to_mxfp8(t * 2, rounding="rceil")
        return q.data, q.scale

    x = torch.randn(64, 256, dtype=torch.bfloat16).to(xla_device)
    explained = torch._dynamo.explain(cast)(x)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    assert "xlabridge.mxfp8_cast" in explained.graphs[0].code
    with pytest.raises(Exception, match="tpu_custom_call"):
        torch.compile(cast, backend="xlabridge")(x)
