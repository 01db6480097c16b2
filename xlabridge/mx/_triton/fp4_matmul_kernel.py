"""The Triton kernel of the MXFP4 matmul (``fp4_matmul.py`` launches it; this module imports Triton).

``y[a] = x[a] @ W[e].T (+ bias[e])`` with ``W[e]`` (``[N, K]``) kept as MXFP4 bytes in memory:
each program dequantizes a ``BN x BK`` tile of ``W`` in registers and feeds it to the tensor cores,
so the weight is read once, at 0.53 bytes per parameter. The product is computed transposed,
``y.T = W @ x.T`` (the weight is the MMA's left operand: its ``BN`` rows fill the MMA's M side even
when ``x`` has one row, which is padded to ``BM = 16``, the smallest MMA tile).

The weight's two nibbles of a byte are elements ``2i`` and ``2i + 1`` of ``K``: rather than
interleave the decoded values, the kernel splits ``x``'s tile into its even and odd columns (a
register split) and adds two products, ``W_low @ x_even.T + W_high @ x_odd.T``.

How a tile is dequantized (``MODE``):

* ``"triton"``: Triton arithmetic in float32, exact (each element times 2**(scale - 127), then
  rounded once to ``x``'s dtype), the mode Triton's CPU interpreter checks;
* ``"ptx"``: bfloat16 ``x`` only: four bytes at a time in inline PTX. A nibble ``s e1 e0 m``
  moved into a bfloat16's bits as ``s 00000 e1 e0 | m 000000`` is its E2M1 value times 2**-126
  (its normal numbers and the subnormal 0.5 alike), so two shifts and masks per pair of values
  and a multiplication by 2**126 decode it, and a second one by the block's 2**(scale - 127)
  scales it, each in bfloat16x2 (exact: the value has two significant bits; bfloat16 keeps
  subnormals here). About 2.5 integer operations per value;
* ``"dot_scaled"``: ``tl.dot_scaled`` (Triton's own emulation of MX matmuls on Hopper: its upcast
  of E2M1 to bfloat16, then an ordinary MMA).

``SPLIT_K > 1`` (a runtime argument: no recompilation per shape) splits ``K`` over that many
programs per tile, ``K_PER_SPLIT`` (a multiple of ``BK``) each (more programs where ``N`` is small):
each writes its float32 partial tile to ``workspace`` and counts itself in the tile's ``locks``
entry; the last to arrive adds the partials, writes ``y`` and resets the entry to zero for the next
launch. One launch either way.
"""

from __future__ import annotations

import triton
import triton.language as tl

_PTX_DECODE = """
{
.reg .b32 v01, v23, a, b, c, d, k;
mov.b32 k, 0x7e807e80;
prmt.b32 v01, $4, 0, 0x4140;
prmt.b32 v23, $4, 0, 0x4342;
shl.b32 a, v01, 6;
and.b32 a, a, 0x01c001c0;
shl.b32 b, v01, 12;
and.b32 b, b, 0x80008000;
or.b32 a, a, b;
mul.rn.bf16x2 a, a, k;
mul.rn.bf16x2 $0, a, $5;
shl.b32 c, v23, 6;
and.b32 c, c, 0x01c001c0;
shl.b32 d, v23, 12;
and.b32 d, d, 0x80008000;
or.b32 c, c, d;
mul.rn.bf16x2 c, c, k;
mul.rn.bf16x2 $1, c, $5;
shl.b32 a, v01, 2;
and.b32 a, a, 0x01c001c0;
shl.b32 b, v01, 8;
and.b32 b, b, 0x80008000;
or.b32 a, a, b;
mul.rn.bf16x2 a, a, k;
mul.rn.bf16x2 $2, a, $5;
shl.b32 c, v23, 2;
and.b32 c, c, 0x01c001c0;
shl.b32 d, v23, 8;
and.b32 d, d, 0x80008000;
or.b32 c, c, d;
mul.rn.bf16x2 c, c, k;
mul.rn.bf16x2 $3, c, $5;
}
"""
"""Four packed bytes ($4) -> their low nibbles' values ($0, $1: bytes 0-1, 2-3) and high nibbles'
($2, $3), as bfloat16x2, times the block's scale ($5; $6 holds the same, the four bytes being of
one block). ``prmt`` puts bytes 0 and 1 of
$4 into the low bytes of the two 16-bit halves (``v01``), bytes 2 and 3 likewise (``v23``); then
a low nibble's magnitude bits 0-2 go to bits 6-8 and its sign bit 3 to bit 15 (a high nibble's
from bits 4-6 and 7), and 0x7e80 is 2**126 in bfloat16."""


@triton.jit
def _e2m1_value(nibble):
    magnitude = nibble & 7
    normal = ((magnitude + 252) << 22).to(tl.float32, bitcast=True)
    value = tl.where(magnitude >= 2, normal, magnitude.to(tl.float32) * 0.5)
    # the sign as a bit (Triton negates as 0 - x, which loses -0.0)
    return (value.to(tl.int32, bitcast=True) | ((nibble & 8) << 28)).to(tl.float32, bitcast=True)


