// x ([A, M, K] bfloat16, rows 16-byte aligned) put in the order a decode kernel reads it, in one
// launch: a CTA of 128 threads per span of 128 elements of K, per tile of 8 tokens and per a, which
// copies the tile's span of x into shared memory (one 16-byte load a thread; zeros for tokens past
// M and elements past K), then writes its output, 16 bytes a thread, each gathered from there.
//
// LAYOUT 0 (fp4_wgmma.mma_order_x): the span's NT tiles of 8 tokens (padded) as the warpgroup
// MMA's core matrices: chunk c = 2q + h, half d, token tile, token, position 2t + j holding the
// span's element 32t + 8q + 4j + 2h + d; out is [A, spans * NT * 1024].
// LAYOUT 2 (fp4_wgmma.mma_order_x for a Packing.DECODE weight, whose pairs are consecutive
// elements, thread t's word q in a whole span elements 32q + 8t ..): as LAYOUT 0 with position
// 2t + j holding the span's element 32q + 8t + 4h + 2d + j (in the span K ends inside, read block by
// block: 32t + 8q + 4h + 2d + j).
// LAYOUT 1 (fp4_decode.paired_x): each of the M tokens' span with element 32t + 8q + e moved to
// 32q + 8t + p, e = 0, 4, 1, 5, 2, 6, 3, 7 for p = 0 .. 7; out is [A, M, spans * 128].
//
// Launched dependently, it waits for the previous kernel (which may write x), then lets the
// decode kernel after it start, whose CTAs wait for it in turn (fp4_common.cuh).
//
// Configuration macros (set by the host): LAYOUT, KERNEL.

extern "C" __global__ void __launch_bounds__(128) KERNEL(const u16* __restrict__ x, u16* __restrict__ out, int M,
                                                         int K, int sxa, int sxm, int spans, int NT) {
    __shared__ __align__(16) u16 tile[8][128 + 8];  // 8 more: a row's start 16 bytes on, not on bank 0
    const int s = blockIdx.x, a = blockIdx.y, tokens = 8 * blockIdx.z;
    const int c = threadIdx.x;
    after_previous_kernel();
    let_next_kernel_start();
    {
        const int token = tokens + (c >> 4), k = 128 * s + 8 * (c & 15);
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (token < M && k < K) v = *(const uint4*)(x + (i64)a * sxa + (i64)token * sxm + k);
        *(uint4*)&tile[c >> 4][8 * (c & 15)] = v;
    }
    __syncthreads();
    auto pair = [&](int r, int lo, int hi) { return (u32)tile[r][lo] | ((u32)tile[r][hi] << 16); };
#if LAYOUT == 0 || LAYOUT == 2
    // a pair's second element j = 1 after its first, and the steps of h, d, q and t, in the span
    constexpr int J = LAYOUT == 2 ? 1 : 4, H = LAYOUT == 2 ? 4 : 2, D = LAYOUT == 2 ? 2 : 1;
    const bool by_word = LAYOUT == 2 && 128 * s + 128 <= K;  // a whole span of a Packing.DECODE weight
    const int Q = by_word ? 32 : 8, T = by_word ? 8 : 32;
    const int r = c & 7, rest = c >> 3;  // rest = 2 (2q + h) + d
    const int base = Q * (rest >> 2) + H * ((rest >> 1) & 1) + D * (rest & 1);
    uint4* o = (uint4*)(out + ((i64)a * spans + s) * (NT * 1024)) + (rest * NT + blockIdx.z) * 8 + r;
    *o = make_uint4(pair(r, base, base + J), pair(r, base + T, base + T + J), pair(r, base + 2 * T, base + 2 * T + J),
                    pair(r, base + 3 * T, base + 3 * T + J));
#else
    const int r = c >> 4, q = (c >> 2) & 3, t = c & 3;
    if (tokens + r < M) {
        const int base = 32 * t + 8 * q;
        uint4* o = (uint4*)(out + ((i64)a * M + tokens + r) * (spans * 128) + 128 * s + 32 * q + 8 * t);
        *o = make_uint4(pair(r, base, base + 4), pair(r, base + 1, base + 5), pair(r, base + 2, base + 6),
                        pair(r, base + 3, base + 7));
    }
#endif
}
