"""The MXFP4 matmul on TPUs: one Mosaic kernel that reads the weight as MXFP4 bytes and dequantizes it
tile by tile into VMEM, where the MXU takes it.

``y[a] = x[a] @ W[e].T (+ bias[e])``, ``e = ids[a]`` (scalar-prefetched, so the grid reads only the
chosen experts' tiles) or ``a``. Grid ``(A, N / tn, K / tk)``, ``K`` innermost: each step decodes a
``tk x tn`` weight tile into a float32 scratch ``Wt`` (``K`` along the sublanes, ``N`` along the lanes:
the MXU's right-hand operand as it takes it; 128 columns at a time), then adds ``x @ Wt`` (bfloat16 operands, float32
accumulation) into an accumulator that the last ``K`` step rounds into ``y``. ``x``'s rows stay whole
(decode has a few).

Decoding a tile. The weight's two elements of a byte are ``K`` indices ``2i`` and ``2i + 1``: in the
``K``-major layout they are neighbouring sublanes of ``Wt``, so a chunk of 128 packed rows is decoded
as its low and high nibbles (``e2m1_values``, elementwise) and written to the even and odd rows of
256 rows of ``Wt`` (strided stores): no lane shuffles. Each block's two scale factors
(``split_scale``: exact in float32, as the other TPU kernels) are spread down the block's 16 packed
rows (a sublane broadcast).

Storage. XLA:TPU's default layout of the weight (``[E, N, K/2]`` bytes) is ``K``-major (``[E, K/2,
N]``) where that pads its tiles less, as for gpt-oss's ``[32, 5760, 1440]``, and row-major for
shapes that tile evenly either way (``fp4.plan``'s rule, ``Layouts``): a ``K``-major weight is read
as it lies; a row-major one is read in 128 x 128 byte blocks, each transposed once, and its scale
tile per 128 rows likewise. The scale bytes follow their own default layout the same way.
"""

from __future__ import annotations

import dataclasses
import enum
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from xlabridge.mx import _constants as C
from xlabridge.mx import _formulation
from xlabridge.mx._mosaic import hbm
from xlabridge.mx._mosaic.rows import LANES, MosaicOps

BLOCK_SIZE = 32
CHUNK_BYTES = LANES
"""Packed rows decoded at a time: 128 bytes, 256 elements of ``K``, 8 blocks."""
TN = 256
"""Output columns (weight rows) per grid step."""
MAX_TK = 8192
"""``K`` per grid step at most, so the float32 ``Wt`` tile stays a few MiB of VMEM."""


class Storage(str, enum.Enum):
    """How XLA:TPU lays out an ``[E, N, C]`` weight array (``C`` the packed bytes or the scale bytes
    of ``K``) in HBM, major to minor."""

    ROWS = "rows"
    """``[E, N, C]``: a weight row's bytes contiguous (row-major)."""
    K_MAJOR = "k_major"
    """``[E, C, N]``: ``N`` along the lanes; blocks of it are the kernel's ``Wt`` tiles as they lie."""
    OUTER = "outer"
    """``[C, E, N]``: ``C`` outermost, the experts second-minor (for ``E`` a multiple of 8 and ``C`` not,
    such as gpt-oss's 32 experts' 90 scale bytes per row). One expert's rows are no legal block (nor
    DMA window: the experts are the second-minor of the HBM tiles), so the kernel takes the array as
    ``[C * E, N]`` (the same bytes) in blocks of every expert's rows of a column tile, read once per
    tile (the grid walks the groups innermost), and picks an expert's rows with a strided load."""


_MINOR_TO_MAJOR = {(2, 1, 0): Storage.ROWS, (1, 2, 0): Storage.K_MAJOR, (1, 0, 2): Storage.OUTER}


@dataclasses.dataclass(frozen=True)
class WeightLayouts:
    """The ``Storage`` of the packed weight and of its scale bytes."""

    data: Storage
    scale: Storage


def storage(shape: tuple[int, ...]) -> Storage | None:
    """The ``Storage`` of a uint8 array of ``shape`` (``[N, C]`` or ``[E, N, C]``) under XLA:TPU's
    default layout (``xlabridge.tpu._layout``); None where it is none of them (XLA then relayouts it)."""
    from xlabridge.tpu._layout import default_minor_to_major

    layout = default_minor_to_major(tuple(shape), 1)
    if len(shape) == 2:
        return {(1, 0): Storage.ROWS, (0, 1): Storage.K_MAJOR}.get(layout)
    return _MINOR_TO_MAJOR.get(layout)


