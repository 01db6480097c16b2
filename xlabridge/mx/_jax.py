"""JAX adapter of the formulation: the same cast as ``jax.numpy``/``lax`` code.

It exists to check what XLA:GPU makes of the very formulation torch_xla runs (JAX compiles
for GPUs; torch_xla's GPU builds are not available there), and serves JAX users as well:
``to_mxfp8(x)`` is jittable. JAX is imported when this module is.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from xlabridge.mx import _formulation

_DTYPES = {
    "f32": jnp.float32,
    "bf16": jnp.bfloat16,
    "f16": jnp.float16,
    "s32": jnp.int32,
    "s16": jnp.int16,
    "u8": jnp.uint8,
    "f8e4m3fn": jnp.float8_e4m3fn,
}


def _lift(a, b):
    """Python numbers as scalars of ``a``'s dtype, so no promotion changes the arithmetic."""
    return np.asarray(b, dtype=a.dtype) if isinstance(b, (int, float)) else b


class JaxOps:
    """``ArrayOps`` over JAX arrays."""

    def convert(self, a, dtype):
        return a.astype(_DTYPES[dtype])

    def bitcast(self, a, dtype):
        return lax.bitcast_convert_type(a, _DTYPES[dtype])

    def add(self, a, b):
        return a + _lift(a, b)

    def sub(self, a, b):
        return _lift(b, a) - b if isinstance(a, (int, float)) else a - _lift(a, b)

    def mul(self, a, b):
        return a * _lift(a, b)

    def bit_and(self, a, b):
        return a & _lift(a, b)

    def div_int(self, a, b):
        return lax.div(a, _lift(a, b))

    def shift_right(self, a, bits):
        return lax.shift_right_logical(a, _lift(a, bits))

    def shift_left(self, a, bits):
        return lax.shift_left(a, _lift(a, bits))

    def maximum(self, a, b):
        return jnp.maximum(a, _lift(a, b))

    def eq(self, a, b):
        return a == _lift(a, b)

    def ne(self, a, b):
        return a != _lift(a, b)

    def ge(self, a, b):
        return a >= _lift(a, b)

    def gt(self, a, b):
        return a > _lift(a, b)

    def select(self, pred, on_true, on_false):
        like = on_false if not isinstance(on_false, (int, float)) else on_true
        return lax.select(pred, jnp.broadcast_to(_lift(like, on_true), pred.shape), jnp.broadcast_to(_lift(like, on_false), pred.shape))

    def clamp(self, a, lo, hi):
        return lax.clamp(_lift(a, lo), a, _lift(a, hi))

    def reduce_max_last(self, a):
        return jnp.max(a, axis=-1)

    def slice_last(self, a, index):
        return a[..., index]

    def expand_last(self, a, size):
        return jnp.broadcast_to(a[..., None], a.shape + (size,))

    def bit_or(self, a, b):
        return a | _lift(a, b)

    def split_pairs(self, a):
        return a[..., 0::2], a[..., 1::2]

    def interleave_pairs(self, even, odd):
        return jnp.stack((even, odd), axis=-1).reshape(even.shape[:-1] + (2 * even.shape[-1],))


def input_dtype_name(dtype) -> str:
    """The formulation's name of a JAX input dtype (f32, bf16 or f16)."""
    return next(name for name, candidate in _DTYPES.items() if candidate == dtype)


def to_mxfp8(x, block_size: int = 32, rounding: str = "floor", strategy: str = "recompute", dim: int = -1):
    """``(data, scale)`` of JAX array ``x``: float8_e4m3fn data of x's shape, uint8 E8M0 scales
    (``dim``: blocks along that dimension, the cast of ``jnp.moveaxis(x, dim, -1)``)."""
    if dim % x.ndim != x.ndim - 1:
        x = jnp.moveaxis(x, dim, -1)
    blocks = x.reshape(x.shape[:-1] + (x.shape[-1] // block_size, block_size))
    data, scale = _formulation.cast_blocks(JaxOps(), blocks, input_dtype_name(x.dtype), block_size, rounding, strategy)
    return data.reshape(x.shape), scale
