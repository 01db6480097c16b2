"""Column-wise and both-layouts MXFP8 casts on TPUs, each one Mosaic (Pallas TPU) kernel.

``cast_cols(x)`` of a ``[A, R, B]`` input blocks along ``R`` (the second-minor dimension) and
writes the layout ``xlabridge.mx.to_mxfp8(x, dim=-2)`` documents: the MX tensor of the moved
input ``[A, B, R]`` (data ``[A, B, R]``, scale ``[A, B, R/32]``, both in their final shapes, so
XLA adds no copy around the kernel). ``cast_both(x)`` writes those and the row-wise
``[A, R, B]``/``[A, R, B/32]`` outputs of ``_mosaic.py``'s kernel from one read of the input.

Layout. A grid step reads a tile of ``rows x lanes`` (``ColTiles``) and walks it in chunks of
128 rows x 128 lanes. A column block (32 consecutive rows of one lane) lies along the sublanes of
four vector registers, so its maximum is elementwise: no cross-lane work. The scaled chunk is
transposed once (as float32) into the ``[B, R]`` output. The chunk's 4 x 128 scale bytes are rows
of a ``(128, 128)`` scratch that a tile of 4096 rows fills; one transpose turns it into 128 rows
of 128 scale bytes of the ``[B, R/32]`` output. Hence a tile spans 128 x block_size rows (4096)
where ``R`` is a multiple of that, else all of ``R``: the scale tile's lanes must be a multiple of
128 or the whole dimension (Mosaic's block-shape rule).

The both-layouts kernel also casts each chunk row-wise as ``_mosaic.py`` does (transpose, blocks
along sublanes, transpose back). Its row-wise scale tile covers 4096 input lanes (or all of
``B``) for the same block-shape rule, more than one grid step reads, so the grid's innermost
axis walks the steps of that span (``arbitrary``, not ``parallel``): the scale tile stays in VMEM
across them, their scale bytes collect in a ``(128, rows)`` scratch, and the last step
transposes it into the tile. Every input element is read from HBM once, every output byte
written once.

The arithmetic is ``_formulation.py``'s (``scale_code``, ``scale_factors``, ``scaled_values``),
with the same departures as ``_mosaic.py`` (block maximum of the integer bit patterns before
``scale_code``, factors per block broadcast down the sublanes, boolean selects through
``MosaicOps``), and like it the float32 -> float8_e4m3fn conversion is Mosaic's.

Shapes the kernels take (``supports``): bfloat16 or float32, block sizes 8, 16 and 32, ``R`` and
``B`` multiples of 128, and a tile within ``TILE_BYTES`` (``R`` a multiple of 128 x block_size,
or small enough to fit whole). Other inputs take the XLA computation.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from xlabridge.mx import _constants as C
from xlabridge.mx import _formulation
from xlabridge.mx._mosaic.rows import MosaicOps

INPUT_DTYPES = ("bfloat16", "float32")
"""Input dtypes these kernels take: the row-wise kernel widens float16's bit patterns inside it
(``_mosaic.widen_float16``); these do not yet, so float16 takes the XLA computation here."""

LANES = 128
CHUNK = 128
"""A chunk is ``CHUNK`` rows by ``LANES`` lanes (one 128 x 128 transpose)."""
BLOCK_SIZES = (8, 16, 32)
"""Block sizes the kernels take: a block is a whole number of sublane tiles of a 128-row chunk,
and a tile of 128 x block_size rows stays within VMEM."""
TILE_BYTES = 2 << 20
"""Input bytes per grid step, at most (as ``_mosaic.TILE_BYTES``)."""
UNROLL = 4
"""Chunks per loop iteration: independent work for libtpu's scheduler."""


