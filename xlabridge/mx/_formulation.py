"""The MXFP8 cast, written once over a small set of array operations.

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


def scale_code(ops: ArrayOps, abs_bits: Array, rounding: str) -> Array:
    """E8M0 byte (as s32) for a block whose ``|x|`` maximum has float32 bits ``abs_bits``.

    Monotone non-decreasing in ``abs_bits``, so it may be applied per element before the
    block maximum as well as after it.
    """
    if rounding == C.Rounding.FLOOR:
        # Spec 6.3: X = largest power of two <= amax, divided by 2**emax_elem; clamped to 2**-127.
        exponent = ops.shift_right(abs_bits, C.F32_MANTISSA_BITS)
        code = ops.maximum(ops.sub(exponent, C.E4M3_EMAX), 0)
    elif rounding == C.Rounding.RCEIL:
        descale = ops.mul(ops.bitcast(abs_bits, "f32"), C.RCEIL_RECIPROCAL)
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