@triton.jit
def _decode_triton(packed, code, dtype: tl.constexpr):
    """Low and high nibbles' values of ``packed`` ([BN, NB, 16] uint8) under scale bytes ``code``
    ([BN, NB] int32), in ``dtype``: exact float32 products, rounded once."""
    bits = tl.where(code == 0, 0x00400000, code << 23)
    factor = tl.where(code == 255, 0x7FC00000, bits).to(tl.float32, bitcast=True)[:, :, None]
    p = packed.to(tl.int32)
    low = (_e2m1_value(p & 15) * factor).to(dtype)
    high = (_e2m1_value(p >> 4) * factor).to(dtype)
    return low, high


@triton.jit
def _decode_ptx(packed, code):
    """As ``_decode_triton`` for bfloat16, in inline PTX (see ``_PTX_DECODE``)."""
    scale_bits = tl.where(code == 0, 0x0040, tl.where(code == 255, 0x7FC0, code << 7)).to(tl.int16)
    factor = tl.broadcast_to(scale_bits.to(tl.bfloat16, bitcast=True)[:, :, None], packed.shape)
    return tl.inline_asm_elementwise(_PTX_DECODE, "=r,=r,=r,=r,r,r,r", [packed, factor],
                                     dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)


@triton.jit
def mxfp4_matmul_kernel(
    x_ptr, w_ptr, s_ptr, bias_ptr, ids_ptr, y_ptr, workspace_ptr, locks_ptr,
    M, N, K, SPLIT_K, K_PER_SPLIT,
    stride_xa, stride_xm, stride_we, stride_wn, stride_se, stride_sn, stride_ya, stride_ym, stride_be,
    HAS_BIAS: tl.constexpr, HAS_IDS: tl.constexpr, MODE: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
):
    NB: tl.constexpr = BK // 32
    HALF: tl.constexpr = BK // 2
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    a = tl.program_id(2)
    tiles_m = (M + BM - 1) // BM  # not tl.cdiv: a triton.jit function, which the interpreter of the CPU tests may not see as one
    pid_m = pid % tiles_m  # programs of one weight tile run next to each other
    pid_n = pid // tiles_m
    e = tl.load(ids_ptr + a).to(tl.int64) if HAS_IDS else a.to(tl.int64)
    m = pid_m * BM + tl.arange(0, BM)
    n = pid_n * BN + tl.arange(0, BN)
    m_ok = m < M
    n_ok = n < N
    x_base = x_ptr + a.to(tl.int64) * stride_xa + m[:, None].to(tl.int64) * stride_xm
    w_base = w_ptr + e * stride_we + n[:, None, None].to(tl.int64) * stride_wn
    s_base = s_ptr + e * stride_se + n[:, None].to(tl.int64) * stride_sn
    blocks = tl.arange(0, NB)
    lanes = tl.arange(0, 16)
    k_first = pid_k * K_PER_SPLIT
    acc = tl.zeros((BN, BM), dtype=tl.float32)
    # the last split's steps past K load nothing (masked) and add zeros
    for step in range(0, K_PER_SPLIT, BK):
        k0 = k_first + step
        kk = k0 + tl.arange(0, BK)
        x = tl.load(x_base + kk[None, :], mask=m_ok[:, None] & (kk < K)[None, :], other=0.0)  # [BM, BK]
        block = k0 // 32 + blocks  # [NB]
        block_ok = block < K // 32
        packed = tl.load(w_base + (block[None, :, None] * 16 + lanes[None, None, :]),
                         mask=n_ok[:, None, None] & block_ok[None, :, None], other=0)  # [BN, NB, 16]
        code = tl.load(s_base + block[None, :], mask=n_ok[:, None] & block_ok[None, :], other=127)  # [BN, NB]
        if MODE == "dot_scaled":
            acc = tl.dot_scaled(tl.reshape(packed, (BN, HALF)), code, "e2m1", tl.trans(x), None, "bf16", acc)
        else:
            if MODE == "ptx":
                low, high = _decode_ptx(packed, code.to(tl.int32))
            else:
                low, high = _decode_triton(packed, code.to(tl.int32), x_ptr.dtype.element_ty)
            x_even, x_odd = tl.split(tl.reshape(x, (BM, HALF, 2)))
            acc = tl.dot(tl.reshape(low, (BN, HALF)), tl.trans(x_even), acc)
            acc = tl.dot(tl.reshape(high, (BN, HALF)), tl.trans(x_odd), acc)
    y_ptrs = y_ptr + a.to(tl.int64) * stride_ya + m[None, :].to(tl.int64) * stride_ym + n[:, None]
    y_mask = n_ok[:, None] & m_ok[None, :]
    if SPLIT_K == 1:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + e * stride_be + n, mask=n_ok, other=0.0).to(tl.float32)[:, None]
        tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=y_mask)
    else:
        tile = (a * tl.num_programs(0) + pid).to(tl.int64)
        local = tl.arange(0, BN)[:, None] * BM + tl.arange(0, BM)[None, :]
        tl.store(workspace_ptr + (tile * SPLIT_K + pid_k) * (BN * BM) + local, acc)
        tl.debug_barrier()
        arrived = tl.atomic_add(locks_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            total = tl.zeros((BN, BM), dtype=tl.float32)
            for part in range(SPLIT_K):
                total += tl.load(workspace_ptr + (tile * SPLIT_K + part) * (BN * BM) + local, cache_modifier=".cg")
            if HAS_BIAS:
                total += tl.load(bias_ptr + e * stride_be + n, mask=n_ok, other=0.0).to(tl.float32)[:, None]
            tl.store(y_ptrs, total.to(y_ptr.dtype.element_ty), mask=y_mask)
            tl.atomic_xchg(locks_ptr + tile, 0)
