"""The cast on TPUs: one Mosaic (Pallas TPU) kernel that reads the input once and writes data and
scale once, in their final shapes.

Layout. The input is viewed as ``[L, R, K]`` (``K`` blocked, ``R`` the dimension XLA:TPU tiles
with it, the rest collapsed into ``L``, which is free: XLA:TPU tiles only the two minor dimensions
of an array in HBM). XLA:TPU's default layout of an array is not always row-major: it keeps tile
padding least, so a narrow last dimension often goes second-minor (``xlabridge.tpu._layout``). The
kernel reads and writes each of its arrays (input, data ``[L, R, K]``, scale ``[L, R, K/32]``)
row-major or rows-minor (``[L, K, R]``), whichever is that array's default layout (``plan``), so
XLA adds no copy or relayout around the kernel; where neither is, ``Plan.relayouts`` says what
XLA adds (``xlabridge.mx._mosaic.lowering`` warns). A grid step takes a tile of ``rows x lanes`` (``Tiles``); inside it the kernel
walks chunks of 128 rows x 128 lanes. A block of 32 elements runs along the 128 lanes of a vector
register, where its maximum needs values from other lanes. Lane rotations (``pltpu.roll``) do
that, but each one occupies a cross-lane unit for about as long as a whole chunk's arithmetic
(libtpu's static schedule of a butterfly of rotations, tried first: 34 bundles per 1024
elements on v5e).
So each chunk is transposed instead (``chunk.T``, one pass through the transpose unit): a block
then runs along 32 sublanes, four vector registers of the same lanes, and its maximum is an
elementwise maximum of four registers plus one reduction over eight sublanes. Each lane of the
transposed chunk is one input row, so the chunk's 128 x 4 scale bytes come out as rows of a
``(4, 128)`` array; the bytes of 32 chunks (4096 input lanes) fill a ``(128, 128)`` scratch that
is transposed once into 128 rows of 128 scale bytes. A rows-minor input is already in that
form. The data is scaled in the transposed layout, transposed back as float32 (where the data is
row-major) and converted to float8 there. libtpu's static schedule of the
chunk loop: 6.1-8.2 bundles per 1024 elements on v5e, v5p and v6e, 29 on v4 (two vector ALUs, and
no float8 instruction); ``tools/bench/mx_cast_tpu.py`` reads it.

The arithmetic is ``_formulation.py``'s: ``scale_code`` of the block maximum and
``scale_factors``/``scaled_values`` for the data. Where the kernel departs from the formulation,
and why:

* The block maximum is taken over the transposed chunk (a reshape that splits sublanes, which
  Mosaic accepts) instead of ``reduce_max_last`` over a ``[..., K/32, 32]`` reshape: Mosaic
  refuses to split the lane dimension ("unsupported shape cast"). It is the integer maximum of
  ``|x|``'s bit patterns as in the formulation, taken before ``scale_code`` rather than after
  (the same result: ``scale_code`` is monotone), so the code is computed once per block.
* The reciprocal and the NaN flag are computed per block and broadcast to the block's 32
  sublanes, rather than computed from a broadcast code per element.
* ``MosaicOps.select`` selects booleans with logical operations: Mosaic cannot legalize a
  select of ``i1`` vectors (``rceil``'s round-up test).
* The float32 -> float8_e4m3fn conversion is Mosaic's (an instruction on v5e, an integer
  emulation on v4 and v6e). Interpret mode runs XLA:CPU's conversion of the same values, so
  bit-exactness on a TPU chip rests on Mosaic converting in-range values with round-to-nearest-
  even like XLA; every other step is integer arithmetic or a multiplication by a power of two.

Like every XLA device, a TPU flushes float32 subnormals to zero; interpret mode on XLA:CPU does
too, and the tests compare with the reference's ``ftz`` model (see ``xlabridge.mx``).

JAX is imported when this module is; ``xlabridge.mx._mosaic.lowering`` puts the kernel into torch_xla's graph.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from xlabridge.mx import _constants as C
from xlabridge.mx import _formulation
from xlabridge.mx._jax import JaxOps

LANES = 128
"""Lanes of a vector register: the width of a chunk."""
CHUNK_ROWS = 128
"""Rows of a chunk: transposed, they become the 128 lanes of the blocks' registers."""
BLOCK_SIZES = (8, 16, 32, 64, 128)
"""Block sizes the kernel handles: a block must split a chunk's 128 lanes into whole sublane tiles."""
TILE_BYTES = 2 << 20
"""Input bytes per grid step, at most: the double-buffered input, data and scale tiles then take
under 7 MiB of VMEM, and a step moves enough bytes that the grid's fixed cost per step (JAX's
Pallas TPU guide gives it) stays small."""
MIN_STEPS = 4
"""Grid steps to aim for on small inputs, so that copies in and out overlap the compute (and a
v4 or v5p chip's two TensorCores both get work)."""
SMALLEST_VMEM = 16 << 20
"""VMEM assumed when the target chip is not known: the smallest of the chips in
``xlabridge.tpu.CHIPS`` (v4's, per TensorCore)."""


