"""The MXFP8 and MXFP4 casts, written once over a small set of array operations.

MXFP4 (``cast_blocks_fp4``, ``e2m1_codes``, ``pack_nibbles`` and the inverse) shares the scale rule
(``scale_code`` with E2M1's emax_elem and maximum) and the exact power-of-two factors; its element
rounding is integer arithmetic on float32 bits and one float addition (``e2m1_codes`` says how).

The same code builds the XLA computation (through torch_xla's XlaBuilder, ``_xla.py``), the
JAX version used to check XLA:GPU (``_jax.py``), and the eager PyTorch path (``_torch_ops.py``):
each supplies an ``ArrayOps`` adapter. The Pallas (``_pallas.py``) and Mosaic (``_mosaic.py``)
kernel bodies call it too; the Mosaic kernel's departures are listed in its docstring. One source keeps the three bit-identical and means
the XLA:GPU fusion count measured through JAX is that of the very formulation torch_xla runs.

Why it is written this way:

* The block maximum is an integer maximum of ``|x|``'s float32 bit patterns. Non-negative
  floats order like their bit patterns, NaN patterns sit above +Inf, and integer max has no
  NaN semantics to lose: a float max-reduction on XLA may drop NaN (fast min/max), this can't.
* The scale byte is a monotone function of ``|x|`` (exponent field minus 8 for ``floor``; the
  float32 product with fl(1/448) rounded up to a power of two for ``rceil``; 0xFF for Inf and
  NaN). So the block's scale is the max over the block of the per-element scale byte: the
  scale is a plain max-reduction with no epilogue, whose output is the ``scale`` result itself.
* Division by the scale is a multiplication by 2**(127 - byte) built from its bits; for every
  finite block byte <= 247, so the factor is a normal float32 and the product is exact. The one
  rounding is the float32 -> float8_e4m3fn conversion (round to nearest even).
* ``strategy="two_pass"`` (the default everywhere) broadcasts the reduction result back to the
  block: the fewest operations. XLA makes two kernels of it on CPU (one per output: XLA:CPU's
  multi-output fusion is off by default and, when on, merges only same-shape outputs, which
  data [..., K] and scale [..., K/32] are not) and three on GPU.
* ``strategy="recompute"`` computes the data from a second, reduce-free block maximum (a chain
  of elementwise maxima over the block's slices) instead of the reduction result, so the data
  can be an extra output of the reduction's fusion. XLA:GPU does put it there, but computes the
  per-block maximum in a separate kernel rather than once per element: two kernels, and slower
  than two_pass. ``recompute_wide`` broadcasts each slice first so no per-block intermediate
  exists; XLA:GPU still splits it. Measured in tools/bench/results/mx_cast.json; the one-
  kernel XLA:GPU cast is the Pallas kernel of ``_pallas.py``, whose body is this code.
"""

from __future__ import annotations

from typing import Any, Protocol

from xlabridge.mx import _constants as C

STRATEGIES = ("two_pass", "recompute", "recompute_wide")

# Integer view and magnitude mask of each input float type: |x| orders like its bit pattern.
_BITS = {"f32": ("s32", C.F32_ABS_MASK), "bf16": ("s16", C.HALF_ABS_MASK), "f16": ("s16", C.HALF_ABS_MASK)}

Array = Any


class ArrayOps(Protocol):
    """What the formulation needs from an array library. dtypes: f32, bf16, f16, s32, s16, u8, f8e4m3fn.

    Binary operations accept a Python number for either operand.
    """

    def convert(self, a: Array, dtype: str) -> Array: ...
    def bitcast(self, a: Array, dtype: str) -> Array: ...
    def add(self, a: Array, b: Array) -> Array: ...
    def sub(self, a: Array, b: Array) -> Array: ...
    def mul(self, a: Array, b: Array) -> Array: ...
    def bit_and(self, a: Array, b: Array) -> Array: ...
    def shift_right(self, a: Array, bits: int) -> Array: ...
    def div_int(self, a: Array, b: int) -> Array: ...
    def shift_left(self, a: Array, bits: int) -> Array: ...
    def maximum(self, a: Array, b: Array) -> Array: ...
    def eq(self, a: Array, b: Array) -> Array: ...
    def ne(self, a: Array, b: Array) -> Array: ...
    def ge(self, a: Array, b: Array) -> Array: ...
    def gt(self, a: Array, b: Array) -> Array: ...
    def select(self, pred: Array, on_true: Array, on_false: Array) -> Array: ...
    def clamp(self, a: Array, lo: float, hi: float) -> Array: ...
    def reduce_max_last(self, a: Array) -> Array: ...
    def slice_last(self, a: Array, index: int) -> Array: ...
    def expand_last(self, a: Array, size: int) -> Array: ...
    def bit_or(self, a: Array, b: Array) -> Array: ...
    def split_pairs(self, a: Array) -> tuple[Array, Array]:
        """Elements ``0::2`` and ``1::2`` of the last dimension (of even size)."""
    def interleave_pairs(self, even: Array, odd: Array) -> Array:
        """The inverse of ``split_pairs``: ``[..., n]`` twice -> ``[..., 2n]``."""


