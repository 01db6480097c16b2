"""The Triton kernels of the MXFP4 cast and dequantization (``fp4.py`` launches them; imported only
when a CUDA tensor, or Triton's CPU interpreter, needs them: this module imports Triton).

The arithmetic is the formulation's (``_formulation.py``), bit for bit, rewritten for the GPU's
pipes: an E2M1 code costs a few float operations instead of the formulation's integer rounding
(``_e2m1_code``), and the block maximum is a float maximum that keeps NaN (``max.NaN``), not an
integer maximum of bit patterns.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _to_float32(x):
    """``x`` as float32, exactly; bfloat16 by moving its bits up (what the hardware conversion does,
    and exact for subnormals in Triton's interpreter too, whose own conversion of them is not)."""
    if x.dtype == tl.bfloat16:
        return (x.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)
    return x.to(tl.float32)


@triton.jit
def _scale_codes(amax, RCEIL: tl.constexpr):
    """E8M0 bytes (int32) of block maxima ``amax`` (float32, >= 0 or NaN): the formulation's
    ``scale_code`` for E2M1 (emax_elem 2; rceil: amax * fl32(1/6) rounded up to a power of two)."""
    bits = amax.to(tl.int32, bitcast=True)
    if RCEIL:
        descale = (amax * (1.0 / 6.0)).to(tl.int32, bitcast=True)
        exponent = descale >> 23
        mantissa = descale & 0x007FFFFF
        code = exponent + tl.where(exponent == 0, mantissa > 0x00400000, mantissa != 0).to(tl.int32)
    else:
        code = tl.maximum((bits >> 23) - 2, 0)
    # NaN maxima and infinities (bits at or above +Inf's; a NaN amax may carry the sign bit)
    return tl.where((bits & 0x7FFFFFFF) >= 0x7F800000, 255, code)


@triton.jit
def _e2m1_code(x32, reciprocal):
    """The 4-bit E2M1 code (int32, sign in bit 3) of ``x32 * reciprocal`` (``reciprocal`` a power of
    two), rounded to nearest even and saturating at 6.

    ``t = min(|x| * reciprocal, 6)`` is exact (a power-of-two factor) and saturated. Adding ``M``,
    the power of two whose float32 ulp is the E2M1 spacing at ``t`` (0.5 below 2, 1 below 4, 2
    above: ``M = max(2**22, 2**(floor(log2 t) + 22))``), rounds ``t`` to the E2M1 grid, to nearest
    even, in one float addition; the sum's bits minus ``M``'s count grid steps above ``M``, and the
    code is that count plus 2 per octave above 2**22 (codes 0..4 below 2, 4..6 below 4, 6..7 to 6).
    Odd grid steps are odd codes, so the float tie-to-even is E2M1's."""
    t = tl.minimum(tl.abs(x32) * reciprocal, 6.0)
    m = tl.maximum((t * 4194304.0).to(tl.int32, bitcast=True) & 0x7F800000, 0x4A800000)
    s = (t + m.to(tl.float32, bitcast=True)).to(tl.int32, bitcast=True)
    code = s - m + ((m >> 22) - 298)
    return code | ((x32.to(tl.int32, bitcast=True) >> 28) & 8)


@triton.jit
def mxfp4_cast_kernel(x_ptr, data_ptr, scale_ptr, n_blocks, blocks_per_row, row_stride,
                      RCEIL: tl.constexpr, TILE: tl.constexpr, CONTIGUOUS: tl.constexpr, WIDE_INDEX: tl.constexpr):
    """``TILE`` blocks of 32 per program: one load of the tile, the blocks' maxima in registers,
    the scale bytes and the packed data (16 bytes a block) stored once."""
    pid = tl.program_id(0)
    if WIDE_INDEX:
        pid = pid.to(tl.int64)
    block = pid * TILE + tl.arange(0, TILE)
    in_range = block < n_blocks
    lane = tl.arange(0, 32)
    if CONTIGUOUS:
        src = block * 32
    else:
        src = (block // blocks_per_row) * row_stride + (block % blocks_per_row) * 32
    x = tl.load(x_ptr + src[:, None] + lane[None, :], mask=in_range[:, None], other=0.0, eviction_policy="evict_first")
    x32 = _to_float32(x)
    amax = tl.reduce(tl.abs(x32), 1, _max_nan)
    code = _scale_codes(amax, RCEIL)
    tl.store(scale_ptr + block, code.to(tl.uint8), mask=in_range)
    reciprocal = ((254 - code) << 23).to(tl.float32, bitcast=True)
    nibbles = _e2m1_code(x32, reciprocal[:, None])
    even, odd = tl.split(tl.reshape(nibbles, (TILE, 16, 2)))
    packed = tl.where((code == 255)[:, None], 0, even | (odd << 4))
    j = tl.arange(0, 16)
    tl.store(data_ptr + block[:, None] * 16 + j[None, :], packed.to(tl.uint8), mask=in_range[:, None])


@triton.jit
def _e2m1_value(nibble):
    """float32 value of 4-bit E2M1 codes (int32): ``(c + 252) << 22`` for magnitude codes >= 2,
    ``c * 0.5`` below, with the sign bit set for codes 8..15."""
    magnitude = nibble & 7
    normal = ((magnitude + 252) << 22).to(tl.float32, bitcast=True)
    value = tl.where(magnitude >= 2, normal, magnitude.to(tl.float32) * 0.5)
    # the sign as a bit (Triton negates as 0 - x, which loses -0.0)
    return (value.to(tl.int32, bitcast=True) | ((nibble & 8) << 28)).to(tl.float32, bitcast=True)


@triton.jit
def _scale_factor(code):
    """2**(code - 127) as float32 (int32 ``code``): the bits ``code << 23``, the subnormal 2**-127 for
    byte 0, NaN for 0xFF (exact on the GPU, which keeps float32 subnormals)."""
    bits = tl.where(code == 0, 0x00400000, code << 23)
    return tl.where(code == 255, 0x7FC00000, bits).to(tl.float32, bitcast=True)


@triton.jit
def mxfp4_dequantize_kernel(data_ptr, scale_ptr, out_ptr, n_blocks, TILE: tl.constexpr, WIDE_INDEX: tl.constexpr):
    """``TILE`` blocks per program: 16 packed bytes and a scale byte in, 32 values out, stored once."""
    pid = tl.program_id(0)
    if WIDE_INDEX:
        pid = pid.to(tl.int64)
    block = pid * TILE + tl.arange(0, TILE)
    in_range = block < n_blocks
    j = tl.arange(0, 16)
    packed = tl.load(data_ptr + block[:, None] * 16 + j[None, :], mask=in_range[:, None], other=0).to(tl.int32)
    factor = _scale_factor(tl.load(scale_ptr + block, mask=in_range, other=0).to(tl.int32))[:, None]
    low = _e2m1_value(packed & 15) * factor
    high = _e2m1_value(packed >> 4) * factor
    values = tl.reshape(tl.join(low, high), (TILE, 32))
    lane = tl.arange(0, 32)
    tl.store(out_ptr + block[:, None] * 32 + lane[None, :], values.to(out_ptr.dtype.element_ty), mask=in_range[:, None])
