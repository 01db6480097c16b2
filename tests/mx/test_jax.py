"""The formulation through JAX (what XLA:GPU compiles) and the Pallas kernel, bit for bit.

On a GPU this runs XLA:GPU and the Pallas kernel for real; on a CPU, XLA:CPU (which flushes
float32 subnormals, so the reference models that) and the Pallas kernel body in interpret mode.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from xlabridge import _optional

pytestmark = pytest.mark.skipif(not _optional.is_available("jax"), reason="needs jax (pip install 'xlabridge[xla]')")

from tests.mx._cases import DTYPES, ROUNDINGS, make_input  # noqa: E402
from tests.mx._reference import mxfp8_reference  # noqa: E402


@pytest.fixture(scope="module")
def jax_env():
    import jax
    import jax.numpy as jnp

    on_gpu = jax.default_backend() == "gpu"
    dtypes = {torch.float32: jnp.float32, torch.bfloat16: jnp.bfloat16, torch.float16: jnp.float16}
    return jax, jnp, on_gpu, dtypes


def _check(result, x, rounding, ftz):
    data_ref, scale_ref = mxfp8_reference(x.double().numpy(), 32, rounding, ftz=ftz)
    np.testing.assert_array_equal(np.asarray(result[1]), scale_ref)
    np.testing.assert_array_equal(np.asarray(result[0]).view(np.uint8), data_ref)


@pytest.mark.parametrize("strategy", ["two_pass", "recompute", "recompute_wide"])
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_jax_formulation_is_bit_exact(jax_env, dtype, rounding, strategy):
    jax, jnp, on_gpu, dtypes = jax_env
    from xlabridge.mx import _jax

    x = make_input((32, 256), dtype, seed=21)
    cast = jax.jit(lambda a: _jax.to_mxfp8(a, 32, rounding, strategy))
    _check(cast(jnp.asarray(x.float().numpy()).astype(dtypes[dtype])), x, rounding, ftz=not on_gpu)


@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_pallas_kernel_is_bit_exact(jax_env, dtype, rounding):
    jax, jnp, on_gpu, dtypes = jax_env
    from xlabridge.mx import _pallas

    x = make_input((16, 512) if on_gpu else (4, 256), dtype, seed=22)
    result = _pallas.to_mxfp8(jnp.asarray(x.float().numpy()).astype(dtypes[dtype]), 32, rounding, interpret=not on_gpu)
    # interpret mode runs the kernel body with XLA:CPU arithmetic, which flushes subnormals
    _check(result, x, rounding, ftz=not on_gpu)


def test_pallas_kernel_is_one_kernel_on_gpu(jax_env):
    jax, jnp, on_gpu, _ = jax_env
    if not on_gpu:
        pytest.skip("needs JAX with a GPU")
    from xlabridge.hlo import parse_kernels
    from xlabridge.mx import _pallas

    x = jnp.ones((1024, 4096), jnp.bfloat16)
    report = parse_kernels(jax.jit(lambda a: _pallas.to_mxfp8(a, 32, "floor")).lower(x).compile().as_text())
    assert report.count == 1 and report.kernels[0].startswith("custom-call/"), report


@pytest.mark.parametrize("n_blocks", [1, 3, 16, 1000, 16384, 262144, 1 << 22])
def test_pallas_default_tile_keeps_the_gpu_busy(n_blocks):
    from xlabridge.mx import _pallas

    tile = _pallas.default_tile(n_blocks)
    assert tile & (tile - 1) == 0 and tile <= _pallas.MAX_TILE
    assert tile == _pallas.MIN_TILE or tile >= n_blocks or n_blocks // tile >= _pallas.MIN_PROGRAMS
    assert tile == _pallas.MAX_TILE or n_blocks // (2 * tile) < _pallas.MIN_PROGRAMS


@pytest.mark.parametrize(
    ("shape", "tile"), [((7, 320), 16), ((7, 320), 64), ((7, 320), 128), ((1000, 96), None), ((5, 4128), 256)]
)
def test_pallas_kernel_partial_last_tile(jax_env, shape, tile):
    """Blocks that don't fill the last program's tile are cast like the rest, and nothing is
    written past the outputs (on the H100, unmasked stores there corrupted the scale bytes)."""
    jax, jnp, on_gpu, dtypes = jax_env
    from xlabridge.mx import _pallas

    x = make_input(shape, torch.bfloat16, seed=23)
    result = _pallas.to_mxfp8(jnp.asarray(x.float().numpy()).astype(jnp.bfloat16), 32, "rceil", interpret=not on_gpu, tile=tile)
    _check(result, x, "rceil", ftz=not on_gpu)