def scale_code(ops: ArrayOps, abs_bits: Array, rounding: str, fmt: C.ElementFormat = C.E4M3) -> Array:
    """E8M0 byte (as s32) for a block whose ``|x|`` maximum has float32 bits ``abs_bits``, for
    elements of format ``fmt`` (float8_e4m3fn by default; ``C.E2M1`` for MXFP4).

    Monotone non-decreasing in ``abs_bits``, so it may be applied per element before the
    block maximum as well as after it.
    """
    if rounding == C.Rounding.FLOOR:
        # Spec 6.3: X = largest power of two <= amax, divided by 2**emax_elem; clamped to 2**-127.
        exponent = ops.shift_right(abs_bits, C.F32_MANTISSA_BITS)
        code = ops.maximum(ops.sub(exponent, fmt.emax), 0)
    elif rounding == C.Rounding.RCEIL:
        descale = ops.mul(ops.bitcast(abs_bits, "f32"), fmt.rceil_reciprocal)
        bits = ops.bitcast(descale, "s32")
        exponent = ops.shift_right(bits, C.F32_MANTISSA_BITS)
        mantissa = ops.bit_and(bits, C.F32_MANTISSA_MASK)
        # Round up to a power of two: a normal float goes up unless it is one already; a
        # subnormal goes to 2**-126 (byte 1) only if it is above 2**-127 (byte 0).
        round_up = ops.select(
            ops.eq(exponent, 0),
            ops.gt(mantissa, C.F32_HALF_SUBNORMAL_MANTISSA),
            ops.ne(mantissa, 0),
        )
        code = ops.add(exponent, ops.convert(round_up, "s32"))
    else:
        raise ValueError(f"rounding must be one of {C.ROUNDING_MODES}, got {rounding!r}")
    return ops.select(ops.ge(abs_bits, C.F32_INF_BITS), C.E8M0_NAN, code)


def scale_factors(ops: ArrayOps, code: Array) -> tuple[Array, Array]:
    """``(reciprocal, is_nan)`` of scale bytes ``code`` (s32): the float32 factor 2**(127 - code)
    that divides by the scale, and whether the block is NaN (byte 0xFF)."""
    reciprocal = ops.bitcast(ops.shift_left(ops.sub(2 * C.E8M0_BIAS, code), C.F32_MANTISSA_BITS), "f32")
    return reciprocal, ops.eq(code, C.E8M0_NAN)


def scaled_values(ops: ArrayOps, x32: Array, reciprocal: Array, is_nan: Array) -> Array:
    """The float32 values the data bytes encode: ``x32`` times its block's ``reciprocal``, saturated
    at +-448, NaN throughout a NaN block (factors broadcast to ``x32``'s shape)."""
    scaled = ops.clamp(ops.mul(x32, reciprocal), -C.E4M3_MAX, C.E4M3_MAX)
    return ops.select(is_nan, float("nan"), scaled)


def _scaled_data(ops: ArrayOps, x32: Array, code: Array) -> Array:
    """float8_e4m3fn data of blocks ``x32`` (f32) under broadcast scale bytes ``code`` (s32)."""
    return ops.convert(scaled_values(ops, x32, *scale_factors(ops, code)), "f8e4m3fn")


def _recomputed_code(ops: ArrayOps, blocks: Array, input_dtype: str, block_size: int, rounding: str, wide: bool) -> Array:
    """Per-block scale byte (s32) from an elementwise chain of maxima over the block's slices."""
    int_dtype, mask = _BITS[input_dtype]
    bits = ops.bit_and(ops.bitcast(blocks, int_dtype), mask)
    columns = [ops.slice_last(bits, index) for index in range(block_size)]
    if wide:
        columns = [ops.expand_last(column, block_size) for column in columns]
    block_max = columns[0]
    for column in columns[1:]:
        block_max = ops.maximum(block_max, column)
    f32_bits = ops.bitcast(ops.convert(ops.bitcast(block_max, input_dtype), "f32"), "s32")
    code = scale_code(ops, f32_bits, rounding)
    return code if wide else ops.expand_last(code, block_size)


