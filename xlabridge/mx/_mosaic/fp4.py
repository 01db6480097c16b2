"""The MXFP4 cast and its inverse on TPUs: one Mosaic (Pallas TPU) kernel each, reading and writing
every array once, in its final shape and in XLA:TPU's default layout of it.

Layout. As ``rows.py``'s MXFP8 kernel, an input ``[..., R, K]`` is viewed as ``[L, R, K]`` and
walked in strips of up to 128 rows; each 128-lane piece of a strip is transposed (``K`` along the
sublanes), so a block of 32 is four vector registers of the same lanes and its maximum is
elementwise. The two elements of a byte, ``2i`` and ``2i + 1``, are then neighbouring sublanes: the
4-bit codes of a 256-element chunk go to a VMEM scratch and come back as its even and odd rows
(strided sublane loads), and ``even | odd << 4`` is the chunk's 128 packed bytes per row, one
transpose from the row-major output. The inverse runs the other way: packed bytes transposed,
low and high nibbles decoded and written to the even and odd rows of a scratch (strided stores),
scaled, transposed back.

XLA:TPU keeps an array "K-major" (``K`` second-minor, ``R`` minor) where that pads its tiles less
(``xlabridge.tpu._layout``): gpt-oss's expert weights ``[E, 5760, 1440]`` bytes are, since 5760 is
a multiple of 128 and 1440 is not. Each array of a kernel is read or written in whichever of the
two layouts is its default (``Layouts``): a K-major array skips its transpose, and XLA adds no
copy around the kernel; ``plan`` lists the arrays whose default is neither (XLA relayouts those).

The arithmetic is the formulation's (``cast_blocks_fp4``'s pieces: ``scale_code`` for E2M1,
``scale_factors``, ``e2m1_codes``; ``e2m1_values`` and ``split_scale`` for the inverse), with
``rows.py``'s departures (the block maximum of integer bit patterns before ``scale_code``, per-
block factors broadcast down the sublanes). Like every XLA device a TPU flushes float32
subnormals, and interpret mode on XLA:CPU does too (the tests compare with the ``ftz`` model).
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
from xlabridge.mx._mosaic import hbm
from xlabridge.mx._mosaic import rows as _rows
from xlabridge.mx._mosaic.rows import LANES, MosaicOps, Tiles

CHUNK = 2 * LANES
"""Input elements per row that one chunk packs into 128 bytes."""
BLOCK_SIZE = 32
INPUT_DTYPES = ("bfloat16", "float32", "float16")
OUTPUT_DTYPES = ("bfloat16", "float32")


@dataclasses.dataclass(frozen=True)
class Layouts:
    """Which arrays are stored K-major (``[L, K, R]``; ``[L, K/2, R]`` and ``[L, K/32, R]`` for data
    and scale) rather than row-major. ``x`` is the values (the cast's input, the inverse's output)."""

    x: bool = False
    data: bool = False
    scale: bool = False


@dataclasses.dataclass(frozen=True)
class Plan:
    """How an array of logical shape ``shape`` (the values) maps onto the kernels: ``shape3`` is
    ``[L, R, K]``, ``layouts`` each array's storage, ``relayouts`` what XLA adds (one copy each)."""

    shape: tuple[int, ...]
    shape3: tuple[int, int, int]
    layouts: Layouts
    relayouts: tuple[str, ...]

    @property
    def kernel_count(self) -> int:
        return 1 + len(self.relayouts)


