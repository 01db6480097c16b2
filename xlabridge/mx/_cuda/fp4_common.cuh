// Shared by the MXFP4 decode kernels (fp4_decode.cu, fp4_wgmma.cu): the host puts this file
// before each kernel's source. The loads and asynchronous copies, the E2M1 decoder, the conversions.
//
// The decoder: thread t of a quad takes the whole MXFP4 block t of every 128 elements of K (a
// span); within a block, 32-bit word q holds elements 8q .. 8q+7 (element 2i in the low nibble
// of byte i), and `decode` turns nibble k of both 16-bit halves of a word into one bfloat16 pair
// P(q, k) = (e[8q+k], e[8q+4+k]) (PACKING 1, the weight repacked offline: (e[8q+2k], e[8q+2k+1]),
// x's own pairs; and in a whole span, thread t's 16 bytes hold elements 32q + 8t .. 32q + 8t + 7 of
// the span as its word q, so that its word q has the scale byte of block q). An MMA's K chunk 2q+h
// (16 elements) takes P(q, 2h) as its A register for k = 2t, 2t+1 and P(q, 2h+1) for k = 2t+8,
// 2t+9: x must be paired the same way.
//
// Decoding: nibble k of both halves, masked, times 0x1040 (0x104 for odd k) is two shifted copies
// of it that do not overlap; 0x81C0 keeps the exponent and mantissa bits of one copy and the sign
// bit of the other, where a bfloat16 has them: the E2M1 value times 2^-126 (the subnormal 0.5
// included). One bfloat16x2 multiplication by 2^(s-1) (s the block's scale byte) gives the value
// times 2^(s-127) exactly (two significant bits; bfloat16 keeps subnormals) wherever 2^(s-1) is a
// bfloat16, s <= 128; above, a warp takes the two-multiplication path (2^126, then 2^(s-127),
// NaN for s = 255).

#pragma once

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;
typedef long long i64;

#define FULL_MASK 0xffffffffu

__device__ __forceinline__ void load_weight(const u8* p, u32& a, u32& b, u32& c, u32& d) {
    // read once per call: not kept in L1
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(p));
}

__device__ __forceinline__ void load_x(const u16* p, u32& a, u32& b, u32& c, u32& d) {
    // read by every warp of a CTA that covers the same K: kept in L1
    asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(p));
}