def split_scale(ops: ArrayOps, code: Array) -> tuple[Array, Array]:
    """Two normal float32 factors whose product is the scale 2**(code - 127) (code <= 254).

    Dequantizing multiplies by both: 2**-127 itself is a float32 subnormal, which XLA on CPU
    and TPU would read as zero; each half of the exponent stays within +-64.
    """
    exponent = ops.sub(code, C.E8M0_BIAS)
    first = ops.div_int(exponent, 2)
    second = ops.sub(exponent, first)
    return (
        ops.bitcast(ops.shift_left(ops.add(first, C.E8M0_BIAS), C.F32_MANTISSA_BITS), "f32"),
        ops.bitcast(ops.shift_left(ops.add(second, C.E8M0_BIAS), C.F32_MANTISSA_BITS), "f32"),
    )


def cast_blocks(
    ops: ArrayOps, blocks: Array, input_dtype: str, block_size: int, rounding: str, strategy: str
) -> tuple[Array, Array]:
    """MXFP8-cast ``blocks`` (shape ``[..., nblocks, block_size]``, of float type ``input_dtype``:
    f32, bf16 or f16).

    Returns ``(data, scale)``: float8_e4m3fn of the same shape, and u8 E8M0 bytes of shape
    ``[..., nblocks]``.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    x32 = ops.convert(blocks, "f32")
    abs_bits = ops.bit_and(ops.bitcast(x32, "s32"), C.F32_ABS_MASK)
    scale = ops.reduce_max_last(ops.convert(scale_code(ops, abs_bits, rounding), "u8"))
    if strategy == "two_pass":
        code = ops.expand_last(ops.convert(scale, "s32"), block_size)
    else:
        code = _recomputed_code(ops, blocks, input_dtype, block_size, rounding, wide=strategy == "recompute_wide")
    return _scaled_data(ops, x32, code), scale


# ----------------------------------------------------------------------------- MXFP4

# float32 fields that the E2M1 rounding reads: the exponent field and the mantissa's top bit sit
# at bit 22 and up, so (bits >> 22) is (exponent << 1 | top mantissa bit).
_F32_ONE_BITS = 0x3F80_0000
_TOP_MANTISSA_SHIFT = 22
_HALF_TOP_MANTISSA_LESS_ONE = (1 << (_TOP_MANTISSA_SHIFT - 1)) - 1  # half the kept bit, less one: ties go down
# (bits >> 22) of 1.0 is 254 and 1.0 is E2M1 code 2: code = (bits >> 22) - 252 for |v| in [1, 8)
_E2M1_CODE_OFFSET = 2 * C.E8M0_BIAS - 2
# 2**22 has a float32 ulp of 0.5: adding it to |v| < 1 rounds |v| to the nearest multiple of 0.5
# (ties to even) and leaves that multiple, in halves, in the low mantissa bits
_HALVES_MAGIC = 4194304.0
_HALVES_MAGIC_BITS = 0x4A80_0000


def e2m1_codes(ops: ArrayOps, scaled: Array) -> Array:
    """4-bit E2M1 codes (s32, sign in bit 3) of float32 values ``scaled``: round to nearest, ties
    to even, finite values beyond 6 saturating to +-6; zeros and values that round to zero keep
    their sign. (NaN and Inf give unspecified codes: the cast replaces those blocks.)

    No comparison chain over the seven midpoints: for ``|v| >= 1`` (E2M1's normal numbers) the
    float32 mantissa is rounded to one bit in the integer domain (adding ``0x1FFFFF`` plus the kept
    bit is round-to-nearest-even), so exponent and kept bit are the code, a carry into the exponent
    included; for ``|v| < 1`` (0, the subnormal 0.5, and 1.0 reached by rounding) the float32
    addition of 2**22 rounds to a multiple of 0.5. Both are exact on every backend.
    """
    bits = ops.bitcast(scaled, "s32")
    abs_bits = ops.bit_and(bits, C.F32_ABS_MASK)
    kept = ops.bit_and(ops.shift_right(abs_bits, _TOP_MANTISSA_SHIFT), 1)
    rounded = ops.add(ops.add(abs_bits, _HALF_TOP_MANTISSA_LESS_ONE), kept)
    normal = ops.clamp(ops.sub(ops.shift_right(rounded, _TOP_MANTISSA_SHIFT), _E2M1_CODE_OFFSET), 0, 7)
    halves = ops.bitcast(ops.add(ops.bitcast(abs_bits, "f32"), _HALVES_MAGIC), "s32")
    small = ops.sub(halves, _HALVES_MAGIC_BITS)
    magnitude = ops.select(ops.ge(abs_bits, _F32_ONE_BITS), normal, small)
    return ops.select(ops.ge(bits, 0), magnitude, ops.bit_or(magnitude, C.E2M1_SIGN))


def e2m1_values(ops: ArrayOps, codes: Array) -> Array:
    """float32 values of 4-bit E2M1 codes ``codes`` (s32, 0..15): for a magnitude code ``c >= 2``
    the float32 bits are ``(c + 252) << 22`` (exponent ``c >> 1`` re-biased, mantissa bit ``c & 1``),
    and codes 0 and 1 are ``c * 0.5``; code ``8 + c`` is ``-value(c)`` (code 8 is -0.0)."""
    magnitude = ops.bit_and(codes, 7)
    normal = ops.bitcast(ops.shift_left(ops.add(magnitude, _E2M1_CODE_OFFSET), _TOP_MANTISSA_SHIFT), "f32")
    small = ops.mul(ops.convert(magnitude, "f32"), 0.5)
    values = ops.select(ops.ge(magnitude, 2), normal, small)
    return ops.select(ops.ge(codes, C.E2M1_SIGN), ops.mul(values, -1.0), values)


def pack_nibbles(ops: ArrayOps, codes: Array) -> Array:
    """u8 bytes of 4-bit codes ``codes`` (s32, last dimension even): element 2i in the low nibble,
    2i+1 in the high one."""
    even, odd = ops.split_pairs(codes)
    return ops.convert(ops.bit_or(even, ops.shift_left(odd, 4)), "u8")


def unpack_nibbles(ops: ArrayOps, packed: Array) -> Array:
    """The 4-bit codes (s32) of u8 bytes ``packed``, two per byte, low nibble first."""
    as_int = ops.convert(packed, "s32")
    return ops.interleave_pairs(ops.bit_and(as_int, 15), ops.shift_right(as_int, 4))


def cast_blocks_fp4(ops: ArrayOps, blocks: Array, block_size: int, rounding: str) -> tuple[Array, Array]:
    """MXFP4-cast ``blocks`` (``[..., nblocks, block_size]``, any float type).

    Returns ``(codes, scale)``: the 4-bit E2M1 codes (s32, the blocks' shape; ``pack_nibbles``
    makes the bytes) and the u8 E8M0 scale bytes ``[..., nblocks]``. The scale byte is
    ``scale_code`` for ``C.E2M1`` (emax_elem 2, rceil by fl32(1/6)), the maximum over the block as
    for MXFP8; the elements are ``x * 2**(127 - byte)`` (exact: a normal float32 factor, the byte
    being at most 253) rounded by ``e2m1_codes``; a NaN block (byte 0xFF) gets zero codes
    (``C.MXFP4_NAN_DATA``).
    """
    x32 = ops.convert(blocks, "f32")
    abs_bits = ops.bit_and(ops.bitcast(x32, "s32"), C.F32_ABS_MASK)
    scale = ops.reduce_max_last(ops.convert(scale_code(ops, abs_bits, rounding, C.E2M1), "u8"))
    code = ops.expand_last(ops.convert(scale, "s32"), block_size)
    reciprocal, is_nan = scale_factors(ops, code)
    codes = e2m1_codes(ops, ops.mul(x32, reciprocal))
    return ops.select(is_nan, C.MXFP4_NAN_DATA, codes), scale


def dequantize_blocks_fp4(ops: ArrayOps, packed: Array, scale: Array, block_size: int) -> Array:
    """float32 values of MXFP4 bytes ``packed`` (``[..., nblocks, block_size / 2]`` u8) under scale
    bytes ``scale`` (``[..., nblocks]`` u8): each element times 2**(byte - 127) as two normal
    float32 factors (``split_scale``), NaN throughout a block whose byte is 0xFF."""
    values = e2m1_values(ops, unpack_nibbles(ops, packed))
    code = ops.expand_last(ops.convert(scale, "s32"), block_size)
    first, second = split_scale(ops, code)
    return ops.select(ops.eq(code, C.E8M0_NAN), float("nan"), ops.mul(ops.mul(values, first), second))
