"""The cast as one Pallas kernel, for XLA on GPUs (JAX).

XLA:GPU's own emitters can't put the block maximum and the elements scaled by it into one
kernel: a reduction fusion can't consume its own result through a broadcast, and XLA won't
recompute a per-block value for each of the block's elements (see ``_formulation.py`` and the
probes in ``tools/bench/mx_cast.py``: two kernels at best, and XLA's Triton normalization
fusions don't take the bit operations the exact cast needs). A Pallas kernel is a single
custom call in the XLA program, so the cast is one kernel: each program instance loads a
``[TILE, block_size]`` tile, and inside it the formulation's "two_pass" form is one pass in
registers. The kernel body is the very formulation code the other paths run (``JaxOps``).

This is Pallas' Triton backend, for GPUs. On TPUs Pallas compiles through Mosaic, whose block
shapes and layouts follow the (8, 128) vector tiles and refuse this kernel's rank-1 scale blocks;
the TPU kernel is ``_mosaic.py``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from xlabridge.mx import _formulation
from xlabridge.mx._jax import JaxOps, input_dtype_name

# Blocks per program instance: up to MAX_TILE, fewer when that would leave fewer than
# MIN_PROGRAMS programs (an H100 has 132 SMs; a 1 MB input has only 16384 blocks).
# tools/bench/mx_cast.py sweeps the tile at every size on the H100.
MAX_TILE = 256
MIN_TILE = 16
MIN_PROGRAMS = 1024


def default_tile(n_blocks: int) -> int:
    """The tile the kernel uses for ``n_blocks`` blocks: a power of two (Triton's block shapes are)."""
    tile = MAX_TILE
    while tile > MIN_TILE and n_blocks // tile < MIN_PROGRAMS:
        tile //= 2
    return min(tile, 1 << max(n_blocks - 1, 0).bit_length())


def _kernel(x_ref, data_ref, scale_ref, *, input_dtype: str, block_size: int, rounding: str, n_blocks: int):
    tile = scale_ref.shape[0]
    if n_blocks % tile == 0:
        data, scale = _formulation.cast_blocks(JaxOps(), x_ref[...], input_dtype, block_size, rounding, "two_pass")
        data_ref[...] = data
        scale_ref[...] = scale
        return
    # The last program's tile runs past the arrays: Pallas' Triton lowering does not mask
    # out-of-bounds stores of a partial block (measured on the H100: they overwrite whatever
    # buffer follows), so this kernel masks its own loads and stores.
    valid = pl.program_id(0) * tile + jax.lax.broadcasted_iota(jnp.int32, (tile,), 0) < n_blocks
    valid_rows = jnp.broadcast_to(valid[:, None], (tile, block_size))
    blocks = plgpu.load(x_ref, mask=valid_rows, other=0)
    data, scale = _formulation.cast_blocks(JaxOps(), blocks, input_dtype, block_size, rounding, "two_pass")
    plgpu.store(data_ref, data, mask=valid_rows)
    plgpu.store(scale_ref, scale, mask=valid)


@functools.partial(jax.jit, static_argnames=("block_size", "rounding", "interpret", "tile", "dim"))
def to_mxfp8(x: jax.Array, block_size: int = 32, rounding: str = "floor", interpret: bool = False, tile: int | None = None,
             dim: int = -1):
    """``(data, scale)`` of JAX array ``x`` from one Pallas kernel (``interpret=True`` runs
    the kernel body on any backend, for testing; ``tile``, a power of two, overrides the
    blocks per program instance). ``dim`` blocks along another dimension, with
    ``xlabridge.mx.to_mxfp8``'s layout (the cast of ``jnp.moveaxis(x, dim, -1)``): XLA makes the
    moved copy, a kernel of its own, before the Pallas kernel."""
    if dim % x.ndim != x.ndim - 1:
        x = jnp.moveaxis(x, dim, -1)
    n_blocks = x.size // block_size
    blocks = x.reshape(n_blocks, block_size)
    tile = default_tile(n_blocks) if tile is None else min(tile, 1 << max(n_blocks - 1, 0).bit_length())
    kernel = functools.partial(
        _kernel, input_dtype=input_dtype_name(x.dtype), block_size=block_size, rounding=rounding, n_blocks=n_blocks
    )
    data, scale = pl.pallas_call(
        kernel,
        grid=(pl.cdiv(n_blocks, tile),),
        in_specs=[pl.BlockSpec((tile, block_size), lambda i: (i, 0))],
        out_specs=[pl.BlockSpec((tile, block_size), lambda i: (i, 0)), pl.BlockSpec((tile,), lambda i: (i,))],
        out_shape=[
            jax.ShapeDtypeStruct((n_blocks, block_size), jnp.float8_e4m3fn),
            jax.ShapeDtypeStruct((n_blocks,), jnp.uint8),
        ],
        interpret=interpret,
    )(blocks)
    return data.reshape(x.shape), scale.reshape(x.shape[:-1] + (x.shape[-1] // block_size,))
