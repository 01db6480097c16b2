"""The Triton kernel of the MXFP4 matmul (``fp4_matmul.py`` launches it; this module imports Triton).

``y[a] = x[a] @ W[e].T (+ bias[e])`` with ``W[e]`` (``[N, K]``) kept as MXFP4 bytes in memory:
each program dequantizes a ``BN x BK`` tile of ``W`` in registers and feeds it to the tensor cores
as the MMA's register operand, so the weight is read once, at 0.53 bytes per parameter, and never
passes through shared memory as bfloat16. The product is computed transposed, ``y.T = W @ x.T``
(the weight is the MMA's left operand: its ``BN`` rows fill the MMA's M side even when ``x`` has
one row, which is padded to ``BM = 16``, the smallest MMA tile; Hopper's ``wgmma`` takes that
operand from registers).

**The order of K.** A sum over ``K`` may run in any order, the same for both operands. The MMA's
register operand gives each thread of a quad its own pairs of ``K`` (``2t, 2t + 1`` and
``2t + 8, 2t + 9`` of every 16, for thread ``t``); in memory order that is one byte here and one
there. The kernel instead hands thread ``t`` of a quad the whole MXFP4 block ``t`` of every 128
elements of ``K`` (16 contiguous bytes: one vector load, one scale byte) by presenting both
operands to ``tl.dot`` in a permuted ``K`` order (``_logical``). The weight is read as 16-bit
words (four elements each, ``4i .. 4i + 3`` in word ``i``); within a span of 128, element ``k`` of
word ``2 m + j`` of block ``t`` (element ``32 t + 8 m + 4 j + k``) is MMA position
``16 (2 m + k // 2) + 8 (k % 2) + 2 t + j``, so each register pair the MMA takes (``j = 0, 1``)
is one element of each of two neighbouring words, as the decoder writes them. Triton carries the
operand layout back through the reshapes and permutes to where the words are read, so none of this
moves data at run time; ``x`` (a small tile) is permuted as it is staged for the MMA.

**Memory.** The weight's words and ``x`` reach shared memory through the software pipeline's
asynchronous copies (``num_stages``: that many steps in flight; 16 bytes a copy, which needs the
step's first word offset known to be a multiple of ``BK / 4``: ``tl.multiple_of``), and go from
there straight to registers in the operand layout. The scale bytes are prefetched into L1
``AHEAD`` steps early (the kernel's docstring says why). Only the last step of a split that
reaches past ``K`` is masked along ``K``.

How a tile is dequantized (``MODE``):

* ``"asm"``: bfloat16 ``x`` only: two words at a time in inline PTX (``_DECODE_BF16``). Element
  ``k`` of both words (their nibble ``k``, masked) times ``2**(6 - 4k) + 2**(12 - 4k)`` is two
  shifted copies of it that do not overlap: one puts the exponent and mantissa bits, the other the
  sign bit, where a bfloat16 has them (``s e1 e0 m`` as ``s 00000 e1 e0 | m 000000``: the E2M1
  value times 2**-126, normal numbers and the subnormal 0.5 alike), and a mask keeps those bits
  (elements 2 and 3 go through the words shifted right by 8 first). Two bfloat16x2
  multiplications, by 2**126 and by the blocks' 2**(scale - 127), make the values (exact: two
  significant bits; bfloat16 keeps subnormals). Per pair of values: two logical operations, an
  integer and two bfloat16x2 multiplications;
* ``"triton"``: the same values in Triton float32 arithmetic, rounded once to ``x``'s dtype (any
  dtype; what Triton's CPU interpreter, which runs no PTX, checks).

``PERMUTE=False`` presents ``K`` in memory order (a slower layout, kept to test the permutation
against).

``SPLIT_K > 1`` (a runtime argument: no recompilation per shape) splits ``K`` over that many
programs per tile, ``K_PER_SPLIT`` (a multiple of ``BK``) each (more programs where ``N`` is small):
each writes its float32 partial tile to ``workspace`` and counts itself in the tile's ``locks``
entry; the last to arrive adds the partials in split order (so the result does not depend on which
program finished last), writes ``y`` and resets the entry to zero for the next launch. One launch
either way.
"""

from __future__ import annotations