def weight_layouts(n: int, k: int, experts: int | None) -> WeightLayouts | None:
    """XLA:TPU's default storage of an MXFP4 weight ``[experts, n, k]`` (``experts`` None: 2-D ``[n, k]``),
    or None where the kernel reads neither array's."""
    lead = () if experts is None else (experts,)
    data, scale = storage(lead + (n, k // 2)), storage(lead + (n, k // BLOCK_SIZE))
    return None if data is None or scale is None else WeightLayouts(data, scale)


def stored(a, layout: Storage):
    """An ``[E, N, C]`` array as the kernel takes it: in its physical order (free in XLA), ``OUTER``
    as ``[C * E, N]``."""
    if layout is Storage.OUTER:
        return jnp.transpose(a, (2, 0, 1)).reshape(a.shape[2] * a.shape[0], a.shape[1])
    return jnp.swapaxes(a, 1, 2) if layout is Storage.K_MAJOR else a


def tiles_for(n: int, k: int) -> tuple[int, int]:
    """``(tn, tk)``: ``tn`` ``TN`` (or all of an ``n`` up to it); ``tk`` all of ``K`` up to
    ``MAX_TK``, else 4096 (a row-major scale tile's lanes must be 128 blocks or all of them)."""
    tn = n if n <= TN else TN
    tk = k if k <= MAX_TK or k % 4096 else 4096
    return tn, tk


def _decode_chunk(packed, first_factor, second_factor, is_nan, wt_ref, group, row0):
    """Write the values of ``packed`` (int32 ``[bytes, <= 128]``, K-major) to rows ``row0 + 2i`` (low
    nibbles) and ``row0 + 2i + 1`` (high) of ``wt_ref[group]`` (Mosaic's strided stores want a
    128-lane scratch, hence ``Wt`` as ``[tn / 128, tk, 128]``)."""
    ops = MosaicOps()
    width, lanes = packed.shape
    blocked = (width * 2 // BLOCK_SIZE, BLOCK_SIZE // 2, lanes)
    spread = lambda a: jnp.broadcast_to(a[:, None, :], blocked).reshape(packed.shape)  # noqa: E731
    for parity, nibble in ((0, packed & 15), (1, packed >> 4)):
        values = _formulation.e2m1_values(ops, nibble) * spread(first_factor) * spread(second_factor)
        wt_ref.at[group][pl.ds(row0 + parity, width, stride=2), pl.ds(0, lanes)] = jnp.where(
            spread(is_nan), jnp.float32(jnp.nan), values)


def _kernel(*refs, has_ids: bool, has_bias: bool, layouts: WeightLayouts, k_steps: int, tn: int, tk: int):
    ids_ref = refs[0] if has_ids else None
    refs = list(refs[1:] if has_ids else refs)
    x_ref, w_ref, s_ref = refs[:3]
    bias_ref = refs[3] if has_bias else None
    out_ref, acc_ref, wt_ref, codes_ref, *outer = refs[3 + has_bias:]
    ops = MosaicOps()
    a, k = pl.program_id(1), pl.program_id(2)
    e = ids_ref[a] if has_ids else a
    tk_bytes, n_blocks = tk // 2, tk // BLOCK_SIZE
    groups = [(g, min(LANES, tn - g * LANES)) for g in range(-(-tn // LANES))]

    @pl.when(k == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    # the tile's scale bytes as int32 [blocks, tn] (K-major), for dynamic row slices per chunk
    if layouts.scale is Storage.OUTER:
        (all_codes_ref,) = outer
        experts = s_ref.shape[0] // n_blocks

        @pl.when(a == 0)  # the grid walks the groups of one column tile innermost: convert its bytes once
        def _():
            for g, width in groups:
                all_codes_ref.at[g][:, pl.ds(0, width)] = s_ref[:, pl.ds(g * LANES, width)].astype(jnp.int32)

        for g, width in groups:
            codes_ref[:n_blocks, pl.ds(g * LANES, width)] = all_codes_ref.at[g][pl.ds(e, n_blocks, stride=experts),
                                                                             pl.ds(0, width)]
    elif layouts.scale is Storage.K_MAJOR:
        codes_ref[:n_blocks, :] = s_ref[0].astype(jnp.int32)
    else:
        for g, width in groups:
            codes_ref[:n_blocks, pl.ds(g * LANES, width)] = s_ref[0, pl.ds(g * LANES, width), :].astype(jnp.int32).T

    def decode(byte0, block0, width, g, lanes):
        columns = pl.ds(g * LANES, lanes)
        codes = codes_ref[pl.ds(block0, width * 2 // BLOCK_SIZE), columns]
        first_factor, second_factor = _formulation.split_scale(ops, codes)
        if layouts.data is Storage.ROWS:
            packed = w_ref[0, columns, pl.ds(byte0, width)].astype(jnp.int32).T
        else:
            packed = w_ref[0, pl.ds(byte0, width), columns].astype(jnp.int32)
        _decode_chunk(packed, first_factor, second_factor, codes == C.E8M0_NAN, wt_ref, g, 2 * byte0)

    full, tail = divmod(tk_bytes, CHUNK_BYTES)
    for g, lanes in groups:
        def body(c, carry, g=g, lanes=lanes):
            decode(pl.multiple_of(c * CHUNK_BYTES, CHUNK_BYTES), pl.multiple_of(c * (CHUNK_BYTES * 2 // BLOCK_SIZE), 8),
                   CHUNK_BYTES, g, lanes)
            return carry

        if full:
            lax.fori_loop(0, full, body, 0)
        if tail:
            decode(full * CHUNK_BYTES, full * (CHUNK_BYTES * 2 // BLOCK_SIZE), tail, g, lanes)
        columns = pl.ds(g * LANES, LANES)
        acc_ref[:, columns] += jnp.dot(x_ref[0], wt_ref[g].astype(x_ref.dtype), preferred_element_type=jnp.float32)

    @pl.when(k == k_steps - 1)
    def _():
        result = acc_ref[:, :tn]
        if has_bias:
            row = lax.rem(e, bias_ref.shape[0]) if bias_ref.shape[0] > 1 else 0
            result = result + bias_ref[pl.ds(row, 1), :].astype(jnp.float32)
        out_ref[0] = result.astype(out_ref.dtype)


def supports(layouts: WeightLayouts | None, k: int) -> bool:
    """Whether the kernel reads a weight stored so: its bytes ``ROWS`` or ``K_MAJOR``, its scale bytes
    any ``Storage`` (``OUTER`` with one ``K`` step, ``k <= MAX_TK``)."""
    if layouts is None or layouts.data is Storage.OUTER:
        return False
    return layouts.scale is not Storage.OUTER or tiles_for(1 << 30, k)[1] == k


def _weight_spec(layout: Storage, rows: int, tn: int, index, array):
    """The BlockSpec of a weight array (``rows`` of ``C`` per step) in its ``Storage``."""
    if layout is Storage.OUTER:  # [C * E, N]: every expert's rows of a column tile (one K step)
        return pl.BlockSpec((array.shape[0], tn), index(lambda e, a, n, k: (0, n)))
    if layout is Storage.K_MAJOR:
        return pl.BlockSpec((1, rows, tn), index(lambda e, a, n, k: (e, k, n)))
    return pl.BlockSpec((1, tn, rows), index(lambda e, a, n, k: (e, n, k)))


def matmul(x, data, scale, ids=None, bias=None, *, layouts: WeightLayouts, pin_hbm: bool = False, interpret=False):
    """``y`` ``[A, M, N]`` (``x``'s dtype) of ``x`` ``[A, M, K]`` (bfloat16) and the MXFP4 weight in its
    stored order (``stored``: ``data`` ``[E, N, K/2]`` transposed as ``layouts.data`` says, ``scale``
    likewise), ``ids`` ``[A]`` int32 or None, ``bias`` ``[E, N]`` float32 or None, from one
    ``pallas_call`` (``pin_hbm``: every array in HBM, ``hbm.py``). Grid ``(N / tn, A, K / tk)``: the
    groups of one column tile run in a row."""
    A, M, K = x.shape
    N = data.shape[1] if layouts.data is Storage.ROWS else data.shape[2]
    if not supports(layouts, K):
        raise ValueError(f"the MXFP4 Mosaic matmul does not read a weight stored as {layouts} with K = {K}")
    tn, tk = tiles_for(N, K)
    k_steps = K // tk
    has_ids, has_bias = ids is not None, bias is not None

    def index(fn):
        if has_ids:
            return lambda n, a, k, ids_ref: fn(ids_ref[a], a, n, k)
        return lambda n, a, k: fn(a, a, n, k)

    in_specs = [pl.BlockSpec((1, M, tk), index(lambda e, a, n, k: (a, 0, k))),
                _weight_spec(layouts.data, tk // 2, tn, index, data),
                _weight_spec(layouts.scale, tk // BLOCK_SIZE, tn, index, scale)]
    operands = [x, data, scale]
    if has_bias:  # [E, N] as it is stored: the 8 rows holding expert e (a block's rows are 8 or all of E)
        rows = 8 if bias.shape[0] % 8 == 0 else bias.shape[0]
        in_specs.append(pl.BlockSpec((rows, tn), index(lambda e, a, n, k: (lax.div(e, rows), n))))
        operands.append(bias)
    n_blocks = tk // BLOCK_SIZE
    groups = -(-tn // LANES)
    scratch = [pltpu.VMEM((M, groups * LANES), jnp.float32), pltpu.VMEM((groups, tk, LANES), jnp.float32),
               pltpu.VMEM((-(-n_blocks // 8) * 8, tn), jnp.int32)]
    outer_scale = layouts.scale is Storage.OUTER
    if outer_scale:
        scratch += [pltpu.VMEM((groups, scale.shape[0], LANES), jnp.int32)]
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1 if has_ids else 0,
        grid=(pl.cdiv(N, tn), A, k_steps),
        in_specs=in_specs,
        out_specs=pl.BlockSpec((1, M, tn), index(lambda e, a, n, k: (a, 0, n))),
        scratch_shapes=scratch,
    )
    weight_bytes = A * N * K // 2 + (scale.size if outer_scale else A * N * K // BLOCK_SIZE)
    kernel = functools.partial(_kernel, has_ids=has_ids, has_bias=has_bias, layouts=layouts, k_steps=k_steps,
                               tn=tn, tk=tk)
    pin = pin_hbm and not interpret  # HBM is the TPU compile's; the interpreter (jax 0.7.1) refuses it
    return pl.pallas_call(
        kernel,
        grid_spec=grid_spec,
        out_shape=hbm.result(pin, (A, M, N), x.dtype),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary" if outer_scale else "parallel", "arbitrary"),
            vmem_limit_bytes=_vmem_limit(M, tn, tk, scale.shape[0] // n_blocks if outer_scale else 0)),
        cost_estimate=pl.CostEstimate(flops=2 * A * M * N * K, transcendentals=0,
                                      bytes_accessed=weight_bytes + x.size * x.dtype.itemsize * -(-N // tn)
                                      + A * M * N * x.dtype.itemsize),
        interpret=interpret,
        name="xlabridge_mxfp4_matmul",
    )(*hbm.operands(pin, *([ids] if has_ids else []), *operands))


def _vmem_limit(m: int, tn: int, tk: int, experts: int) -> int:
    """Scoped VMEM for one step, twice over (double-buffered inputs, the float32 tiles, every expert's
    scale window where the scale is ``OUTER``, headroom)."""
    need = 2 * (m * tk * 2 + tk // 2 * tn + tk // BLOCK_SIZE * tn + m * tn * 2) + (m * tn + tk * tn + tk // 8 * tn) * 4
    need += experts * tk // BLOCK_SIZE * tn * 5
    return min(max(2 * need, 16 << 20), 64 << 20)


def linear(x, data, scale, bias=None, *, pin_hbm: bool = False, interpret=False):
    """JAX entry (tests, the TPU view): ``x`` ``[..., K]`` bfloat16 times a 2-D MXFP4 weight ``data``
    ``[N, K/2]``, ``scale`` ``[N, K/32]`` (logical shapes), stored as XLA:TPU would by default;
    ``pin_hbm``: ``hbm.pins`` of the TPU it is compiled for."""
    return _linear(x, data, scale, bias, pin_hbm, interpret)


@functools.partial(jax.jit, static_argnums=(4, 5))
def _linear(x, data, scale, bias, pin_hbm, interpret):
    n, k = data.shape[0], 2 * data.shape[1]
    layouts = weight_layouts(n, k, None)
    y = matmul(x.reshape(1, -1, k), stored(data[None], layouts.data), stored(scale[None], layouts.scale), None,
               None if bias is None else bias.reshape(1, n).astype(jnp.float32), layouts=layouts, pin_hbm=pin_hbm,
               interpret=interpret)
    return y.reshape(x.shape[:-1] + (n,))


def expert_linear(x, data, scale, ids=None, bias=None, *, pin_hbm: bool = False, interpret=False):
    """JAX entry: ``x`` ``[A, M, K]`` times experts ``ids`` of ``data`` ``[E, N, K/2]``, ``scale``
    ``[E, N, K/32]`` (``bias`` ``[E, N]``), stored as XLA:TPU would by default (``pin_hbm``: as
    ``linear``'s)."""
    return _expert_linear(x, data, scale, ids, bias, pin_hbm, interpret)


@functools.partial(jax.jit, static_argnums=(5, 6))
def _expert_linear(x, data, scale, ids, bias, pin_hbm, interpret):
    e, n, k = data.shape[0], data.shape[1], 2 * data.shape[2]
    layouts = weight_layouts(n, k, e)
    return matmul(x, stored(data, layouts.data), stored(scale, layouts.scale), None if ids is None else ids.astype(jnp.int32),
                  None if bias is None else bias.astype(jnp.float32), layouts=layouts, pin_hbm=pin_hbm,
                  interpret=interpret)
