"""The column-wise cast as a Gluon kernel (Triton's explicit-layout dialect), for sm_89+ GPUs
(imported only there: this module imports Triton's Gluon).

Why Gluon: the column blocks run down the rows of the input, and the output rows are the input's
columns. Here each thread loads 16-byte vectors along B for ``32 // TR`` consecutive rows, so a
column block lies in ``TR`` threads' registers: its maximum is a register reduction and
``log2(TR)`` shuffles, and the same registers, scaled and converted, are that thread's
consecutive float8 bytes of an output row, stored 16 (TR 2) or 8 (TR 4) bytes at a time. No
shared memory, no barrier. Plain Triton (``_triton_cols_kernel.py``) picks its own layouts and
moves each tile through shared memory between the load's and the store's; on the H100 this
kernel is 0.149 ms against its 0.152-0.155 ms at 256 MB (tools/bench/results/mx_dim1_tune_h100.json).

The arithmetic is ``_triton_cols_kernel.py``'s with ``HW`` set: integer max of magnitude bits
(of the 16-bit patterns for 16-bit inputs), the scale byte from the exponent field, one multiply
by the block's power-of-two reciprocal (a NaN one for a NaN/Inf block) and ``cvt.rn.satfinite``
(Triton's conversion there), which saturates at +-448; the same bytes.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl


def layouts(vec: int, tr: int, warps: int):
    """(load layout, compute layout, TILE_B) of a [32, TILE_B] block row: ``vec`` elements (16
    bytes) along B and ``32 // tr`` rows per thread, ``tr`` threads down a column, warps along B.
    The two layouts hold the same elements in the same threads; the load's registers run along B
    (vector loads), the compute layout's along R (vector stores of the transposed bytes), so the
    conversion between them moves no data."""
    rows, lanes_b = 32 // tr, 32 // tr
    tile_b = vec * lanes_b * warps
    bits = lambda n: range(n.bit_length() - 1)  # noqa: E731 - the basis vectors of a power of two
    load = gl.BlockedLayout([rows, vec], [tr, lanes_b], [1, warps], [1, 0])
    compute = gl.DistributedLinearLayout(
        reg_bases=[[1 << i, 0] for i in bits(rows)] + [[0, 1 << i] for i in bits(vec)],
        lane_bases=[[0, vec << i] for i in bits(lanes_b)] + [[rows << i, 0] for i in bits(tr)],
        warp_bases=[[0, (vec * lanes_b) << i] for i in bits(warps)],
        block_bases=[],
        shape=[32, tile_b],
    )
    return load, compute, tile_b


@gluon.jit
def _maximum(a, b):
    return gl.maximum(a, b)


@gluon.jit
def mxfp8_cast_cols_kernel_gluon(
    x_ptr, col_data_ptr, col_scale_ptr, R, B, stride_a, stride_r, stride_b,
    RCEIL: gl.constexpr, RECIPROCAL: gl.constexpr, WIDE_INDEX: gl.constexpr,
    LOAD_LAYOUT: gl.constexpr, LAYOUT: gl.constexpr, TILE_B: gl.constexpr, NB: gl.constexpr, PACK: gl.constexpr,
    LOAD_EVICT: gl.constexpr, STORE_EVICT: gl.constexpr, GROUP_B: gl.constexpr = 0,
):
    """A program casts NB consecutive 32-row blocks of TILE_B columns of one [R, B] matrix, one
    block row at a time, the next one's load issued before this one's work. PACK (R a multiple of
    32 * NB; NB 2, 4 or 8): a column's NB scale bytes in one store."""
    if GROUP_B:  # a 1-D grid (per matrix): GROUP_B tiles side by side along B, then down R
        tiles_r = gl.cdiv(R, 32 * NB)
        tiles_b = gl.cdiv(B, TILE_B)
        pid = gl.program_id(0)
        first_b = (pid // (GROUP_B * tiles_r)) * GROUP_B
        width = gl.minimum(tiles_b - first_b, GROUP_B)
        local = pid % (GROUP_B * tiles_r)
        pid_b = first_b + local % width
        pid_r = local // width
    else:
        pid_r = gl.program_id(0)  # consecutive programs write side by side along R in the [A, B, R] output
        pid_b = gl.program_id(1)
    a = gl.program_id(2)
    if WIDE_INDEX:
        a = a.to(gl.int64)
        pid_r = pid_r.to(gl.int64)
        pid_b = pid_b.to(gl.int64)
    n_blocks = R // 32
    # pointers and masks of the loads, in the load layout
    lb = pid_b * TILE_B + gl.arange(0, TILE_B, layout=gl.SliceLayout(0, LOAD_LAYOUT))
    lr = pid_r * (32 * NB) + gl.arange(0, 32, layout=gl.SliceLayout(1, LOAD_LAYOUT))
    x_ptrs = x_ptr + a * stride_a + lb[None, :] * stride_b + lr[:, None] * stride_r
    # ... of the stores, in the compute layout
    b = pid_b * TILE_B + gl.arange(0, TILE_B, layout=gl.SliceLayout(0, LAYOUT))
    r = pid_r * (32 * NB) + gl.arange(0, 32, layout=gl.SliceLayout(1, LAYOUT))
    d_ptrs = col_data_ptr + a * B * R + b[None, :] * R + r[:, None]
    if NB <= 4:
        packed = gl.zeros([TILE_B], gl.int32, layout=gl.SliceLayout(0, LAYOUT))
    else:
        packed = gl.zeros([TILE_B], gl.int64, layout=gl.SliceLayout(0, LAYOUT))
    x = gl.load(x_ptrs, mask=(lb < B)[None, :] & (lr < R)[:, None], other=0.0, eviction_policy=LOAD_EVICT)
    for j in gl.static_range(NB):
        if j + 1 < NB:
            x_next = gl.load(x_ptrs + (j + 1) * 32 * stride_r, mask=(lb < B)[None, :] & (lr + (j + 1) * 32 < R)[:, None],
                             other=0.0, eviction_policy=LOAD_EVICT)
        x = gl.convert_layout(x, LAYOUT, assert_trivial=True)  # a renaming of registers
        if x.dtype.primitive_bitwidth == 16:
            top = gl.reduce(x.to(gl.int16, bitcast=True) & 0x7FFF, 0, _maximum)
            amax = top.to(gl.int16).to(x.dtype, bitcast=True).to(gl.float32).to(gl.int32, bitcast=True)
        else:
            amax = gl.reduce(x.to(gl.float32).to(gl.int32, bitcast=True) & 0x7FFFFFFF, 0, _maximum)
        if RCEIL:
            descale = amax.to(gl.float32, bitcast=True) * RECIPROCAL
            bits = descale.to(gl.int32, bitcast=True)
            exponent = bits >> 23
            mantissa = bits & 0x007FFFFF
            round_up = gl.where(exponent == 0, mantissa > 0x00400000, mantissa != 0)
            code = exponent + round_up.to(gl.int32)
        else:
            code = gl.maximum((amax >> 23) - 8, 0)
        code = gl.where(amax >= 0x7F800000, 255, code)
        reciprocal = gl.where(code == 255, 0x7FC00000, (254 - code) << 23).to(gl.float32, bitcast=True)
        data = (x.to(gl.float32) * reciprocal[None, :]).to(gl.float8e4nv)
        gl.store(d_ptrs + j * 32, data, mask=(b < B)[None, :] & (r + j * 32 < R)[:, None], eviction_policy=STORE_EVICT)
        if PACK:
            packed = packed | (code.to(packed.dtype) << (8 * j))
        else:
            blk = pid_r * NB + j
            gl.store(col_scale_ptr + a * B * n_blocks + b * n_blocks + blk, code.to(gl.uint8), mask=(b < B) & (blk < n_blocks))
        if j + 1 < NB:
            x = x_next
    if PACK:
        row0 = a * B * n_blocks + b * n_blocks
        if NB == 8:
            gl.store(col_scale_ptr.to(gl.pointer_type(gl.int64)) + row0 // 8 + pid_r, packed, mask=b < B)
        elif NB == 4:
            gl.store(col_scale_ptr.to(gl.pointer_type(gl.int32)) + row0 // 4 + pid_r, packed, mask=b < B)
        else:
            gl.store(col_scale_ptr.to(gl.pointer_type(gl.int16)) + row0 // 2 + pid_r, packed.to(gl.int16), mask=b < B)