import triton
import triton.language as tl

_DECODE_BF16 = tl.constexpr("""{
.reg .b32 q, t, k;
mov.b32 k, 0x7e807e80;
and.b32 t, $4, 0x000F000F;
mul.lo.u32 t, t, 0x1040;
and.b32 t, t, 0x81C081C0;
mul.rn.bf16x2 t, t, k;
mul.rn.bf16x2 $0, t, $5;
and.b32 t, $4, 0x00F000F0;
mul.lo.u32 t, t, 0x104;
and.b32 t, t, 0x81C081C0;
mul.rn.bf16x2 t, t, k;
mul.rn.bf16x2 $1, t, $5;
shr.b32 q, $4, 8;
and.b32 t, q, 0x000F000F;
mul.lo.u32 t, t, 0x1040;
and.b32 t, t, 0x81C081C0;
mul.rn.bf16x2 t, t, k;
mul.rn.bf16x2 $2, t, $5;
and.b32 t, q, 0x00F000F0;
mul.lo.u32 t, t, 0x104;
and.b32 t, t, 0x81C081C0;
mul.rn.bf16x2 t, t, k;
mul.rn.bf16x2 $3, t, $5;
}
""")
"""Two 16-bit words of the weight ($4: four elements each, element k in bits 4k .. 4k + 3, any two
words, each decoded on its own) and their blocks' factors 2**(scale - 127) as a bfloat16 pair ($5)
-> element k of both words as a bfloat16 pair ($k: output k). For k = 0 the nibble (bits 0-3 of
each half) times 0x1040 lands at bits 6-9 and 12-15, and 0x81C0 keeps the exponent and mantissa
bits of the first copy and the sign bit of the second; k = 1 multiplies by 0x104. 0x7e80 is 2**126
in bfloat16."""


@triton.jit
def _e2m1_value(nibble):
    magnitude = nibble & 7
    normal = ((magnitude + 252) << 22).to(tl.float32, bitcast=True)
    value = tl.where(magnitude >= 2, normal, magnitude.to(tl.float32) * 0.5)
    # the sign as a bit (Triton negates as 0 - x, which loses -0.0)
    return (value.to(tl.int32, bitcast=True) | ((nibble & 8) << 28)).to(tl.float32, bitcast=True)


@triton.jit
def _decode(packed, code, MODE: tl.constexpr, dtype: tl.constexpr):
    """The values of ``packed`` (``[BN, BK/4]`` int16 words) under scale bytes ``code``
    (``[BN, BK/32]`` int32): four ``[BN, BK/4]`` tensors of ``dtype``, the ``k``-th holding element
    ``k`` of each word."""
    BN: tl.constexpr = packed.shape[0]
    WORDS: tl.constexpr = packed.shape[1]
    S: tl.constexpr = WORDS // 8
    if MODE == "asm":
        bits = tl.where(code == 0, 0x0040, tl.where(code == 255, 0x7FC0, code << 7)).to(tl.int16)
        factor = tl.reshape(tl.broadcast_to(bits.to(tl.bfloat16, bitcast=True)[:, :, None], (BN, S, 8)), (BN, WORDS))
        return tl.inline_asm_elementwise(_DECODE_BF16, "=r,=r,=r,=r,r,r", [packed, factor],
                                         dtype=(tl.bfloat16, tl.bfloat16, tl.bfloat16, tl.bfloat16), is_pure=True, pack=2)
    bits = tl.where(code == 0, 0x00400000, code << 23)
    factor = tl.where(code == 255, 0x7FC00000, bits).to(tl.float32, bitcast=True)
    factor = tl.reshape(tl.broadcast_to(factor[:, :, None], (BN, S, 8)), (BN, WORDS))
    p = packed.to(tl.int32)
    return ((_e2m1_value(p & 15) * factor).to(dtype), (_e2m1_value((p >> 4) & 15) * factor).to(dtype),
            (_e2m1_value((p >> 8) & 15) * factor).to(dtype), (_e2m1_value((p >> 12) & 15) * factor).to(dtype))


