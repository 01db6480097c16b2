"""``from_mxfp8`` on TPU: one Mosaic kernel (``_mosaic_dequant.py``), exact in interpret mode
against the NumPy model (``dequantize_reference`` with XLA's flush of float32 subnormals), one
kernel at the ideal bytes when libtpu compiles it for v4, v5e, v5p and v6e, and what reaches
torch_xla's graph."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from tests.conftest import requires_xla
from tests.mx._cases import make_input
from tests.mx._reference import dequantize_reference, mxfp8_reference
from xlabridge import _optional

pytestmark = pytest.mark.skipif(not _optional.is_available("jax"), reason="needs jax (pip install 'xlabridge[xla]')")
requires_libtpu = pytest.mark.skipif(
    not _optional.is_available("libtpu"), reason="needs libtpu for TPU compiles (pip install 'xlabridge[tpu-compile]')"
)
MB = 1 << 20
K = 8192


@pytest.fixture(autouse=True)
def _interpret_on_xla_cpu():
    import jax

    with jax.default_device(jax.devices("cpu")[0]):
        yield


def _encoded(shape, seed, rounding="rceil", block_size=32):
    """Data and scale bytes of the spec model's cast of a seeded input (40% special blocks)."""
    x = make_input(shape, torch.float32, seed=seed, block_size=block_size)
    return mxfp8_reference(x.double().numpy(), block_size, rounding)


def _expected(data, scale, block_size, dtype):
    ref = dequantize_reference(data, scale, block_size, ftz=True)
    return torch.from_numpy(ref).to(getattr(torch, dtype)).float().numpy()


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize(("shape", "block_size"), [((128, 8192), 32), ((3, 5, 96), 32), ((300, 256), 32), ((8, 512), 16)])
def test_interpret_is_exact(shape, block_size, dtype):
    import jax
    import jax.numpy as jnp

    from xlabridge.mx._mosaic import dequant as _mosaic_dequant

    data, scale = _encoded(shape, seed=90, block_size=block_size)
    out = _mosaic_dequant.from_mxfp8(jax.lax.bitcast_convert_type(jnp.asarray(data), jnp.float8_e4m3fn),
                                     jnp.asarray(scale), block_size, dtype, interpret=True)
    assert out.dtype == jnp.dtype(dtype) and out.shape == shape
    got, expected = np.asarray(out.astype(jnp.float32)), _expected(data, scale, block_size, dtype)
    same = (got == expected) | (np.isnan(got) & np.isnan(expected))
    assert same.all(), f"{(~same).sum()} values differ, first at {np.argwhere(~same)[0]}"
    # signed zeros too
    assert (np.signbit(got) == np.signbit(expected))[~np.isnan(expected)].all()


def test_unsupported_arguments():
    import jax.numpy as jnp

    from xlabridge.mx._mosaic import dequant as _mosaic_dequant

    with pytest.raises(ValueError, match="dtype in"):
        _mosaic_dequant.from_mxfp8(jnp.zeros((8, 128), jnp.float8_e4m3fn), jnp.zeros((8, 4), jnp.uint8), 32, "float16")


@pytest.fixture(scope="module")
def compiler():
    from xlabridge import tpu

    with tpu.TpuCompiler("tpu:v5e") as session:
        yield session


@requires_libtpu
@pytest.mark.parametrize("size_mb", [1, 256, 1024])
@pytest.mark.parametrize("generation", ["v4", "v5e", "v5p", "v6e"])
def test_one_kernel_at_ideal_bytes(compiler, generation, size_mb):
    import jax
    import jax.numpy as jnp

    from xlabridge import tpu
    from xlabridge.mx._mosaic import dequant as _mosaic_dequant

    rows = size_mb * MB // K
    fn = functools.partial(_mosaic_dequant.from_mxfp8, block_size=32, dtype="bfloat16",
                           vmem_bytes=tpu.CHIPS[generation].vmem_bytes)
    result = compiler.compile_jax(fn, jax.ShapeDtypeStruct((rows, K), jnp.float8_e4m3fn),
                                  jax.ShapeDtypeStruct((rows, K // 32), jnp.uint8), topology=f"tpu:{generation}")
    assert result.kernels == ("custom-call/tpu_custom_call",), result.kernels
    n = rows * K
    assert result.memory.argument_bytes == n + n // 32
    assert result.memory.output_bytes == 2 * n
    assert result.memory.temp_bytes <= 1 * MB


@pytest.fixture
def tpu_lowering():
    from xlabridge.tpu import _lowering

    with _lowering.override_lowering(_lowering.LoweringTarget.TPU, generation="v5e"):
        yield


@requires_xla
def test_lazy_graph_holds_one_tpu_custom_call(xla_device, tpu_lowering):
    import torch_xla

    from xlabridge import mx

    data, scale = _encoded((64, 256), seed=91)
    q = mx.MXTensor(torch.from_numpy(data).view(torch.float8_e4m3fn).to(xla_device),
                    torch.from_numpy(scale).to(xla_device), 32, torch.bfloat16)
    values = mx.from_mxfp8(q)
    text = torch_xla._XLAC._get_xla_tensors_hlo([values])
    del values  # never executed: XLA:CPU has no tpu_custom_call
    assert text.count('custom_call_target="tpu_custom_call"') == 1, text
    assert " fusion(" not in text and "multiply(" not in text


@requires_xla
@requires_libtpu
def test_kernel_count_through_torch_xla(xla_device):
    """``from_mxfp8`` was 11 XLA kernels on v5e (14 on v5p); now 1."""
    from xlabridge import hlo, mx

    x = torch.randn(1024, K, dtype=torch.bfloat16)
    for target in ("tpu:v5e", "tpu:v5p"):
        report = hlo.kernel_count(lambda t: mx.from_mxfp8(mx.to_mxfp8(t)), x, target=target)
        assert report.kernels == ("custom-call/tpu_custom_call", "custom-call/tpu_custom_call"), report