@dataclasses.dataclass(frozen=True)
class ColTiles:
    """One grid step's share of the ``[A, R, B]`` input (``rows x lanes``), the rows one scale
    tile of the column-wise output covers (``rows``), and the lanes one scale tile of the row-wise
    output covers (``span``, a multiple of ``lanes``)."""

    rows: int
    lanes: int
    span: int


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def choose_tiles(shape: tuple[int, int, int], itemsize: int, block_size: int, both: bool = False) -> ColTiles | None:
    """Tiles for a ``[A, R, B]`` input of ``itemsize``-byte elements, or None where the kernels
    don't take the shape (see the module docstring). ``both``: for the both-layouts kernel, whose
    row-wise scale tile and its scratch (``rows x span / block_size``, 5 bytes each) must also
    stay within ``TILE_BYTES``."""
    _, R, B = shape
    if block_size not in BLOCK_SIZES or R % CHUNK or B % LANES or R == 0 or B == 0:
        return None
    scale_span = LANES * block_size
    rows = scale_span if R % scale_span == 0 else R
    if rows * LANES * itemsize > TILE_BYTES or _unroll(rows // CHUNK, CHUNK // block_size) is None:
        return None
    span = scale_span if B % scale_span == 0 else B
    if both and rows * _round_up(span // block_size, LANES) * 5 > TILE_BYTES * 2:
        return None
    lanes = LANES
    while lanes * 2 <= span and span % (lanes * 2) == 0 and rows * lanes * 2 * itemsize <= TILE_BYTES:
        lanes *= 2
    return ColTiles(rows, lanes, span)


def supports(shape: tuple[int, int, int], dtype_name: str, block_size: int, both: bool = False) -> bool:
    """Whether the kernel (``both``: the both-layouts one) takes a ``[A, R, B]`` input of
    ``dtype_name`` (``"bfloat16"``...)."""
    if dtype_name not in INPUT_DTYPES:
        return False
    return choose_tiles(shape, jnp.dtype(dtype_name).itemsize, block_size, both) is not None


def _blocks_down(values, block_size: int, rounding: str):
    """Scale bytes ``(rows / block_size, lanes)`` (int32) and the scaled float32 values of a
    float32 ``(rows, lanes)`` array whose blocks run down its sublanes."""
    ops = MosaicOps()
    rows, lanes = values.shape
    blocked = (rows // block_size, block_size, lanes)
    abs_bits = lax.bitcast_convert_type(values, jnp.int32) & C.F32_ABS_MASK
    code = _formulation.scale_code(ops, jnp.max(abs_bits.reshape(blocked), axis=1), rounding)
    reciprocal, is_nan = _formulation.scale_factors(ops, code)
    scaled = _formulation.scaled_values(
        ops,
        values,
        jnp.broadcast_to(reciprocal[:, None, :], blocked).reshape(values.shape),
        jnp.broadcast_to(is_nan[:, None, :], blocked).reshape(values.shape),
    )
    return code, scaled


def _unroll(n: int, per_chunk: int) -> int | None:
    """Chunks per iteration of a loop over ``n`` chunks: at most ``UNROLL``, dividing ``n``, and
    a whole number of 8-row sublane tiles of ``per_chunk`` scale rows each (Mosaic must prove the
    alignment of each iteration's first scale row); all ``n`` where that fails and ``n`` is small;
    None where neither works."""
    need = max(1, 8 // per_chunk)
    for step in range(min(UNROLL, n), 0, -1):
        if n % step == 0 and step % need == 0:
            return step
    return n if n <= 2 * UNROLL else None


def _loop(n: int, step: int, per_chunk: int, body) -> None:
    """``body(c, code_row)`` for chunks ``c`` in ``range(n)``, ``step`` per iteration of a
    ``fori_loop``; ``code_row`` (``c * per_chunk``) is written so Mosaic sees its alignment."""

    def outer(i, carry):
        base = i * step
        base_row = pl.multiple_of(base * per_chunk, 8) if n > step else 0
        for k in range(step):
            body(base + k, base_row + k * per_chunk)
        return carry

    if n == step:
        outer(0, 0)
    else:
        lax.fori_loop(0, n // step, outer, 0)


def _kernel(x_ref, *refs, block_size: int, rounding: str, both: bool, steps_per_span: int):
    if both:
        col_data_ref, col_scale_ref, row_data_ref, row_scale_ref, col_codes, row_codes = refs
    else:
        col_data_ref, col_scale_ref, col_codes = refs
    rows, lanes = x_ref.shape
    per_chunk = CHUNK // block_size  # scale bytes of one 128-row (or 128-lane) chunk
    n_row_chunks = rows // CHUNK
    step = _unroll(n_row_chunks, per_chunk)
    lane_chunks = lanes // LANES
    # the first row of this step's row-wise scale bytes in the span's scratch
    k = pl.program_id(3)
    per_step = lane_chunks * per_chunk
    if per_step % 8 == 0:
        step_rows = [(None, pl.multiple_of(k * per_step, 8))]
    else:  # 4 rows a step (one 128-lane chunk of 32-blocks): even steps at 8j, odd ones at 8j + 4
        half = pl.multiple_of((k // 2) * 8, 8)
        step_rows = [(k % 2 == 0, half), (k % 2 == 1, half + 4)]

    for lane_chunk in range(lane_chunks):
        l0 = lane_chunk * LANES

        def cast_chunk(c, code_row, l0=l0, lane_chunk=lane_chunk):
            r0 = pl.multiple_of(c * CHUNK, CHUNK)
            chunk = x_ref[pl.ds(r0, CHUNK), pl.ds(l0, LANES)].astype(jnp.float32)
            code, scaled = _blocks_down(chunk, block_size, rounding)
            col_codes[lane_chunk, pl.ds(code_row, per_chunk), :] = code
            col_data_ref[pl.ds(l0, LANES), pl.ds(r0, CHUNK)] = scaled.T.astype(jnp.float8_e4m3fn)
            if both:
                row_code, row_scaled = _blocks_down(chunk.T, block_size, rounding)
                for when, first in step_rows:
                    def store(first=first):
                        row_codes[c, pl.ds(first + lane_chunk * per_chunk, per_chunk), :] = row_code

                    if when is None:
                        store()
                    else:
                        pl.when(when)(store)
                row_data_ref[pl.ds(r0, CHUNK), pl.ds(l0, LANES)] = row_scaled.T.astype(jnp.float8_e4m3fn)

        _loop(n_row_chunks, step, per_chunk, cast_chunk)
        width = rows // block_size
        col_scale_ref[pl.ds(l0, LANES), :] = col_codes[lane_chunk].T[:, :width].astype(jnp.uint8)

    if both:
        @pl.when(k == steps_per_span - 1)
        def _():
            width = row_scale_ref.shape[1]

            def transpose_chunk(c, _):
                r0 = pl.multiple_of(c * CHUNK, CHUNK)
                row_scale_ref[pl.ds(r0, CHUNK), :] = row_codes[c].T[:, :width].astype(jnp.uint8)

            _loop(n_row_chunks, step, per_chunk, transpose_chunk)


def _squeezed():
    """The block dimension Pallas drops from the kernel's view (``None`` before JAX had a name)."""
    return pl.squeezed if hasattr(pl, "squeezed") else None


def _call(x, block_size: int, rounding: str, tiles: ColTiles, both: bool, interpret):
    A, R, B = x.shape
    steps_per_span = tiles.span // tiles.lanes
    grid = (A, R // tiles.rows, B // tiles.span, steps_per_span)
    sq = _squeezed()
    rows_major = lambda a, i, j, k: (a, i, j * steps_per_span + k)
    lanes_major = lambda a, i, j, k: (a, j * steps_per_span + k, i)
    out_specs = [
        pl.BlockSpec((sq, tiles.lanes, tiles.rows), lanes_major),
        pl.BlockSpec((sq, tiles.lanes, tiles.rows // block_size), lanes_major),
    ]
    out_shape = [
        jax.ShapeDtypeStruct((A, B, R), jnp.float8_e4m3fn),
        jax.ShapeDtypeStruct((A, B, R // block_size), jnp.uint8),
    ]
    scratch = [pltpu.VMEM((tiles.lanes // LANES, _round_up(tiles.rows // block_size, LANES), LANES), jnp.int32)]
    if both:
        out_specs += [
            pl.BlockSpec((sq, tiles.rows, tiles.lanes), rows_major),
            pl.BlockSpec((sq, tiles.rows, tiles.span // block_size), lambda a, i, j, k: (a, i, j)),
        ]
        out_shape += [
            jax.ShapeDtypeStruct((A, R, B), jnp.float8_e4m3fn),
            jax.ShapeDtypeStruct((A, R, B // block_size), jnp.uint8),
        ]
        scratch.append(pltpu.VMEM((tiles.rows // CHUNK, _round_up(tiles.span // block_size, LANES), LANES), jnp.int32))
    n_out = 2 if both else 1
    out_bytes = n_out * (x.size + x.size // block_size)
    kernel = functools.partial(_kernel, block_size=block_size, rounding=rounding, both=both,
                               steps_per_span=steps_per_span)
    return pl.pallas_call(
        kernel,
        grid=grid,
        in_specs=[pl.BlockSpec((sq, tiles.rows, tiles.lanes), rows_major)],
        out_specs=out_specs,
        out_shape=out_shape,
        scratch_shapes=scratch,
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary" if both else "parallel")
        ),
        cost_estimate=pl.CostEstimate(flops=0, transcendentals=0, bytes_accessed=x.size * x.dtype.itemsize + out_bytes),
        interpret=interpret,
        name="xlabridge_mxfp8_cast_both" if both else "xlabridge_mxfp8_cast_cols",
    )(x)


def cast_cols_3d(x, block_size: int, rounding: str, interpret=False):
    """``(data [A, B, R], scale [A, B, R/bs])`` of a ``[A, R, B]`` array from one ``pallas_call``."""
    tiles = _tiles_or_raise(x, block_size, both=False)
    return tuple(_call(x, block_size, rounding, tiles, both=False, interpret=interpret))


def cast_both_3d(x, block_size: int, rounding: str, interpret=False):
    """``(row data, row scale, col data, col scale)`` of a ``[A, R, B]`` array from one
    ``pallas_call``: ``[A, R, B]``, ``[A, R, B/bs]``, ``[A, B, R]``, ``[A, B, R/bs]``."""
    tiles = _tiles_or_raise(x, block_size, both=True)
    col_data, col_scale, row_data, row_scale = _call(x, block_size, rounding, tiles, both=True, interpret=interpret)
    return row_data, row_scale, col_data, col_scale


def _tiles_or_raise(x, block_size: int, both: bool) -> ColTiles:
    if jnp.dtype(x.dtype).name not in INPUT_DTYPES:
        raise TypeError(f"x must be bfloat16 or float32 for the Mosaic kernel (Mosaic has no float16), got {x.dtype}")
    tiles = choose_tiles(tuple(x.shape), jnp.dtype(x.dtype).itemsize, block_size, both)
    if tiles is None:
        raise ValueError(
            f"the column-wise Mosaic kernel takes [A, R, B] inputs with R and B multiples of 128, block_size in "
            f"{BLOCK_SIZES} and R a multiple of {LANES} * block_size or at most {TILE_BYTES // LANES} bytes of "
            f"rows; got shape {tuple(x.shape)}, {x.dtype}, block_size {block_size}"
        )
    return tiles


def _as_3d(x):
    return x.reshape((-1,) + x.shape[-2:]) if x.ndim != 3 else x


def to_mxfp8_cols(x, block_size: int = 32, rounding: str = "floor", *, interpret=False):
    """``(data, scale)`` of JAX array ``x`` (``ndim >= 2``) cast along its second-minor
    dimension: the MX tensor of ``jnp.swapaxes(x, -1, -2)``, from one Mosaic kernel."""
    return _to_mxfp8_cols(x, block_size, rounding, interpret)


def to_mxfp8_both(x, block_size: int = 32, rounding: str = "floor", *, interpret=False):
    """``((data, scale) along the last dimension, (data, scale) along the second-minor)`` of JAX
    array ``x`` (``ndim >= 2``) from one Mosaic kernel."""
    return _to_mxfp8_both(x, block_size, rounding, interpret)


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _to_mxfp8_cols(x, block_size, rounding, interpret):
    data, scale = cast_cols_3d(_as_3d(x), block_size, rounding, interpret)
    moved = x.shape[:-2] + (x.shape[-1], x.shape[-2])
    return data.reshape(moved), scale.reshape(moved[:-1] + (moved[-1] // block_size,))


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _to_mxfp8_both(x, block_size, rounding, interpret):
    row_data, row_scale, col_data, col_scale = cast_both_3d(_as_3d(x), block_size, rounding, interpret)
    moved = x.shape[:-2] + (x.shape[-1], x.shape[-2])
    return (
        (row_data.reshape(x.shape), row_scale.reshape(x.shape[:-1] + (x.shape[-1] // block_size,))),
        (col_data.reshape(moved), col_scale.reshape(moved[:-1] + (moved[-1] // block_size,))),
    )
