"""The MXFP8 cast, written once over a small set of array operations.

The same code builds the XLA computation (through torch_xla's XlaBuilder, ``_xla.py``), the
JAX version used to check XLA:GPU (``_jax.py``), and the eager PyTorch path (``_torch_ops.py``):
each supplies an ``ArrayOps`` adapter. One source keeps the three bit-identical and means
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
* ``strategy="recompute"`` computes the data from a second, reduce-free block maximum (a chain
  of elementwise maxima over the block's 32 slices) instead of broadcasting the reduction
  result. XLA can't put a reduction and a consumer of its broadcast result into one kernel,
  but it can put a reduction and an elementwise output over the same input shape into one
  multi-output fusion; the recomputed maximum is what makes the data such an output.
  ``strategy="two_pass"`` broadcasts the reduction result: the fewest operations, two kernels.
"""

from __future__ import annotations

from typing import Any, Protocol

from xlabridge.mx import _constants as C

STRATEGIES = ("two_pass", "recompute")

Array = Any


class ArrayOps(Protocol):
    """What the formulation needs from an array library. dtypes: f32, s32, u8, f8e4m3fn.

    Binary operations accept a Python number for either operand.
    """

    def convert(self, a: Array, dtype: str) -> Array: ...
    def bitcast(self, a: Array, dtype: str) -> Array: ...
    def add(self, a: Array, b: Array) -> Array: ...
    def sub(self, a: Array, b: Array) -> Array: ...
    def mul(self, a: Array, b: Array) -> Array: ...
    def bit_and(self, a: Array, b: Array) -> Array: ...
    def shift_right(self, a: Array, bits: int) -> Array: ...
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
    if rounding == "floor":
        # Spec 6.3: X = largest power of two <= amax, divided by 2**emax_elem; clamped to 2**-127.
        exponent = ops.shift_right(abs_bits, C.F32_MANTISSA_BITS)
        code = ops.maximum(ops.sub(exponent, C.E4M3_EMAX), 0)
    elif rounding == "rceil":
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


def _scaled_data(ops: ArrayOps, x32: Array, code: Array) -> Array:
    """float8_e4m3fn data of blocks ``x32`` (f32) under broadcast scale bytes ``code`` (s32)."""
    reciprocal = ops.bitcast(ops.shift_left(ops.sub(2 * C.E8M0_BIAS, code), C.F32_MANTISSA_BITS), "f32")
    scaled = ops.clamp(ops.mul(x32, reciprocal), -C.E4M3_MAX, C.E4M3_MAX)
    scaled = ops.select(ops.eq(code, C.E8M0_NAN), float("nan"), scaled)
    return ops.convert(scaled, "f8e4m3fn")


def cast_blocks(ops: ArrayOps, blocks: Array, block_size: int, rounding: str, strategy: str) -> tuple[Array, Array]:
    """MXFP8-cast ``blocks`` (shape ``[..., nblocks, block_size]``, float dtype).

    Returns ``(data, scale)``: float8_e4m3fn of the same shape, and u8 E8M0 bytes of shape
    ``[..., nblocks]``.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    x32 = ops.convert(blocks, "f32")
    abs_bits = ops.bit_and(ops.bitcast(x32, "s32"), C.F32_ABS_MASK)
    scale = ops.reduce_max_last(ops.convert(scale_code(ops, abs_bits, rounding), "u8"))
    if strategy == "two_pass":
        block_code = ops.convert(scale, "s32")
    else:
        block_max = ops.slice_last(abs_bits, 0)
        for index in range(1, block_size):
            block_max = ops.maximum(block_max, ops.slice_last(abs_bits, index))
        block_code = scale_code(ops, block_max, rounding)
    data = _scaled_data(ops, x32, ops.expand_last(block_code, block_size))
    return data, scale
