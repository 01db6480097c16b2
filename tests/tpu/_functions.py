"""JAX functions the tests compile for TPU: module-level, so the TPU worker can import them."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def mlp(x, w1, w2):
    """A two-layer MLP's forward pass: two matmuls, a GELU, a reduction."""
    return jax.nn.gelu(x @ w1) @ w2


def sharded_matmul(a, w):
    """``a`` is sharded by rows over the mesh: the column sum needs an all-reduce across devices."""
    return (a @ w).sum(axis=0)


def add(a, b):
    return a + b


def _double_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0 + 1.0


def pallas_double(x):
    """A Pallas TPU (Mosaic) kernel over (8, 128) tiles."""
    block = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(
        _double_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // 8,),
        in_specs=[block], out_specs=block,
    )(x)


def scale_rows(x, *, factor):
    """For a functools.partial with a static keyword argument."""
    return x * jnp.asarray(factor, x.dtype)


def negate_bits(x):
    """An elementwise op of ``x``'s own dtype: its result takes XLA:TPU's default layout."""
    if x.dtype == jnp.uint8:
        return x ^ jnp.uint8(1)
    return -x