INPUT_DTYPES = ("bfloat16", "float32", "float16")
"""Input dtypes the kernel takes. Mosaic has no float16 type ("Unsupported type in mosaic
dialect: 'f16'", libtpu 0.0.23), so float16 inputs reach the kernel as their 16-bit patterns
(int16, a bitcast that costs nothing) and are widened to float32 inside it (``widen_float16``)."""


def supports(block_size: int, dtype_name: str) -> bool:
    """Whether the kernel handles ``block_size`` (see ``BLOCK_SIZES``) and inputs of ``dtype_name``
    (``"bfloat16"``...; see ``INPUT_DTYPES``)."""
    return block_size in BLOCK_SIZES and dtype_name in INPUT_DTYPES


class MosaicOps(JaxOps):
    """``ArrayOps`` for Mosaic kernel bodies: ``JaxOps`` but for selects of booleans."""

    def select(self, pred, on_true, on_false):
        if getattr(on_true, "dtype", None) == jnp.bool_ and getattr(on_false, "dtype", None) == jnp.bool_:
            return (pred & on_true) | (~pred & on_false)
        return super().select(pred, on_true, on_false)


@dataclasses.dataclass(frozen=True)
class Tiles:
    """One grid step's share of the ``[L, R, K]`` input: ``leading x rows x lanes``."""

    leading: int
    rows: int
    lanes: int