@triton.jit
def _logical(v0, v1, v2, v3, PERMUTE: tl.constexpr):
    """The tile ``[R, BK]`` of the words' elements ``v0 .. v3`` (each ``[R, BK/4]``) in the MMA's
    ``K`` order (the module docstring's permutation), or in memory order."""
    R: tl.constexpr = v0.shape[0]
    BK: tl.constexpr = 4 * v0.shape[1]
    # [R, span, t (block), m, j (word 2 m + j), k0, k1 (element 2 k1 + k0)]
    w = tl.reshape(tl.join(tl.join(v0, v1), tl.join(v2, v3)), (R, BK // 128, 4, 4, 2, 2, 2))
    if PERMUTE:
        w = tl.permute(w, (0, 1, 3, 6, 5, 2, 4))  # [span, m, k1, k0, t, j]
    else:
        w = tl.permute(w, (0, 1, 2, 3, 4, 6, 5))  # memory order
    return tl.reshape(w, (R, BK))


@triton.jit
def _logical_x(x, PERMUTE: tl.constexpr):
    """``x``'s tile ``[BM, BK]`` in the order ``_logical`` gives the weight's."""
    if PERMUTE:
        BM: tl.constexpr = x.shape[0]
        BK: tl.constexpr = x.shape[1]
        # [span, t, m, j, k1, k0] -> [span, m, k1, k0, t, j]
        x = tl.reshape(tl.permute(tl.reshape(x, (BM, BK // 128, 4, 4, 2, 2, 2)), (0, 1, 3, 5, 6, 2, 4)), (BM, BK))
    return x


@triton.jit
def _scales(s_base, k0, n_ok, K, BK: tl.constexpr):
    """The scale bytes (``[BN, BK/32]`` int32) of the step at ``k0``."""
    block = k0 // 32 + tl.arange(0, BK // 32)
    return tl.load(s_base + block[None, :], mask=n_ok[:, None] & (block < K // 32)[None, :], other=127).to(tl.int32)


@triton.jit
def _prefetch_scales(s_rows, k0, K, BK: tl.constexpr):
    """Ask for the scale bytes of the step at ``k0`` (each row's first and last) to be brought into
    L1, without waiting for them (``prefetch`` has no result; the output is a dummy, and the asm
    is not pure, so it stays)."""
    first = tl.minimum(k0 // 32, K // 32 - 1)
    last = tl.minimum(k0 // 32 + BK // 32 - 1, K // 32 - 1)
    ends = tl.where(tl.arange(0, 2) == 0, first, last)
    tl.inline_asm_elementwise("prefetch.global.L1 [$1];\nmov.u32 $0, 0;", "=r,l", [s_rows + ends[None, :]],
                              dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _step(acc, w_base, x_base, code, k0, n_ok, m_ok, K, KX, MODE: tl.constexpr, PERMUTE: tl.constexpr,
          X_IN_ORDER: tl.constexpr, BK: tl.constexpr, EVEN_N: tl.constexpr, TAIL: tl.constexpr):
    """``acc`` plus one ``BK`` step at ``k0`` (a multiple of ``BK``): the weight words loaded,
    decoded under ``code`` and multiplied with ``x``'s tile (``KX`` elements a row). ``TAIL``: the
    step reaches past ``K`` (masked); otherwise the weight's load has no mask along ``K`` (its
    arithmetic is a noticeable part of a step), nor along ``N`` where ``EVEN_N``."""
    WORDS: tl.constexpr = BK // 4
    kw = tl.multiple_of(k0 // 4, WORDS) + tl.arange(0, WORDS)
    if TAIL:
        packed = tl.load(w_base + kw[None, :], mask=n_ok[:, None] & (kw < K // 4)[None, :], other=0)
    elif EVEN_N:
        packed = tl.load(w_base + kw[None, :])  # [BN, BK/4]
    else:
        packed = tl.load(w_base + kw[None, :], mask=n_ok[:, None], other=0)
    v0, v1, v2, v3 = _decode(packed, code, MODE, x_base.dtype.element_ty)
    kk = k0 + tl.arange(0, BK)
    x = tl.load(x_base + kk[None, :], mask=m_ok[:, None] & (kk < KX)[None, :], other=0.0)  # [BM, BK]
    if not X_IN_ORDER:
        x = _logical_x(x, PERMUTE)
    return tl.dot(_logical(v0, v1, v2, v3, PERMUTE), tl.trans(x), acc)


@triton.jit
def mxfp4_matmul_kernel(
    x_ptr, w_ptr, s_ptr, bias_ptr, ids_ptr, y_ptr, workspace_ptr, locks_ptr,
    M, N, K, KX, SPLIT_K, K_PER_SPLIT,
    stride_xa, stride_xm, stride_we, stride_wn, stride_se, stride_sn, stride_ya, stride_ym, stride_be,
    HAS_BIAS: tl.constexpr, HAS_IDS: tl.constexpr, MODE: tl.constexpr, PERMUTE: tl.constexpr,
    X_IN_ORDER: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, EVEN_N: tl.constexpr,
    AHEAD: tl.constexpr,
):
    """``X_IN_ORDER``: ``x`` (``KX`` elements a row) comes in the kernel's ``K`` order already (the
    caller permuted it once, ``K`` padded to whole spans of 128), so it goes from the asynchronous
    copy to the MMA as it is, rather than through registers and shared memory again at every step
    of every program. ``EVEN_N``: ``N`` is a multiple of ``BN``. ``AHEAD`` (0, 1 or 2): how many steps ahead the
    scale bytes are prefetched into L1. They are single bytes, which the software pipeline's
    asynchronous copies (4 bytes or more) do not take, so each step would wait a full memory
    latency for its own; prefetched, they are in L1 when the step loads them. (Carrying them in
    registers from an earlier step instead makes the decoded tile a loop-carried value's
    descendant, which Triton then passes to the MMA through shared memory.)"""
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
    w_base = w_ptr + e * stride_we + n[:, None].to(tl.int64) * stride_wn  # int16 words
    s_base = s_ptr + e * stride_se + n[:, None].to(tl.int64) * stride_sn
    s_rows = s_ptr + e * stride_se + tl.minimum(n, N - 1)[:, None].to(tl.int64) * stride_sn  # rows inside N, to prefetch
    k_first = pid_k * K_PER_SPLIT
    k_stop = tl.minimum(k_first + K_PER_SPLIT, K)
    full = tl.maximum(k_stop - k_first, 0) // BK * BK  # this split's steps that lie inside K
    acc = tl.zeros((BN, BM), dtype=tl.float32)
    for step in range(0, full, BK):
        k0 = k_first + step
        if AHEAD > 0:
            _prefetch_scales(s_rows, k0 + AHEAD * BK, K, BK)
        code = _scales(s_base, k0, n_ok, K, BK)
        acc = _step(acc, w_base, x_base, code, k0, n_ok, m_ok, K, KX, MODE, PERMUTE, X_IN_ORDER, BK, EVEN_N, False)
    if full < k_stop - k_first:  # K's last, partial step
        k0 = k_first + full
        acc = _step(acc, w_base, x_base, _scales(s_base, k0, n_ok, K, BK), k0, n_ok, m_ok, K, KX, MODE, PERMUTE,
                    X_IN_ORDER, BK, EVEN_N, True)
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


@triton.jit
def x_in_order_kernel(x_ptr, out_ptr, K, KX, stride_x, BLOCK: tl.constexpr):
    """``out[r, p] = x[r, src(p)]`` for one row ``r`` of ``x`` (``[rows, K]``) and ``BLOCK``
    positions ``p`` of ``out`` (``[rows, KX]``, ``KX`` = ``K`` rounded up to 128): ``x`` in the
    order ``_logical_x`` gives it, zeros where ``src(p)`` is past ``K``. Within a span of 128,
    position ``16 (2 m + k1) + 8 k0 + 2 t + j`` takes element ``32 t + 8 m + 4 j + 2 k1 + k0``."""
    row = tl.program_id(0).to(tl.int64)
    p = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    r = p % 128
    j, t, k0, k1, m = r % 2, (r // 2) % 4, (r // 8) % 2, (r // 16) % 2, r // 32
    src = p - r + 32 * t + 8 * m + 4 * j + 2 * k1 + k0
    x = tl.load(x_ptr + row * stride_x + src, mask=(src < K) & (p < KX), other=0.0)
    tl.store(out_ptr + row * KX + p, x, mask=p < KX)