def plan(shape: tuple[int, ...], itemsize: int) -> Plan:
    """The plan for values of ``shape`` (``itemsize``-byte elements; at least two dimensions): each
    array row-major or K-major, as XLA:TPU's default layout of it is (``xlabridge.tpu._layout``)."""
    from xlabridge.tpu._layout import default_minor_to_major

    shape = tuple(int(d) for d in shape)
    n = len(shape)
    rest = tuple(range(n - 3, -1, -1))
    row_major, k_major = (n - 1, n - 2, *rest), (n - 2, n - 1, *rest)
    arrays = {"x": (shape, itemsize), "data": (shape[:-1] + (shape[-1] // 2,), 1),
              "scale": (shape[:-1] + (shape[-1] // BLOCK_SIZE,), 1)}
    stored, relayouts = {}, []
    for name, (array_shape, size) in arrays.items():
        layout = default_minor_to_major(array_shape, size)
        stored[name] = layout == k_major and layout != row_major
        if layout not in (row_major, k_major):
            relayouts.append(f"XLA relayouts the {name} (its default layout is not one the kernel reads or writes)")
    return Plan(shape, _rows.as_3d(shape), Layouts(**stored), tuple(relayouts))


def stored_shape(shape3: tuple[int, int, int], k_major: bool) -> tuple[int, int, int]:
    return (shape3[0], shape3[2], shape3[1]) if k_major else shape3


def _spec(block: tuple[int, int, int], k_major: bool):
    if k_major:
        return pl.BlockSpec((block[0], block[2], block[1]), lambda a, i, j: (a, j, i))
    return pl.BlockSpec(block, lambda a, i, j: (a, i, j))


# ------------------------------------------------------------------ cast


def _cast_piece(x_ref, nibbles_ref, codes_ref, leading, rows, lane0, width, nibble_row0, code_row0, rounding,
                layouts: Layouts, float16: bool):
    """Cast ``width`` lanes (<= 128) of a strip: 4-bit codes to ``nibbles_ref`` rows ``nibble_row0...``,
    scale bytes to ``codes_ref`` rows ``code_row0...``."""
    ops = MosaicOps()
    values = _rows._load_transposed(x_ref, leading, rows, pl.ds(lane0, width), layouts.x, float16)  # [width, R]
    n_blocks = width // BLOCK_SIZE
    blocked = (n_blocks, BLOCK_SIZE, values.shape[1])
    abs_bits = lax.bitcast_convert_type(values, jnp.int32) & C.F32_ABS_MASK
    code = _formulation.scale_code(ops, jnp.max(abs_bits.reshape(blocked), axis=1), rounding, C.E2M1)
    codes_ref[pl.ds(code_row0, n_blocks), :] = code
    reciprocal, is_nan = _formulation.scale_factors(ops, code)
    spread = lambda a: jnp.broadcast_to(a[:, None, :], blocked).reshape(values.shape)  # noqa: E731
    nibbles = _formulation.e2m1_codes(ops, values * spread(reciprocal))
    nibbles_ref[pl.ds(nibble_row0, width), :] = jnp.where(spread(is_nan), C.MXFP4_NAN_DATA, nibbles)


def _cast_kernel(x_ref, data_ref, scale_ref, nibbles_ref, codes_ref, *, rounding: str, layouts: Layouts, float16: bool):
    tile_leading = x_ref.shape[0]
    tile_rows, tile_lanes = (x_ref.shape[2], x_ref.shape[1]) if layouts.x else x_ref.shape[1:]
    strip = min(_rows.CHUNK_ROWS, tile_rows)
    n_strips = tile_rows // strip
    span = LANES * BLOCK_SIZE  # 128 scale lanes

    def cast_strip(leading, row0):
        rows = pl.ds(row0, strip)
        for span_index in range(-(-tile_lanes // span)):
            first = span_index * span
            span_width = min(span, tile_lanes - first)

            def chunk(lane0, byte0, width, code_row0):
                for piece in range(-(-width // LANES)):
                    piece_width = min(LANES, width - piece * LANES)
                    piece_lane0 = pl.multiple_of(lane0 + piece * LANES, LANES) if piece else lane0
                    _cast_piece(x_ref, nibbles_ref, codes_ref, leading, rows, piece_lane0, piece_width,
                                piece * LANES, code_row0 + piece * (LANES // BLOCK_SIZE), rounding, layouts, float16)
                half = width // 2
                packed = (nibbles_ref[pl.ds(0, half, stride=2), :] | (nibbles_ref[pl.ds(1, half, stride=2), :] << 4))
                bytes_out = pl.ds(byte0, half)
                if layouts.data:
                    data_ref[leading, bytes_out, rows] = packed.astype(jnp.uint8)
                else:
                    data_ref[leading, rows, bytes_out] = packed.T.astype(jnp.uint8)

            full, tail = divmod(span_width, CHUNK)

            def body(c, carry, first=first):
                chunk(pl.multiple_of(first + c * CHUNK, CHUNK), pl.multiple_of(first // 2 + c * LANES, LANES), CHUNK,
                      c * (CHUNK // BLOCK_SIZE))
                return carry

            if full:
                _rows._loop(full, body, 0)
            if tail:
                chunk(first + full * CHUNK, first // 2 + full * LANES, tail, full * (CHUNK // BLOCK_SIZE))
            width = span_width // BLOCK_SIZE
            scale_lanes = pl.ds(span_index * LANES, width)
            if layouts.scale:
                scale_ref[leading, scale_lanes, rows] = codes_ref[:width, :].astype(jnp.uint8)
            else:
                scale_ref[leading, rows, scale_lanes] = codes_ref[...].T[:, :width].astype(jnp.uint8)

    def per_leading(leading, carry):
        def per_strip(i, carry):
            cast_strip(leading, pl.multiple_of(i * strip, strip) if n_strips > 1 else 0)
            return carry

        return _rows._loop(n_strips, per_strip, carry)

    _rows._loop(tile_leading, per_leading, 0)


def cast_3d(x, rounding: str, tiles: Tiles, layouts: Layouts = Layouts(), float16: bool = False, interpret=False,
            pin_hbm: bool = False):
    """``(data, scale)`` of an ``[L, R, K]`` array (given, and returned, in its stored shapes) from
    one ``pallas_call``; ``float16``: ``x`` is bfloat16 holding float16 bit patterns (``rows.py``);
    ``pin_hbm``: every array in HBM (``hbm.py``)."""
    L, K, R = x.shape if layouts.x else (x.shape[0], x.shape[2], x.shape[1])
    block = (tiles.leading, tiles.rows, tiles.lanes)
    grid = (pl.cdiv(L, tiles.leading), pl.cdiv(R, tiles.rows), pl.cdiv(K, tiles.lanes))
    kernel = functools.partial(_cast_kernel, rounding=rounding, layouts=layouts, float16=float16)
    strip = min(_rows.CHUNK_ROWS, tiles.rows)
    pin = pin_hbm and not interpret  # HBM is the TPU compile's; the interpreter (jax 0.7.1) refuses it
    return pl.pallas_call(
        kernel,
        grid=grid,
        in_specs=[_spec(block, layouts.x)],
        out_specs=[_spec(block[:2] + (tiles.lanes // 2,), layouts.data),
                   _spec(block[:2] + (tiles.lanes // BLOCK_SIZE,), layouts.scale)],
        out_shape=[hbm.result(pin, stored_shape((L, R, K // 2), layouts.data), jnp.uint8),
                   hbm.result(pin, stored_shape((L, R, K // BLOCK_SIZE), layouts.scale), jnp.uint8)],
        scratch_shapes=[pltpu.VMEM((CHUNK, strip), jnp.int32), pltpu.VMEM((LANES, strip), jnp.int32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel")),
        cost_estimate=pl.CostEstimate(flops=0, transcendentals=0,
                                      bytes_accessed=x.size * x.dtype.itemsize + x.size // 2 + x.size // BLOCK_SIZE),
        interpret=interpret,
        name="xlabridge_mxfp4_cast",
    )(*hbm.operands(pin, x))


def tiles_for(shape3: tuple[int, int, int], itemsize: int, vmem_bytes: int | None) -> Tiles:
    """``rows.choose_tiles``' tiles (whole 128-row strips, lanes all of ``K`` or a multiple of 4096)."""
    return _rows.choose_tiles(shape3, itemsize, BLOCK_SIZE, vmem_bytes)


def _to_stored(x, p: Plan, k_major: bool):
    x3 = x.reshape(p.shape3)
    return jnp.swapaxes(x3, 1, 2) if k_major else x3


def _from_stored(a, k_major: bool, shape: tuple[int, ...]):
    return (jnp.swapaxes(a, 1, 2) if k_major else a).reshape(shape)


def to_mxfp4(x, rounding: str = "floor", *, vmem_bytes: int | None = None, layouts: Layouts | None = None,
             pin_hbm: bool = False, interpret=False):
    """``(data, scale)`` of JAX array ``x`` (bfloat16, float32 or float16; at least two dimensions,
    the last a multiple of 32) from one Mosaic kernel over XLA:TPU's default layouts (``plan``;
    ``layouts`` overrides it, to test each variant). ``vmem_bytes`` and ``pin_hbm``
    (``hbm.pins(generation)``) are for the TPU it is compiled for. A plain function around a jitted
    one, so that ``xlabridge.tpu``'s ``compile_jax`` can pickle it."""
    if jnp.dtype(x.dtype).name not in INPUT_DTYPES:
        raise TypeError(f"x must be bfloat16, float32 or float16 for the MXFP4 Mosaic kernel, got {x.dtype}")
    if x.ndim < 2 or x.shape[-1] % BLOCK_SIZE:
        raise ValueError(f"x must be at least 2-D with a last dimension that is a multiple of 32, got shape {x.shape}")
    return _to_mxfp4(x, rounding, vmem_bytes, layouts, pin_hbm, interpret)


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4, 5))
def _to_mxfp4(x, rounding, vmem_bytes, layouts, pin_hbm, interpret):
    p = plan(x.shape, x.dtype.itemsize)
    layouts = layouts or p.layouts
    tiles = tiles_for(p.shape3, x.dtype.itemsize, vmem_bytes)
    float16 = x.dtype == jnp.float16
    if float16:
        x = lax.bitcast_convert_type(x, jnp.bfloat16)
    data, scale = cast_3d(_to_stored(x, p, layouts.x), rounding, tiles, layouts, float16, interpret, pin_hbm=pin_hbm)
    lead = x.shape[:-1]
    return (_from_stored(data, layouts.data, lead + (x.shape[-1] // 2,)),
            _from_stored(scale, layouts.scale, lead + (x.shape[-1] // BLOCK_SIZE,)))


# ------------------------------------------------------------------ dequantize


def _dequantize_kernel(data_ref, scale_ref, out_ref, values_ref, *, layouts: Layouts):
    ops = MosaicOps()
    tile_leading = data_ref.shape[0]
    tile_rows, tile_bytes = (data_ref.shape[2], data_ref.shape[1]) if layouts.data else data_ref.shape[1:]
    strip = min(_rows.CHUNK_ROWS, tile_rows)
    n_strips = tile_rows // strip
    span_bytes = LANES * BLOCK_SIZE // 2

    def strip_body(leading, row0):
        rows = pl.ds(row0, strip)
        for span_index in range(-(-tile_bytes // span_bytes)):
            first = span_index * span_bytes
            span_width = min(span_bytes, tile_bytes - first)
            n_codes = span_width * 2 // BLOCK_SIZE
            scale_lanes = pl.ds(span_index * LANES, n_codes)
            if layouts.scale:
                codes = scale_ref[leading, scale_lanes, rows].astype(jnp.int32)
            else:
                codes = scale_ref[leading, rows, scale_lanes].astype(jnp.int32).T  # [blocks, R]
            first_factor, second_factor = _formulation.split_scale(ops, codes)
            is_nan = (codes == C.E8M0_NAN).astype(jnp.float32)
            for chunk in range(-(-span_width // LANES)):
                byte0 = first + chunk * LANES
                width = min(LANES, span_width - chunk * LANES)  # bytes
                if layouts.data:
                    packed = data_ref[leading, pl.ds(byte0, width), rows].astype(jnp.int32)
                else:
                    packed = data_ref[leading, rows, pl.ds(byte0, width)].astype(jnp.int32).T  # [bytes, R]
                blocks = slice(chunk * (LANES * 2 // BLOCK_SIZE), chunk * (LANES * 2 // BLOCK_SIZE) + width * 2 // BLOCK_SIZE)
                half_blocks = (width * 2 // BLOCK_SIZE, BLOCK_SIZE // 2, strip)
                spread = lambda a, blocks=blocks, half_blocks=half_blocks, width=width: jnp.broadcast_to(  # noqa: E731
                    a[blocks][:, None, :], half_blocks).reshape(width, strip)
                for nibble, parity in ((packed & 15, 0), (packed >> 4, 1)):
                    values = _formulation.e2m1_values(ops, nibble) * spread(first_factor) * spread(second_factor)
                    values_ref[pl.ds(parity, width, stride=2), :] = jnp.where(spread(is_nan) > 0, jnp.float32(jnp.nan),
                                                                             values)
                out_lanes = pl.ds(2 * byte0, 2 * width)
                values = values_ref[: 2 * width, :]
                if layouts.x:
                    out_ref[leading, out_lanes, rows] = values.astype(out_ref.dtype)
                else:
                    out_ref[leading, rows, out_lanes] = values.T.astype(out_ref.dtype)

    def per_leading(leading, carry):
        def per_strip(i, carry):
            strip_body(leading, pl.multiple_of(i * strip, strip) if n_strips > 1 else 0)
            return carry

        return _rows._loop(n_strips, per_strip, carry)

    _rows._loop(tile_leading, per_leading, 0)


def dequantize_3d(data, scale, dtype: str, tiles: Tiles, layouts: Layouts = Layouts(), interpret=False,
                  pin_hbm: bool = False):
    """``[L, R, K]`` values (stored as ``layouts.x`` says) of ``dtype`` from packed ``data`` and
    ``scale`` bytes in their stored shapes, from one ``pallas_call`` (``pin_hbm``: ``hbm.py``)."""
    L, KH, R = data.shape if layouts.data else (data.shape[0], data.shape[2], data.shape[1])
    K = 2 * KH
    block = (tiles.leading, tiles.rows, tiles.lanes)
    grid = (pl.cdiv(L, tiles.leading), pl.cdiv(R, tiles.rows), pl.cdiv(K, tiles.lanes))
    strip = min(_rows.CHUNK_ROWS, tiles.rows)
    pin = pin_hbm and not interpret  # HBM is the TPU compile's; the interpreter (jax 0.7.1) refuses it
    return pl.pallas_call(
        functools.partial(_dequantize_kernel, layouts=layouts),
        grid=grid,
        in_specs=[_spec(block[:2] + (tiles.lanes // 2,), layouts.data),
                  _spec(block[:2] + (tiles.lanes // BLOCK_SIZE,), layouts.scale)],
        out_specs=_spec(block, layouts.x),
        out_shape=hbm.result(pin, stored_shape((L, R, K), layouts.x), dtype),
        scratch_shapes=[pltpu.VMEM((CHUNK, strip), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel")),
        cost_estimate=pl.CostEstimate(flops=2 * L * R * K, transcendentals=0,
                                      bytes_accessed=L * R * (K // 2 + K // BLOCK_SIZE + K * jnp.dtype(dtype).itemsize)),
        interpret=interpret,
        name="xlabridge_mxfp4_dequantize",
    )(*hbm.operands(pin, data, scale))


def from_mxfp4(data, scale, dtype: str = "bfloat16", *, vmem_bytes: int | None = None, layouts: Layouts | None = None,
               pin_hbm: bool = False, interpret=False):
    """The values (``[..., 2 * data.shape[-1]]`` of ``dtype``: bfloat16 or float32) of JAX arrays
    ``data`` (packed uint8) and ``scale`` (uint8, ``data.shape[:-1] + (K/32,)``) from one Mosaic
    kernel (``vmem_bytes``, ``pin_hbm``: as ``to_mxfp4``'s)."""
    if jnp.dtype(dtype).name not in OUTPUT_DTYPES:
        raise ValueError(f"the MXFP4 Mosaic dequantize kernel writes {OUTPUT_DTYPES}, got {jnp.dtype(dtype).name}")
    if data.ndim < 2:
        raise ValueError(f"data must be at least 2-D for the Mosaic kernel, got shape {data.shape}")
    return _from_mxfp4(data, scale, jnp.dtype(dtype).name, vmem_bytes, layouts, pin_hbm, interpret)


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5, 6))
def _from_mxfp4(data, scale, dtype, vmem_bytes, layouts, pin_hbm, interpret):
    shape = data.shape[:-1] + (2 * data.shape[-1],)
    p = plan(shape, jnp.dtype(dtype).itemsize)
    layouts = layouts or p.layouts
    tiles = tiles_for(p.shape3, jnp.dtype(dtype).itemsize, vmem_bytes)
    L, R, K = p.shape3
    data3 = data.reshape(L, R, K // 2)
    scale3 = scale.reshape(L, R, K // BLOCK_SIZE)
    if layouts.data:
        data3 = jnp.swapaxes(data3, 1, 2)
    if layouts.scale:
        scale3 = jnp.swapaxes(scale3, 1, 2)
    return _from_stored(dequantize_3d(data3, scale3, dtype, tiles, layouts, interpret, pin_hbm=pin_hbm), layouts.x, shape)
