"""The Triton kernels of the MXFP4 cast and dequantization (``fp4.py`` launches them; imported only
when a CUDA tensor, or Triton's CPU interpreter, needs them: this module imports Triton).

The arithmetic is the formulation's (``_formulation.py``), bit for bit, rewritten for the GPU's
pipes: an E2M1 code costs a few float operations instead of the formulation's integer rounding
(``_e2m1_code``), and the block maximum is a float maximum that keeps NaN (``max.NaN``), not an
integer maximum of bit patterns.

bfloat16 inputs take ``mxfp4_cast_bf16_kernel``, which reads the input as 32-bit words (two
elements each: the two nibbles of one output byte) and, on the GPU, computes both elements of a
word at once in bfloat16x2 instructions (``_PACK_BF16``): the cast is bound by those instructions
before memory unless two values share each one. Its ``ASM=False`` form is the same kernel in
Triton arithmetic (what Triton's CPU interpreter, which runs no PTX, checks).
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


_ABSMAX_BF16 = tl.constexpr("""
{
.reg .b32 a, b;
max.NaN.xorsign.abs.bf16x2 a, $1, $2;
max.NaN.xorsign.abs.bf16x2 b, $3, $4;
max.NaN.xorsign.abs.bf16x2 $0, a, b;
}
""")
"""Four words of two bfloat16 each ($1-$4) -> one word ($0) whose halves hold the largest magnitude
among the four low halves and among the four high halves (NaN if any is NaN; the sign bits, an
exclusive or of the inputs', are to be masked off)."""

_WORD_BF16 = """
mul.rn.bf16x2 t, {w}, {r};
min.xorsign.abs.bf16x2 t, t, six;
mul.rn.bf16x2 u, t, k64;
max.xorsign.abs.bf16x2 u, u, k64;
and.b32 m, u, 0xFF80FF80;
add.rn.bf16x2 s, t, m;
shr.b32 z, m, 6;
sub.u32 y, s, m;
add.u32 y, y, z;
sub.u32 y, y, 0x010A010A;
shr.b32 z, y, 6;
add.u32 y, y, z;
shr.b32 z, y, 12;
and.b32 y, y, 0x0000000F;
and.b32 z, z, 0xFFFFFFF0;
or.b32 {out}, y, z;
"""

_PACK_BF16 = tl.constexpr(
    "{\n.reg .b32 six, k64, t, u, m, s, y, z, b0, b1, b2, b3, lo, hi;\n"
    "mov.b32 six, 0x40C040C0;\nmov.b32 k64, 0x42804280;\n"
    + "".join(_WORD_BF16.format(w=f"${1 + i}", r=f"${5 + i}", out=f"b{i}") for i in range(4))
    + "prmt.b32 lo, b0, b1, 0x0040;\nprmt.b32 hi, b2, b3, 0x0040;\nprmt.b32 $0, lo, hi, 0x5410;\n}"
)
"""Four words of two bfloat16 each ($1-$4, consecutive elements 2i in the low half, 2i + 1 in the
high one) and their blocks' reciprocal scales 2**(127 - code) as bfloat16x2 ($5-$8) -> their four
packed bytes ($0, byte i from word i), every step in bfloat16x2 (two elements an instruction),
exact:

* ``t = clamp(x * reciprocal, -6, 6)``: the product is exact (a power of two; bfloat16 arithmetic
  keeps subnormals) and ``min.xorsign.abs`` saturates the magnitude and keeps the sign;
* ``M``: the power of two, with ``t``'s sign, whose bfloat16 ulp is the E2M1 spacing at ``t``
  (0.5 below 2, 1 below 4, 2 above): ``|t| * 64`` at least 64, its sign and exponent bits;
* ``s = t + M`` rounds ``t`` to the E2M1 grid, ties to even (odd grid steps are odd codes), and
  ``s - M`` in bits counts the steps, ``k``; the code is ``k + 2 (E - 133)``, ``E`` being ``M``'s
  exponent, so ``y = s - M + (M >> 6) - 266`` per 16-bit half holds the code in bits 0-2 and
  ``t``'s sign in bit 9 (``M >> 6`` moves ``M``'s sign there; every half stays non-negative, so
  32-bit arithmetic keeps the halves apart);
* ``y + (y >> 6)`` puts each half's sign next to its code (bit 3 and bit 19: the low nibble in
  bits 0-3, the high one in bits 16-19; the pieces land on distinct bits, so nothing carries),
  and the low four bits of that with the bits above of it ``>> 12`` make the byte (only the low
  byte is kept);
* ``prmt`` packs the four bytes.

Blocks with a NaN or an infinity get 0xFF scales and zero data from the caller."""


@triton.jit
def _bf16_halves(w):
    """The float32 values of a word's low and high bfloat16 halves."""
    return (w << 16).to(tl.float32, bitcast=True), (w & -65536).to(tl.float32, bitcast=True)


@triton.jit
def _absmax_bf16(w0, w1, w2, w3, ASM: tl.constexpr):
    """Per row of ``[BLOCKS, 4]`` words (the thread's 16 words of a block), the largest magnitude of
    its 32 bfloat16 values as float32 (NaN if any is NaN)."""
    if ASM:
        m = tl.inline_asm_elementwise(_ABSMAX_BF16, "=r,r,r,r,r", [w0, w1, w2, w3], dtype=tl.int32, is_pure=True, pack=1)
        lo, hi = _bf16_halves(m & 0x7FFF7FFF)
        return tl.reduce(_max_nan(lo, hi), 1, _max_nan)
    a = _max_nan(_absmax_word(w0), _absmax_word(w1))
    a = _max_nan(a, _max_nan(_absmax_word(w2), _absmax_word(w3)))
    return tl.reduce(a, 1, _max_nan)


@triton.jit
def _absmax_word(w):
    lo, hi = _bf16_halves(w)
    return _max_nan(tl.abs(lo), tl.abs(hi))


@triton.jit
def _pack_bf16(w, code, ASM: tl.constexpr):
    """The packed bytes (uint8, one per word) of ``[BLOCKS, words]`` int32 words under scale bytes
    ``code`` ([BLOCKS] int32)."""
    if ASM:
        r = (254 - code) << 7
        r = tl.broadcast_to((r | (r << 16))[:, None], w.shape)
        return tl.inline_asm_elementwise(_PACK_BF16, "=r,r,r,r,r,r,r,r,r", [w, r], dtype=tl.uint8, is_pure=True, pack=4)
    reciprocal = ((254 - code) << 23).to(tl.float32, bitcast=True)[:, None]
    lo, hi = _bf16_halves(w)
    return (_e2m1_code(lo, reciprocal) | (_e2m1_code(hi, reciprocal) << 4)).to(tl.uint8)


@triton.jit
def mxfp4_cast_bf16_kernel(x_ptr, data_ptr, scale_ptr, n_blocks, blocks_per_row, row_stride,
                           RCEIL: tl.constexpr, BLOCKS: tl.constexpr, CONTIGUOUS: tl.constexpr,
                           WIDE_INDEX: tl.constexpr, ASM: tl.constexpr, QUAD: tl.constexpr):
    """``BLOCKS`` blocks of 32 bfloat16 values per program; ``x_ptr`` is the input as int32 words
    (``row_stride`` in words). ``QUAD=False``: one thread per block, its 16 words in four 16-byte
    loads (``w0``-``w3``: words 0-3, 4-7, ... of the block), its maximum and scale byte in the
    thread's registers, its 16 packed bytes stored as four 4-byte pieces. ``QUAD=True``: four
    threads per block, 16 bytes each (a warp's load covers 512 contiguous bytes), the maximum an
    integer maximum of the magnitudes' bits across them (bfloat16 bits as the high half of a
    float32's: NaN above Inf above every finite value); ``BLOCKS`` must be 8 per warp, so that
    each thread stores its 4 packed bytes as loaded, with no change of layout."""
    pid = tl.program_id(0)
    if WIDE_INDEX:
        pid = pid.to(tl.int64)
    block = pid * BLOCKS + tl.arange(0, BLOCKS)
    in_range = block < n_blocks
    if CONTIGUOUS:
        src = block * 16
    else:
        src = (block // blocks_per_row) * row_stride + (block % blocks_per_row) * 16
    rows_in = in_range[:, None]
    if QUAD:
        q = tl.arange(0, 16)
        w = tl.load(x_ptr + src[:, None] + q[None, :], mask=rows_in, other=0, eviction_policy="evict_first")
        bits = tl.maximum(w & 0x7FFF0000, (w << 16) & 0x7FFF0000)
        code = _scale_codes(tl.max(bits, 1).to(tl.float32, bitcast=True), RCEIL)
        tl.store(scale_ptr + block, code.to(tl.uint8), mask=in_range)
        packed = tl.where((code == 255)[:, None], 0, _pack_bf16(w, code, ASM))
        tl.store(data_ptr + block[:, None] * 16 + q[None, :], packed, mask=rows_in)
    else:
        q = tl.arange(0, 4)
        words = x_ptr + src[:, None] + q[None, :]
        w0 = tl.load(words, mask=rows_in, other=0, eviction_policy="evict_first")
        w1 = tl.load(words + 4, mask=rows_in, other=0, eviction_policy="evict_first")
        w2 = tl.load(words + 8, mask=rows_in, other=0, eviction_policy="evict_first")
        w3 = tl.load(words + 12, mask=rows_in, other=0, eviction_policy="evict_first")
        code = _scale_codes(_absmax_bf16(w0, w1, w2, w3, ASM), RCEIL)
        tl.store(scale_ptr + block, code.to(tl.uint8), mask=in_range)
        nan = (code == 255)[:, None]
        out = data_ptr + block[:, None] * 16 + q[None, :]
        tl.store(out, tl.where(nan, 0, _pack_bf16(w0, code, ASM)), mask=rows_in)
        tl.store(out + 4, tl.where(nan, 0, _pack_bf16(w1, code, ASM)), mask=rows_in)
        tl.store(out + 8, tl.where(nan, 0, _pack_bf16(w2, code, ASM)), mask=rows_in)
        tl.store(out + 12, tl.where(nan, 0, _pack_bf16(w3, code, ASM)), mask=rows_in)


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
