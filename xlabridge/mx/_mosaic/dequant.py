"""``from_mxfp8`` on TPUs: one Mosaic (Pallas TPU) kernel that reads the float8 data and the scale
bytes once and writes the result once, in their final shapes (``[L, R, K]``, ``[L, R, K/32]``,
``[L, R, K]``), so the program moves the ideal bytes. XLA's own computation of the same
(``_xla.py``) is 11 kernels on v4, v5e and v6e and 14 on v5p.

Layout. The tiles are ``_mosaic.choose_tiles``' (sized by the output's element size). A block's 32
elements run along the lanes, and its scale is one lane of the scale tile, so each scale has to
be spread over 32 lanes. The scale tile of a strip of rows (``rows x 128`` bytes, 4096 data lanes)
is transposed once; then the factors of one 128-lane data chunk are 4 rows of it, broadcast down
32 sublanes each (a sublane broadcast, no cross-lane work) and transposed back into the chunk's
``rows x 128`` layout: one transpose of float32 per chunk, and none of the data.

The arithmetic is ``_formulation.split_scale``'s, as in ``_xla.py``: the element times two normal
float32 factors whose product is the scale (2**-127 itself is a float32 subnormal, which a TPU
flushes), NaN where the scale byte is 0xFF; the conversion to the output dtype is Mosaic's.
Outputs in bfloat16 and float32 (Mosaic has no float16).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from xlabridge.mx import _constants as C
from xlabridge.mx import _formulation
from xlabridge.mx._mosaic import rows as _mosaic
from xlabridge.mx._mosaic.rows import LANES, MosaicOps, Tiles

BLOCK_SIZES = (8, 16, 32)
OUTPUT_DTYPES = ("bfloat16", "float32")


def supports(dtype_name: str, block_size: int) -> bool:
    """Whether the kernel dequantizes into ``dtype_name`` with ``block_size``."""
    return dtype_name in OUTPUT_DTYPES and block_size in BLOCK_SIZES


def _kernel(data_ref, scale_ref, out_ref, *, block_size: int):
    ops = MosaicOps()
    tile_leading, tile_rows, tile_lanes = data_ref.shape
    strip = min(_mosaic.CHUNK_ROWS, tile_rows)
    n_strips = tile_rows // strip
    span = LANES * block_size
    per_chunk = LANES // block_size

    def cast_strip(leading, row0):
        rows = pl.ds(row0, strip)
        for span_index in range(-(-tile_lanes // span)):
            first = span_index * span
            width = min(LANES, (tile_lanes - first) // block_size)
            codes = scale_ref[leading, rows, pl.ds(span_index * LANES, width)].astype(jnp.int32)
            codes = codes.T  # [scale lanes, rows]
            first_factor, second_factor = _formulation.split_scale(ops, codes)
            is_nan = (codes == C.E8M0_NAN).astype(jnp.float32)
            for chunk in range(-(-min(span, tile_lanes - first) // LANES)):
                lane0 = first + chunk * LANES
                lanes = min(LANES, tile_lanes - lane0)
                n_blocks = lanes // block_size
                blocks = slice(chunk * per_chunk, chunk * per_chunk + n_blocks)
                expand = lambda a, blocks=blocks, n_blocks=n_blocks, lanes=lanes: jnp.broadcast_to(
                    a[blocks][:, None, :], (n_blocks, block_size, strip)).reshape(lanes, strip).T
                values = data_ref[leading, rows, pl.ds(lane0, lanes)].astype(jnp.float32)
                values = values * expand(first_factor) * expand(second_factor)
                values = jnp.where(expand(is_nan) > 0, jnp.float32(jnp.nan), values)
                out_ref[leading, rows, pl.ds(lane0, lanes)] = values.astype(out_ref.dtype)

    def per_leading(leading, carry):
        def per_strip(i, carry):
            cast_strip(leading, pl.multiple_of(i * strip, strip) if n_strips > 1 else 0)
            return carry

        return _mosaic._loop(n_strips, per_strip, carry)

    _mosaic._loop(tile_leading, per_leading, 0)


def dequantize_3d(data, scale, block_size: int, dtype: str, tiles: Tiles, interpret=False):
    """``[L, R, K]`` values of ``dtype`` from float8 ``data`` ``[L, R, K]`` and ``scale`` bytes
    ``[L, R, K/block_size]``, from one ``pallas_call``."""
    L, R, K = data.shape
    grid = (pl.cdiv(L, tiles.leading), pl.cdiv(R, tiles.rows), pl.cdiv(K, tiles.lanes))
    index = lambda a, i, j: (a, i, j)
    out_itemsize = jnp.dtype(dtype).itemsize
    return pl.pallas_call(
        functools.partial(_kernel, block_size=block_size),
        grid=grid,
        in_specs=[
            pl.BlockSpec((tiles.leading, tiles.rows, tiles.lanes), index),
            pl.BlockSpec((tiles.leading, tiles.rows, tiles.lanes // block_size), index),
        ],
        out_specs=pl.BlockSpec((tiles.leading, tiles.rows, tiles.lanes), index),
        out_shape=jax.ShapeDtypeStruct((L, R, K), dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel")),
        cost_estimate=pl.CostEstimate(
            flops=2 * data.size, transcendentals=0, bytes_accessed=data.size * (1 + out_itemsize) + data.size // block_size
        ),
        interpret=interpret,
        name="xlabridge_mxfp8_dequantize",
    )(data, scale)


def tiles_for(shape3: tuple[int, int, int], dtype: str, block_size: int, vmem_bytes: int | None = None) -> Tiles:
    """``_mosaic.choose_tiles`` sized by the output's element size (the largest of the three arrays)."""
    return _mosaic.choose_tiles(shape3, jnp.dtype(dtype).itemsize, block_size, vmem_bytes)


def from_mxfp8(data, scale, block_size: int = 32, dtype: str = "float32", *, vmem_bytes: int | None = None,
               interpret=False):
    """The values of JAX arrays ``data`` (float8_e4m3fn) and ``scale`` (uint8, ``data.shape[:-1] +
    (K / block_size,)``) in ``dtype`` (bfloat16 or float32), from one Mosaic kernel."""
    if not supports(jnp.dtype(dtype).name, block_size):
        raise ValueError(
            f"the Mosaic dequantize kernel takes dtype in {OUTPUT_DTYPES} and block_size in {BLOCK_SIZES}, "
            f"got {jnp.dtype(dtype).name} and {block_size}"
        )
    return _from_mxfp8(data, scale, block_size, jnp.dtype(dtype).name, vmem_bytes, interpret)


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5))
def _from_mxfp8(data, scale, block_size, dtype, vmem_bytes, interpret):
    shape3 = _mosaic.as_3d(data.shape)
    tiles = tiles_for(shape3, dtype, block_size, vmem_bytes)
    scale3 = shape3[:2] + (shape3[2] // block_size,)
    out = dequantize_3d(data.reshape(shape3), scale.reshape(scale3), block_size, dtype, tiles, interpret)
    return out.reshape(data.shape)

