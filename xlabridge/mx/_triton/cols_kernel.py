"""The Triton kernel of ``_triton_cols.py`` (imported only when a CUDA tensor, or Triton's CPU
interpreter, needs it: this module imports Triton)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _codes(amax_bits, RCEIL: tl.constexpr, RECIPROCAL: tl.constexpr):
    if RCEIL:
        descale = amax_bits.to(tl.float32, bitcast=True) * RECIPROCAL
        bits = descale.to(tl.int32, bitcast=True)
        exponent = bits >> 23
        mantissa = bits & 0x007FFFFF
        round_up = tl.where(exponent == 0, mantissa > 0x00400000, mantissa != 0)
        code = exponent + round_up.to(tl.int32)
    else:
        code = tl.maximum((amax_bits >> 23) - 8, 0)
    return tl.where(amax_bits >= 0x7F800000, 255, code)


@triton.jit
def _amax_bits(x, AXIS: tl.constexpr):
    """The float32 bit pattern of the largest magnitude along ``AXIS`` (a block), NaN-safe: an
    integer max of magnitude bits; for 16-bit inputs, of the 16-bit magnitudes (two per
    instruction), converted to float32 once per block rather than once per element."""
    if x.dtype.primitive_bitwidth == 16:
        top = tl.max(x.to(tl.int16, bitcast=True) & 0x7FFF, axis=AXIS)
        return top.to(tl.int16).to(x.dtype, bitcast=True).to(tl.float32).to(tl.int32, bitcast=True)
    else:
        return tl.max(x.to(tl.float32).to(tl.int32, bitcast=True) & 0x7FFFFFFF, axis=AXIS)


@triton.jit
def _scaled(x, code, HW: tl.constexpr):
    """``x`` (any float dtype) times the block's exact power-of-two reciprocal, as float8.

    HW (sm_89+): the float32 -> e4m3 conversion is ``cvt.rn.satfinite`` (what Triton emits there
    too), which saturates at +-448 and keeps NaN, so the clamp is the hardware's and a NaN block's
    reciprocal is a NaN: one multiply per element, and four conversions into one register (no
    byte unpacking and repacking). Otherwise (Triton's interpreter) the clamp and the NaN are
    explicit."""
    x32 = x.to(tl.float32)
    if HW:
        reciprocal = tl.where(code == 255, 0x7FC00000, (254 - code) << 23).to(tl.float32, bitcast=True)
        return tl.inline_asm_elementwise(
            "{ .reg .b16 lo, hi; cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1; cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3; "
            "mov.b32 $0, {lo, hi}; }", "=r,r,r,r,r", [x32 * reciprocal], dtype=tl.uint8, is_pure=True, pack=4,
        ).to(tl.float8e4nv, bitcast=True)
    else:
        reciprocal = ((254 - code) << 23).to(tl.float32, bitcast=True)
        scaled = tl.minimum(tl.maximum(x32 * reciprocal, -448.0), 448.0)
        return tl.where(code == 255, float("nan"), scaled).to(tl.float8e4nv)


@triton.jit
def _store_codes(scale_ptr, row0, rows, n_blocks, pid, code, NB: tl.constexpr, PACK: tl.constexpr, mask):
    """Scale bytes ``code`` ([rows, NB]) at ``scale_ptr + row * n_blocks + pid * NB + j``.

    PACK (n_blocks a multiple of NB; NB 2, 4 or 8): a row's NB bytes as one 2/4/8-byte store,
    one L2 sector write per row rather than NB partial ones."""
    if PACK and (NB == 2 or NB == 4 or NB == 8):
        shift = 8 * tl.arange(0, NB)
        if NB == 8:
            packed = tl.sum(code.to(tl.int64) << shift[None, :].to(tl.int64), axis=1)
            ptr = scale_ptr.to(tl.pointer_type(tl.int64))
        elif NB == 4:
            packed = tl.sum(code << shift[None, :], axis=1)
            ptr = scale_ptr.to(tl.pointer_type(tl.int32))
        else:
            packed = tl.sum(code << shift[None, :], axis=1).to(tl.int16)
            ptr = scale_ptr.to(tl.pointer_type(tl.int16))
        tl.store(ptr + (row0 + rows * n_blocks) // NB + pid, packed, mask=mask)
    else:
        j = pid * NB + tl.arange(0, NB)
        tl.store(scale_ptr + row0 + rows[:, None] * n_blocks + j[None, :], code.to(tl.uint8),
                 mask=mask[:, None] & (j < n_blocks)[None, :])


@triton.jit
def mxfp8_cast_cols_kernel(
    x_ptr, col_data_ptr, col_scale_ptr, row_data_ptr, row_scale_ptr,
    R, B, stride_a, stride_r, stride_b,
    BLOCK: tl.constexpr, RCEIL: tl.constexpr, RECIPROCAL: tl.constexpr, BOTH: tl.constexpr, WIDE_INDEX: tl.constexpr,
    TILE_R: tl.constexpr, TILE_B: tl.constexpr, B_FIRST: tl.constexpr, HW: tl.constexpr, PACK: tl.constexpr,
    LOAD_EVICT: tl.constexpr,
):
    if B_FIRST:  # consecutive programs read side by side along B (whole input rows between them)
        pid_b = tl.program_id(0)
        pid_r = tl.program_id(1)
    else:  # consecutive programs write side by side along R in the [A, B, R] output
        pid_r = tl.program_id(0)
        pid_b = tl.program_id(1)
    a = tl.program_id(2)
    if WIDE_INDEX:
        a = a.to(tl.int64)
        pid_r = pid_r.to(tl.int64)
        pid_b = pid_b.to(tl.int64)
    r = pid_r * TILE_R + tl.arange(0, TILE_R)
    b = pid_b * TILE_B + tl.arange(0, TILE_B)
    mask = (r < R)[:, None] & (b < B)[None, :]
    # LOAD_EVICT: "evict_first" here slowed the H100 kernels (tools/bench/results/mx_dim1_tune.json)
    x = tl.load(x_ptr + a * stride_a + r[:, None] * stride_r + b[None, :] * stride_b, mask=mask, other=0.0,
                eviction_policy=LOAD_EVICT)
    base = a * B * R
    # column blocks along the last axis of the transposed tile; the compiler moves whichever of
    # the input and the float8 bytes it picks through shared memory, and the stores are contiguous
    # along R in the [A, B, R] output
    NB: tl.constexpr = TILE_R // BLOCK
    xt = tl.reshape(tl.trans(x), (TILE_B, NB, BLOCK))
    col_code = _codes(_amax_bits(xt, 2), RCEIL, RECIPROCAL)  # [TILE_B, NB]
    col_data = tl.reshape(_scaled(xt, col_code[:, :, None], HW), (TILE_B, TILE_R))
    tl.store(col_data_ptr + base + b[:, None] * R + r[None, :], col_data, mask=(b < B)[:, None] & (r < R)[None, :])
    _store_codes(col_scale_ptr, a * B * (R // BLOCK), b, R // BLOCK, pid_r, col_code, NB, PACK, b < B)
    if BOTH:
        NRB: tl.constexpr = TILE_B // BLOCK
        xr = tl.reshape(x, (TILE_R, NRB, BLOCK))
        row_code = _codes(_amax_bits(xr, 2), RCEIL, RECIPROCAL)  # [TILE_R, NRB]
        row_data = tl.reshape(_scaled(xr, row_code[:, :, None], HW), (TILE_R, TILE_B))
        tl.store(row_data_ptr + base + r[:, None] * B + b[None, :], row_data, mask=mask)
        _store_codes(row_scale_ptr, a * R * (B // BLOCK), r, B // BLOCK, pid_b, row_code, NRB, PACK, r < R)
