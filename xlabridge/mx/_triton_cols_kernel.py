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
def _scale(x32, code):
    reciprocal = ((254 - code) << 23).to(tl.float32, bitcast=True)
    scaled = x32 * reciprocal
    scaled = tl.minimum(tl.maximum(scaled, -448.0), 448.0)
    return tl.where(code == 255, float("nan"), scaled)

@triton.jit
def mxfp8_cast_cols_kernel(
    x_ptr, col_data_ptr, col_scale_ptr, row_data_ptr, row_scale_ptr,
    R, B, stride_a, stride_r, stride_b,
    BLOCK: tl.constexpr, RCEIL: tl.constexpr, RECIPROCAL: tl.constexpr, BOTH: tl.constexpr, WIDE_INDEX: tl.constexpr,
    TILE_R: tl.constexpr, TILE_B: tl.constexpr, B_FIRST: tl.constexpr, PRE: tl.constexpr,
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
    x = tl.load(x_ptr + a * stride_a + r[:, None] * stride_r + b[None, :] * stride_b, mask=mask, other=0.0,
                eviction_policy="evict_first")
    base = a * B * R
    n_col_blocks = R // BLOCK
    rb = pid_r * (TILE_R // BLOCK) + tl.arange(0, TILE_R // BLOCK)
    if PRE:
        # column blocks (BLOCK consecutive rows of one column) reduced down the rows of the tile as
        # loaded; only the float8 bytes and the scale bytes are transposed (the fewest bytes)
        x32 = x.to(tl.float32)
        col_bits = x32.to(tl.int32, bitcast=True) & 0x7FFFFFFF
        col_amax = tl.max(tl.reshape(col_bits, (TILE_R // BLOCK, BLOCK, TILE_B)), axis=1)
        col_code = _codes(col_amax, RCEIL, RECIPROCAL)  # [TILE_R // BLOCK, TILE_B]
        col_data = _scale(tl.reshape(x32, (TILE_R // BLOCK, BLOCK, TILE_B)), col_code[:, None, :])
        col_bytes = tl.reshape(col_data, (TILE_R, TILE_B)).to(tl.float8e4nv).to(tl.uint8, bitcast=True)
        tl.store(col_data_ptr.to(tl.pointer_type(tl.uint8)) + base + b[:, None] * R + r[None, :], tl.trans(col_bytes),
                 mask=(b < B)[:, None] & (r < R)[None, :])
        col_code = tl.trans(col_code)  # [TILE_B, TILE_R // BLOCK]
    else:
        # column blocks along the last axis of the transposed tile: the transpose moves the input
        # once through shared memory, and the reduction and the stores then go as in the row-wise
        # kernel (contiguous along R in the [A, B, R] output)
        xt = tl.trans(x)  # [TILE_B, TILE_R]
        xt32 = xt.to(tl.float32)
        col_bits = xt32.to(tl.int32, bitcast=True) & 0x7FFFFFFF
        col_amax = tl.max(tl.reshape(col_bits, (TILE_B, TILE_R // BLOCK, BLOCK)), axis=2)
        col_code = _codes(col_amax, RCEIL, RECIPROCAL)  # [TILE_B, TILE_R // BLOCK]
        col_data = _scale(tl.reshape(xt32, (TILE_B, TILE_R // BLOCK, BLOCK)), col_code[:, :, None])
        tl.store(col_data_ptr + base + b[:, None] * R + r[None, :],
                 tl.reshape(col_data, (TILE_B, TILE_R)).to(tl.float8e4nv), mask=(b < B)[:, None] & (r < R)[None, :])
    col_mask = (rb < n_col_blocks)[None, :] & (b < B)[:, None]
    tl.store(col_scale_ptr + a * B * n_col_blocks + b[:, None] * n_col_blocks + rb[None, :],
             col_code.to(tl.uint8), mask=col_mask)
    if BOTH:
        x32 = x.to(tl.float32)
        abs_bits = x32.to(tl.int32, bitcast=True) & 0x7FFFFFFF
        row_amax = tl.max(tl.reshape(abs_bits, (TILE_R, TILE_B // BLOCK, BLOCK)), axis=2)
        row_code = _codes(row_amax, RCEIL, RECIPROCAL)
        row_data = _scale(tl.reshape(x32, (TILE_R, TILE_B // BLOCK, BLOCK)), row_code[:, :, None])
        tl.store(row_data_ptr + base + r[:, None] * B + b[None, :], tl.reshape(row_data, (TILE_R, TILE_B)).to(tl.float8e4nv), mask=mask)
        n_row_blocks = B // BLOCK
        bb = pid_b * (TILE_B // BLOCK) + tl.arange(0, TILE_B // BLOCK)
        row_mask = (r < R)[:, None] & (bb < n_row_blocks)[None, :]
        tl.store(row_scale_ptr + a * R * n_row_blocks + r[:, None] * n_row_blocks + bb[None, :],
                 row_code.to(tl.uint8), mask=row_mask)