__device__ __forceinline__ u32 load_scale(const u8* p) {
    // kept in L1: a row's next seven spans have their scale bytes in the same 32-byte sector
    u16 v;
    asm("ld.global.nc.u8 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}

__device__ __forceinline__ u32 permute(u32 a, u32 b, u32 selector) {
    u32 d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
    return d;
}

__device__ __forceinline__ u32 bf16x2_mul(u32 a, u32 b) {
    u32 d;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

// Nibble k of both 16-bit halves of w as a bfloat16 pair times 2^-126 (k = 0, 1 from w; 2, 3 from
// w >> 8 as k = 0, 1).
__device__ __forceinline__ u32 nibble_pair(u32 w, u32 mask, u32 times) {
    return ((w & mask) * times) & 0x81C081C0u;
}

// PACKING 1 (``_fp4_packing.Packing.DECODE``): the word's bits were moved offline so that pair k is
// (e[8q+2k], e[8q+2k+1]), consecutive elements, and each pair comes out of the word in place (pair 0),
// rotated right by 3 or 6 bits (pairs 1, 2), or as three shifted copies of the bits 0x001B001B that
// do not overlap (pair 3: one multiplication by 2^3 + 2^8 + 2^14, no carries), masked to 0x81C081C0:
// eight integer operations a word where the spec's layout takes thirteen; the same bfloat16 values.
#ifndef PACKING
#define PACKING 0
#endif
#define PAIR_MASK 0x81C081C0u

template <bool TWO>
__device__ __forceinline__ void decode(u32 w, u32 f1, u32 f2, u32 (&p)[4]) {
#if PACKING
    p[0] = bf16x2_mul(w & PAIR_MASK, f1);
    p[1] = bf16x2_mul(__funnelshift_r(w, w, 3) & PAIR_MASK, f1);
    p[2] = bf16x2_mul(__funnelshift_r(w, w, 6) & PAIR_MASK, f1);
    p[3] = bf16x2_mul(((w & 0x001B001Bu) * 0x4108u) & PAIR_MASK, f1);
#else
    const u32 v = w >> 8;
    p[0] = bf16x2_mul(nibble_pair(w, 0x000F000Fu, 0x1040u), f1);
    p[1] = bf16x2_mul(nibble_pair(w, 0x00F000F0u, 0x104u), f1);
    p[2] = bf16x2_mul(nibble_pair(v, 0x000F000Fu, 0x1040u), f1);
    p[3] = bf16x2_mul(nibble_pair(v, 0x00F000F0u, 0x104u), f1);
#endif
    if (TWO) {
#pragma unroll
        for (int k = 0; k < 4; ++k) p[k] = bf16x2_mul(p[k], f2);
    }
}

__device__ __forceinline__ u16 to_bf16(float v) {
    u16 d;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(d) : "f"(v));
    return d;
}

__device__ __forceinline__ u32 shared_address(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}


// The factors `decode` multiplies by for scale byte s: 2^(s-1) (f1) where that is a bfloat16 (s <= 128);
// else (TWO) 2^126 (f1), then 2^(s-127) (f2; NaN for s = 255).
template <bool TWO>
__device__ __forceinline__ void scale_factors(u32 s, u32& f1, u32& f2) {
    if (TWO) {
        f1 = 0x7E807E80u;  // 2^126
        const u32 bits = s == 255u ? 0x7FC0u : (s == 0u ? 0x0040u : (s << 7));  // 2^(s-127)
        f2 = bits * 0x10001u;
    } else {
        f1 = ((s + 126u) << 7) * 0x10001u;  // 2^(s-1)
        f2 = 0u;
    }
}

// A thread's scale "word" for its 16 bytes of a span: PACKING 1, byte q the scale byte of its word q
// (a whole span: the span's four blocks, whose bytes lie together; the span K ends inside, read block
// by block: the thread's block's byte four times); PACKING 0, the thread's block's byte.
// `word_factors`: scale_factors for word q.
template <bool TWO>
__device__ __forceinline__ void word_factors(u32 s, int q, u32& f1, u32& f2) {
#if PACKING
    if (TWO) {
        scale_factors<true>((s >> (8 * q)) & 0xFFu, f1, f2);
    } else {
        // 2^(s-1) as above from byte q of s + 126 (all bytes at once, no carries: each at most 128)
        // put in both halves: two operations a word, one a span
        f1 = permute(s + 0x7E7E7E7Eu, 0u, 0x4040u | (u32)q | ((u32)q << 8)) << 7;
        f2 = 0u;
    }
#else
    scale_factors<TWO>(s, f1, f2);
#endif
}

// Whether a byte of scale word s is above 128 (the two-multiplication path).
__device__ __forceinline__ bool scale_big(u32 s) {
    return (s & ((s & 0x7F7F7F7Fu) + 0x7F7F7F7Fu) & 0x80808080u) != 0u;
}

// PACKING 1: the four scale bytes at p (a whole span's), in one load where the host found them
// 4-byte aligned (SCALE_ALIGN 4), two (2) or four (1).
#ifndef SCALE_ALIGN
#define SCALE_ALIGN 1
#endif
__device__ __forceinline__ u32 load_scale_word(const u8* p) {
    u32 v;
#if SCALE_ALIGN == 4
    asm("ld.global.nc.u32 %0, [%1];" : "=r"(v) : "l"(p));
#elif SCALE_ALIGN == 2
    u16 lo, hi;
    asm("ld.global.nc.u16 %0, [%1];" : "=h"(lo) : "l"(p));
    asm("ld.global.nc.u16 %0, [%1];" : "=h"(hi) : "l"(p + 2));
    v = (u32)lo | ((u32)hi << 16);
#else
    v = load_scale(p) | (load_scale(p + 1) << 8) | (load_scale(p + 2) << 16) | (load_scale(p + 3) << 24);
#endif
    return v;
}

// This thread's scale word of a span from the span's scale bytes at p (PACKING 0: p is this thread's
// block's byte); `tail`: the span K ends inside.
__device__ __forceinline__ u32 span_scales(const u8* p, int t, bool tail) {
#if PACKING
    return tail ? load_scale(p + t) * 0x01010101u : load_scale_word(p);
#else
    return load_scale(p);
#endif
}
// The scale word of a block past K (its elements read as zeros).
#define NO_SCALE (PACKING ? 0x7F7F7F7Fu : 127u)
// Where a thread's scale pointer starts in a span: PACKING 1, the span's first byte; else its block's.
#define SCALE_T (PACKING ? 0 : 1)

__device__ __forceinline__ void load_shared(u32 address, u32 (&v)[4]) {
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                 : "r"(address) : "memory");
}

// 16 bytes from global to shared memory without registers; `bytes` (0 or 16) read, the rest zeros.
// .cg: the weight, read once, not kept in L1; .ca: x, read by every warp covering the same K.
__device__ __forceinline__ void copy_weight(u32 dst, const void* src, u32 bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}

__device__ __forceinline__ void copy_x(u32 dst, const void* src, u32 bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}

__device__ __forceinline__ void copies_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int PENDING>
__device__ __forceinline__ void copies_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
}

// Launched dependently (the host's `dependent`), a kernel's CTAs may start while the stream's
// previous kernel finishes: before `after_previous_kernel` they read and write nothing that kernel
// may touch; what they do there is bring their first weight bytes into L2 (a prefetch is no read:
// L2 is where every write lands, so the loads after see the newest bytes). `let_next_kernel_start`,
// once a CTA's loads are issued, lets the next dependent kernel's CTAs take the SMs as these finish.
// Both are no-ops in a plain launch.
__device__ __forceinline__ void after_previous_kernel() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void let_next_kernel_start() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// `bytes` of a row of the weight from `p` into L2 (16-byte aligned runs; skipped otherwise).
__device__ __forceinline__ void prefetch_l2(const void* p, u32 bytes) {
    if (bytes && (((unsigned long long)p | bytes) & 15u) == 0)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

__device__ __forceinline__ void prefetch_line(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p) : "memory");
}

// Before `after_previous_kernel`, by one thread of a row's four: the first PREFETCH spans of
// [first, last) of the weight's row (64 bytes a span) and the line of its scale bytes there.
__device__ __forceinline__ void prefetch_row(const u8* row, const u8* scales, int first, int last) {
    const int count = min(last - first, PREFETCH);
    if (count > 0) {
        prefetch_l2(row + 64 * (i64)first, 64u * (u32)count);
        prefetch_line(scales + 4 * first);
    }
}