def choose_tiles(shape: tuple[int, int, int], itemsize: int, block_size: int, vmem_bytes: int | None = None) -> Tiles:
    """Tiles for a ``[L, R, K]`` input of ``itemsize``-byte elements on a chip with ``vmem_bytes``
    of VMEM per TensorCore (None: ``SMALLEST_VMEM``).

    A tile takes at most ``TILE_BYTES`` of input (an eighth of VMEM where that is less), is a
    whole number of 128-row chunks (or all of a shorter ``R``), and leaves ``MIN_STEPS`` grid
    steps where the input has that many chunks. Its lanes are all of ``K`` when 128 rows of them
    fit, else a multiple of ``128 * block_size``: the scale tile's lanes must be a multiple of 128
    or all of ``K / block_size`` (Mosaic's block-shape rule).
    """
    L, R, K = shape
    budget = min(TILE_BYTES, (vmem_bytes or SMALLEST_VMEM) // 8)
    rows = min(R, CHUNK_ROWS)
    scale_lanes = LANES * block_size
    if rows * K * itemsize <= budget or K <= scale_lanes:
        lanes = K
    else:
        lanes = max(scale_lanes, budget // (rows * itemsize) // scale_lanes * scale_lanes)
    if R <= CHUNK_ROWS:
        leading = max(1, min(L, budget // (R * lanes * itemsize), -(-L // MIN_STEPS)))
        return Tiles(leading, R, lanes)
    chunks_per_tile = max(1, budget // (CHUNK_ROWS * lanes * itemsize))
    steps_wanted = -(-MIN_STEPS // (L * -(-K // lanes)))
    chunks_per_tile = max(1, min(chunks_per_tile, R // CHUNK_ROWS // steps_wanted))
    return Tiles(1, chunks_per_tile * CHUNK_ROWS, lanes)


@dataclasses.dataclass(frozen=True)
class RowsMinor:
    """Which of the kernel's arrays are stored rows-minor, ``[L, K, R]`` (``[L, K/32, R]`` for
    the scale), rather than row-major ``[L, R, K]``: where XLA:TPU's default layout of the
    array is the former (``xlabridge.tpu._layout``), the kernel reads or writes it so, and XLA
    needs no relayout. ``x`` is the input, ``data`` the float8 output, ``scale`` the scale bytes."""

    x: bool = False
    data: bool = False
    scale: bool = False


@dataclasses.dataclass(frozen=True)
class Plan:
    """How an input of ``shape`` maps onto the kernel.

    ``order`` lists the input's dimensions as the kernel views them, ``[leading..., R, K]``
    (``K`` the last, blocked, dimension; ``R`` the one XLA pairs with it in its tiles; the rest
    collapsed into ``L``), so that ``transpose(order)`` and the reshape to ``shape3`` only
    relabel memory. ``rows_minor`` says how each array is stored. ``relayouts`` says what XLA
    adds around the kernel, one kernel (a copy) each: an array (input, data or scale) whose
    default layout is neither of the kernel's, and for float16 the conversion of its bits to
    bfloat16 (Mosaic takes no 16-bit operand but bfloat16; XLA:TPU does not make that bitcast
    free). XLA makes at least ``kernel_count = 1 + len(relayouts)`` kernels of the cast (it may
    split a relayout in several: a (5, 7, 11, 32) input, one relayout, gives 4 kernels).
    """

    shape: tuple[int, ...]
    order: tuple[int, ...]
    shape3: tuple[int, int, int]
    rows_minor: RowsMinor
    relayouts: tuple[str, ...]

    @property
    def kernel_count(self) -> int:
        """Kernels XLA:TPU makes of the cast, at least: the kernel and one copy per relayout."""
        return 1 + len(self.relayouts)

    def scale_shape(self, block_size: int) -> tuple[int, ...]:
        return self.shape[:-1] + (self.shape[-1] // block_size,)


def plan(shape: tuple[int, ...], itemsize: int, block_size: int = 32, float16: bool = False) -> Plan:
    """The ``Plan`` for an input of ``shape`` with ``itemsize``-byte elements (``float16``: of
    that dtype): the kernel's view that leaves the fewest arrays for XLA to relayout, per
    XLA:TPU's default layouts of the input, the float8 data and the scale bytes
    (``xlabridge.tpu._layout``)."""
    p = _plan(tuple(int(d) for d in shape), itemsize, block_size)
    if float16:
        p = dataclasses.replace(p, relayouts=("XLA converts the float16 input to bfloat16 bits",) + p.relayouts)
    return p


_NAMES = {"x": "input", "data": "data", "scale": "scale"}


def _relayout(name: str) -> str:
    return f"XLA relayouts the {name} (its default layout is not one the kernel reads or writes)"


def _plan(shape: tuple[int, ...], itemsize: int, block_size: int) -> Plan:
    from xlabridge.tpu._layout import default_minor_to_major

    n = len(shape)
    if n == 1:
        return Plan(shape, (0,), (1, 1, shape[0]), RowsMinor(), _relayouts_1d(shape[0], itemsize, block_size))
    k = n - 1
    layouts = {  # RowsMinor's field: XLA:TPU's default layout of that array
        "x": default_minor_to_major(shape, itemsize),
        "data": default_minor_to_major(shape, 1),
        "scale": default_minor_to_major(shape[:-1] + (shape[-1] // block_size,), 1),
    }
    candidates = [n - 2] + [pair[1] if pair[0] == k else pair[0] for pair in layouts.values() if k in pair[:2]]
    best = None
    for r in dict.fromkeys(candidates):
        rest = tuple(d for d in range(n) if d not in (r, k))
        row_major, rows_minor = (k, r, *reversed(rest)), (r, k, *reversed(rest))
        minor = {name: layout == rows_minor for name, layout in layouts.items()}
        relayouts = tuple(
            _relayout(_NAMES[name]) for name, layout in layouts.items() if layout not in (row_major, rows_minor)
        )
        if best is None or len(relayouts) < len(best.relayouts):
            best = Plan(
                shape, (*rest, r, k), (math.prod(shape[d] for d in rest), shape[r], shape[k]), RowsMinor(**minor), relayouts
            )
    return best


def _relayouts_1d(k: int, itemsize: int, block_size: int) -> tuple[str, ...]:
    """Arrays of a one-dimensional cast of ``k`` elements that XLA relayouts: a 1-D array's tiles
    hold 128 x (4 / itemsize) elements (several rows of 128, packed), the kernel's ``[1, 1, K]``
    view's one row, so the two agree only up to 128 elements, and for float32 inputs."""
    names = [name for name, n, wide in (("input", k, itemsize == 4), ("data", k, False), ("scale", k // block_size, False))
             if n > LANES and not wide]
    return tuple(_relayout(name) for name in names)


def widen_float16(bits):
    """float32 values of float16 bit patterns (``int16``), exactly: normal numbers by moving
    exponent and mantissa, subnormals (``m * 2**-24``, normal in float32) by converting ``m``,
    infinities and NaNs keep their mantissa."""
    h = bits.astype(jnp.int32) & 0xFFFF
    sign = (h & 0x8000) << 16
    exponent = (h >> 10) & 0x1F
    mantissa = h & 0x3FF
    normal = ((exponent + (127 - 15)) << 23) | (mantissa << 13)
    special = C.F32_INF_BITS | (mantissa << 13)
    subnormal = lax.bitcast_convert_type(mantissa.astype(jnp.float32) * (2.0**-24), jnp.int32)
    magnitude = jnp.where(exponent == 0, subnormal, jnp.where(exponent == 0x1F, special, normal))
    return lax.bitcast_convert_type(magnitude | sign, jnp.float32)


def _loop(n: int, body, init):
    """``fori_loop`` over ``range(n)``, inlined when ``n == 1`` (a static index lets Mosaic prove
    the alignment of the slices it feeds)."""
    if n == 1:
        return body(0, init)
    return lax.fori_loop(0, n, body, init)


def _load_transposed(x_ref, leading, rows, lanes, rows_minor: bool, float16: bool):
    """The ``rows x lanes`` chunk of the input as float32, transposed: ``[lanes, rows]``.
    ``float16``: the bfloat16 input holds float16 bit patterns."""
    chunk = x_ref[leading, lanes, rows] if rows_minor else x_ref[leading, rows, lanes]
    if float16:
        chunk = widen_float16(lax.bitcast_convert_type(chunk, jnp.int16))
        return chunk if rows_minor else chunk.T
    return chunk.astype(jnp.float32) if rows_minor else chunk.T.astype(jnp.float32)


def _cast_chunk(x_ref, data_ref, codes_ref, leading, rows, lane0, width, code_row0, block_size, rounding,
                rows_minor: RowsMinor, float16: bool):
    """Cast one ``rows x width`` chunk; its scale bytes go to rows ``code_row0...`` of ``codes_ref``."""
    ops = MosaicOps()
    lanes = pl.ds(lane0, width)
    transposed = _load_transposed(x_ref, leading, rows, lanes, rows_minor.x, float16)  # [width, rows]
    n_blocks = width // block_size
    blocked = (n_blocks, block_size, transposed.shape[1])
    # the block maximum of |x|'s bit patterns as int32, as in the formulation: a NaN's pattern is
    # above every finite one's, whatever the backend's float maximum does with NaN (a float32
    # max of |x| saved 0.3-0.7 bundles per 1024 elements in libtpu's static schedule, but JAX
    # 0.11.2's interpret mode drops NaN in it: 31 NaN blocks of 64 lost their 0xFF scale byte)
    abs_bits = lax.bitcast_convert_type(transposed, jnp.int32) & C.F32_ABS_MASK
    code = _formulation.scale_code(ops, jnp.max(abs_bits.reshape(blocked), axis=1), rounding)
    codes_ref[pl.ds(code_row0, n_blocks), :] = code
    reciprocal, is_nan = _formulation.scale_factors(ops, code)
    scaled = _formulation.scaled_values(
        ops,
        transposed,
        jnp.broadcast_to(reciprocal[:, None, :], blocked).reshape(transposed.shape),
        jnp.broadcast_to(is_nan[:, None, :], blocked).reshape(transposed.shape),
    )
    if rows_minor.data:
        data_ref[leading, lanes, rows] = scaled.astype(jnp.float8_e4m3fn)
    else:
        data_ref[leading, rows, lanes] = scaled.T.astype(jnp.float8_e4m3fn)


def _kernel(x_ref, data_ref, scale_ref, codes_ref, *, block_size: int, rounding: str, unroll: int,
            rows_minor: RowsMinor, float16: bool):
    tile_leading = x_ref.shape[0]
    tile_rows, tile_lanes = (x_ref.shape[2], x_ref.shape[1]) if rows_minor.x else x_ref.shape[1:]
    strip = min(CHUNK_ROWS, tile_rows)
    n_strips = tile_rows // strip
    full_chunks, tail = divmod(tile_lanes, LANES)
    # 128 scale lanes cover this many input lanes: one row of the codes scratch per block
    span = LANES * block_size
    blocks_per_chunk = LANES // block_size

    def cast_strip(leading, row0):
        rows = pl.ds(row0, strip)
        for span_index in range(-(-tile_lanes // span)):
            first = span_index * span
            chunks = max(0, min(span, full_chunks * LANES - first) // LANES)
            step = next(d for d in range(min(unroll, max(chunks, 1)), 0, -1) if chunks % d == 0)

            def body(i, carry, first=first, step=step):
                for k in range(step):
                    c = i * step + k
                    lane0 = pl.multiple_of(first + c * LANES, LANES)
                    _cast_chunk(x_ref, data_ref, codes_ref, leading, rows, lane0, LANES, c * blocks_per_chunk,
                                block_size, rounding, rows_minor, float16)
                return carry

            if chunks:
                _loop(chunks // step, body, 0)
            if tail and first + span >= tile_lanes:
                _cast_chunk(x_ref, data_ref, codes_ref, leading, rows, full_chunks * LANES, tail,
                            chunks * blocks_per_chunk, block_size, rounding, rows_minor, float16)
            width = min(LANES, (tile_lanes - first) // block_size)
            scale_lanes = pl.ds(span_index * LANES, width)
            if rows_minor.scale:
                scale_ref[leading, scale_lanes, rows] = codes_ref[:width, :].astype(jnp.uint8)
            else:
                scale_ref[leading, rows, scale_lanes] = codes_ref[...].T[:, :width].astype(jnp.uint8)

    def per_leading(leading, carry):
        def per_strip(i, carry):
            cast_strip(leading, pl.multiple_of(i * strip, strip) if n_strips > 1 else 0)
            return carry

        return _loop(n_strips, per_strip, carry)

    _loop(tile_leading, per_leading, 0)


UNROLL = 16
"""Chunks per loop iteration, at most: independent work for libtpu's scheduler to overlap one
chunk's transposes with another's arithmetic. 16 takes fewer bundles per element than 8 in
libtpu's static schedule (``tools/bench/mx_cast_tpu.py``, docs/benchmarks.md), for about twice
the compile time; more unrolls a whole span and compiles slower still."""


def stored_shape(shape3: tuple[int, int, int], rows_minor: bool) -> tuple[int, int, int]:
    """The stored shape of a ``[L, R, K]`` array: ``[L, K, R]`` when ``rows_minor``."""
    return (shape3[0], shape3[2], shape3[1]) if rows_minor else shape3


def _block_spec(block: tuple[int, int, int], rows_minor: bool):
    if rows_minor:
        return pl.BlockSpec((block[0], block[2], block[1]), lambda a, i, j: (a, j, i))
    return pl.BlockSpec(block, lambda a, i, j: (a, i, j))


def cast_3d(x, block_size: int, rounding: str, tiles: Tiles, interpret: bool = False,
            rows_minor: RowsMinor = RowsMinor(), float16: bool = False):
    """``(data, scale)`` of an ``[L, R, K]`` array from one ``pallas_call``, each array stored as
    ``rows_minor`` says (``x`` given, and the outputs returned, in their stored shapes). ``x`` is
    bfloat16 or float32; ``float16=True``: bfloat16 holding float16 bit patterns (Mosaic takes no
    float16 or int16 arguments, "Only arguments with float8..., bfloat16 or 32-bit element types
    are supported", libtpu 0.0.23; the two 16-bit types share XLA:TPU's tiles, so the bitcast is free)."""
    L, K, R = x.shape if rows_minor.x else (x.shape[0], x.shape[2], x.shape[1])
    shape3, scale3 = (L, R, K), (L, R, K // block_size)
    grid = (pl.cdiv(L, tiles.leading), pl.cdiv(R, tiles.rows), pl.cdiv(K, tiles.lanes))
    kernel = functools.partial(_kernel, block_size=block_size, rounding=rounding, unroll=UNROLL, rows_minor=rows_minor,
                               float16=float16)
    block = (tiles.leading, tiles.rows, tiles.lanes)
    return pl.pallas_call(
        kernel,
        grid=grid,
        in_specs=[_block_spec(block, rows_minor.x)],
        out_specs=[
            _block_spec(block, rows_minor.data),
            _block_spec((tiles.leading, tiles.rows, tiles.lanes // block_size), rows_minor.scale),
        ],
        out_shape=[
            jax.ShapeDtypeStruct(stored_shape(shape3, rows_minor.data), jnp.float8_e4m3fn),
            jax.ShapeDtypeStruct(stored_shape(scale3, rows_minor.scale), jnp.uint8),
        ],
        scratch_shapes=[pltpu.VMEM((LANES, min(CHUNK_ROWS, tiles.rows)), jnp.int32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel")),
        cost_estimate=pl.CostEstimate(
            flops=0, transcendentals=0, bytes_accessed=x.size * x.dtype.itemsize + x.size + x.size // block_size
        ),
        interpret=interpret,
        name="xlabridge_mxfp8_cast",
    )(x)


def as_3d(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """``[L, R, K]`` of a row-major ``shape``: all but the two minor dimensions collapsed."""
    if len(shape) == 1:
        return (1, 1, shape[0])
    return (math.prod(shape[:-2]), shape[-2], shape[-1])


def stored_input_order(p: Plan) -> tuple[int, ...]:
    """The input's dimensions in the order the kernel reads them (``Plan.order``, with ``R`` and
    ``K`` swapped where the input is stored rows-minor)."""
    return p.order[:-2] + p.order[-2:][::-1] if p.rows_minor.x else p.order


def output_orders(p: Plan, block_size: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """For the kernel's stored data and scale: the shape to reshape each to (its stored
    dimensions, uncollapsed) and the permutation that takes that back to the logical order."""
    if len(p.shape) == 1:
        return p.shape, (0,), p.scale_shape(block_size), (0,)
    lead = tuple(p.shape[d] for d in p.order[:-2])
    r, k = p.order[-2:]
    out = []
    for logical_shape, rows_minor in ((p.shape, p.rows_minor.data), (p.scale_shape(block_size), p.rows_minor.scale)):
        order = p.order[:-2] + ((k, r) if rows_minor else (r, k))
        unflat = lead + tuple(logical_shape[d] for d in order[-2:])
        out += [unflat, tuple(order.index(d) for d in range(len(order)))]
    return tuple(out)


def to_mxfp8(x, block_size: int = 32, rounding: str = "floor", *, vmem_bytes: int | None = None,
             tiles: Tiles | None = None, interpret: bool = False, rows_minor: RowsMinor | None = None):
    """``(data, scale)`` of JAX array ``x`` (bfloat16, float32 or float16, any leading shape) from
    one Mosaic kernel, built over XLA:TPU's default layouts of ``x`` and the outputs (``plan``).
    ``vmem_bytes`` (the target chip's VMEM per core) sizes the tiles, or ``tiles`` gives them;
    ``rows_minor`` overrides the plan's storage (to test every variant); ``interpret=True`` runs
    the kernel's semantics on any backend.

    A plain function around a jitted one, so that it pickles by reference (``xlabridge.tpu``'s
    ``compile_jax`` lowers it in a worker process)."""
    if block_size not in BLOCK_SIZES:
        raise ValueError(f"block_size must be one of {BLOCK_SIZES} for the Mosaic kernel, got {block_size}")
    if jnp.dtype(x.dtype).name not in INPUT_DTYPES:
        raise TypeError(f"x must be bfloat16, float32 or float16 for the Mosaic kernel, got {x.dtype}")
    if x.ndim == 0 or x.shape[-1] % block_size:
        raise ValueError(f"the last dimension of x (shape {x.shape}) must be a multiple of block_size ({block_size})")
    return _to_mxfp8(x, block_size, rounding, vmem_bytes, tiles, interpret, rows_minor)


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4, 5, 6))
def _to_mxfp8(x, block_size, rounding, vmem_bytes, tiles, interpret, rows_minor):
    p = plan(x.shape, x.dtype.itemsize, block_size)
    if rows_minor is not None:
        p = dataclasses.replace(p, rows_minor=rows_minor)
    tiles = tiles or choose_tiles(p.shape3, x.dtype.itemsize, block_size, vmem_bytes)
    float16 = x.dtype == jnp.float16
    if float16:
        x = lax.bitcast_convert_type(x, jnp.bfloat16)
    stored = jnp.transpose(x, stored_input_order(p)).reshape(stored_shape(p.shape3, p.rows_minor.x))
    data, scale = cast_3d(stored, block_size, rounding, tiles, interpret, p.rows_minor, float16)
    data_shape, data_perm, scale_shape, scale_perm = output_orders(p, block_size)
    return jnp.transpose(data.reshape(data_shape), data_perm), jnp.transpose(scale.reshape(scale_shape), scale_perm)
