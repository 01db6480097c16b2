// The MXFP4 decode matmul with Hopper's warpgroup MMA (wgmma, sm_90a): y[a] = x[a] @ W[e].T
// (+ bias[e]) for up to 64 rows of x. The weight is decoded in registers (fp4_common.cuh) into the
// MMA's A operand, 64 rows per warpgroup (16 per warp, as mma.sync's A); x, the B operand (n = 8 NT
// tokens), is read by the tensor cores from shared memory: one copy of a span of x serves every warp
// of the CTA, and no register holds it, where fp4_decode.cu's warps each read all of x for their 16
// rows. That is what 32 to 64 tokens need.
//
// A CTA (WG warpgroups, 64 WG rows) takes the spans [z per, (z + 1) per) of K (z = blockIdx.z, a
// split of K across CTAs that fills the SMs where N alone does not). x comes into shared memory span
// by span, by one bulk copy (TMA) per span into a ring of SLOTS slots, counted in by mbarriers: the
// host (`mma_order_x`) put each span's elements, tokens padded to 8 NT and K to whole spans with
// zeros, in the layout the MMA's descriptors read without swizzling ("core matrices" of 8 tokens x 8
// elements, 16 bytes a token), K permuted as the decoder pairs the weight: in a span's chunk
// c = 2q + h of 16 elements, core matrix d (elements 8d .. 8d+7 of the chunk as the MMA counts them),
// position 2t + j holds element 32t + 8q + 2h + d + 4j of the span (PACKING 1, the weight's pairs
// consecutive elements and, in a whole span, thread t's word q elements 32q + 8t ..: 32q + 8t + 4h +
// 2d + j; in the span K ends inside, 32t + 8q + 4h + 2d + j). Core matrices of one chunk: the
// 8-token groups 128 bytes apart (the stride byte offset), the two halves of K NT x 128 bytes apart
// (the leading byte offset); chunks one after another. (x put there by the CTA's own threads needs
// a proxy fence before the MMA reads it, which waits for every load the thread has in flight; the
// bulk copy writes as the MMA reads, by the async proxy.)
//
// The weight streams through a ring of S stages in shared memory by asynchronous copies, S - 1 spans
// in flight. Its K chunks are issued as asynchronous MMAs into the same accumulators, which run
// while the next copies are issued. PAIRS 0: a whole span decoded, its eight MMAs issued, and the A
// registers written again once they are done (wgmma.wait_group 0). (Two sets of a span's A
// registers, or the weight's spans in flight in registers, leave ptxas too few registers to
// pipeline the MMAs: it serializes them.) PAIRS 1: two chunks at a time into one of two sets of A
// registers (8 each), the next two decoded while the MMAs of these run (wgmma.wait_group 1).
//
// With one split, the CTA writes bfloat16 y (+ bias). With several, each CTA writes its float32
// partial sums (PAIRS 0: in y's order, partial[a][z][token][n]; PAIRS 1: in its threads' order,
// partial[a][tile][z][token tile][thread][4]) and counts itself in at locks[a][blockIdx.x]; the last
// CTA of a tile adds the partial sums in split order (the result does not depend on timing), writes
// y and sets the count back to zero. CLUSTER 1: a tile's splits are launched as one thread block
// cluster and add their sums through the cluster's shared memory, in the same order: no float32
// round trip through L2, no fence and no count, whose latencies each CTA's end waits for.
//
// Configuration macros (set by the host): NT, WG, S, SLOTS, MINB, PAIRS, PACKING, PREFETCH, HAS_BIAS (0 none, 1 bfloat16, 2 float32),
// HAS_IDS, G (spans a stage of the weight's ring), CLUSTER, TRACE, KERNEL. The host also puts `wgmma_chunk` (one m64n(8 NT)k16 MMA, its accumulator
// operands spelled out) before this source.

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(PENDING) : "memory");
}
// The compiler sees the MMA's registers as read or written when its instruction is issued; these
// keep them (and their values) where they are until the MMAs using them are known to be done.
__device__ __forceinline__ void keep(float& v) { asm volatile("" : "+f"(v)::"memory"); }
__device__ __forceinline__ void keep(u32& v) { asm volatile("" : "+r"(v)::"memory"); }
template <class T, int N>
__device__ __forceinline__ void keep(T (&v)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) keep(v[i]);
}

// TRACE 1 (a diagnostic build, never the one the library runs): warpgroup 0's first thread of each
// CTA records where its time went (``fp4_wgmma.TRACE_FIELDS``): the global timer at its start, once
// the previous kernel is done, after its main loop and at its end, and the SM's cycles spent waiting
// for the weight's copies, for x's, for the MMAs, for the scale bytes, and in the main loop.
#if TRACE
#define TRACE_NOW(slot) \
    if (threadIdx.x == 0) trace[(i64)blockIdx_linear * TRACE_SLOTS + (slot)] = globaltimer()
#define TRACE_ZERO(slot) \
    if (threadIdx.x == 0) trace[(i64)blockIdx_linear * TRACE_SLOTS + (slot)] = 0
#define TIC(name) const long long tic_##name = clock64()
#define TOC(name, slot) cycles[slot] += clock64() - tic_##name
#else
#define TRACE_NOW(slot)
#define TRACE_ZERO(slot)
#define TIC(name)
#define TOC(name, slot)
#endif
#define TRACE_SLOTS 16
__device__ __forceinline__ unsigned long long globaltimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}

// The mbarriers that count x's bulk copies in: one arrival (the copying thread's, with the bytes to
// expect), then the copy's bytes.
__device__ __forceinline__ void barrier_init(u32 bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void bulk_copy(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile(
        "{ .reg .b64 state; mbarrier.arrive.expect_tx.shared::cta.b64 state, [%2], %1; }\n"
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%3], %1, [%2];"
        ::"r"(dst), "r"(bytes), "r"(bar), "l"(src) : "memory");
}
__device__ __forceinline__ void barrier_wait(u32 bar, u32 parity) {
    u32 done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}

// A thread block cluster's CTAs (CLUSTER: a row tile's splits): every thread of each arrives, then
// waits for all (release and acquire: the shared memory written before is seen after); `cluster_map`
// gives the address in CTA `rank`'s shared memory of this CTA's shared address `address`.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ u32 cluster_map(u32 address, u32 rank) {
    u32 d;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(d) : "r"(address), "r"(rank));
    return d;
}
__device__ __forceinline__ float4 load_cluster(u32 address) {
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(address) : "memory");
    return v;
}

// One split's four sums of token tile j (a thread's, in its order) added to acc.
__device__ __forceinline__ void add_sums(float (&acc)[NT * 4], int j, float4 v) {
    acc[4 * j] += v.x;
    acc[4 * j + 1] += v.y;
    acc[4 * j + 2] += v.z;
    acc[4 * j + 3] += v.w;
}

// A shared-memory matrix descriptor without swizzling: start address, leading byte offset (between
// the core matrices along K) and stride byte offset (between those along N), in 16-byte units.
__device__ __forceinline__ unsigned long long descriptor(u32 address, u32 leading, u32 stride) {
    return (unsigned long long)((address & 0x3FFFFu) >> 4) | ((unsigned long long)((leading >> 4) & 0x3FFFu) << 16) |
           ((unsigned long long)((stride >> 4) & 0x3FFFu) << 32);
}

// Pair q of a span of this thread's two rows (g, g + 8 of its warp's 16): K chunks 2q and 2q + 1's
// A registers.
template <bool TWO>
__device__ __forceinline__ void decode_pair(const u32 (&w)[2][4], const u32 (&s)[2], int q, u32 (&a0)[4],
                                            u32 (&a1)[4]) {
    u32 f1[2], f2[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) word_factors<TWO>(s[h], q, f1[h], f2[h]);
    u32 lo[4], hi[4];
    decode<TWO>(w[0][q], f1[0], f2[0], lo);
    decode<TWO>(w[1][q], f1[1], f2[1], hi);
    a0[0] = lo[0], a0[1] = hi[0], a0[2] = lo[1], a0[3] = hi[1];
    a1[0] = lo[2], a1[1] = hi[2], a1[2] = lo[3], a1[3] = hi[3];
}

// The whole span: the eight K chunks' A registers.
template <bool TWO>
__device__ __forceinline__ void decode_span(const u32 (&w)[2][4], const u32 (&s)[2], u32 (&a)[8][4]) {
#pragma unroll
    for (int q = 0; q < 4; ++q) decode_pair<TWO>(w, s, q, a[2 * q], a[2 * q + 1]);
}

// fn(i, n, token) for each of a thread's outputs within [N rows, M tokens]: acc[i = 4j + 2h + c] is
// row `row` + 8h, token 8j + 2t + c.
template <class F>
__device__ __forceinline__ void each_output(int row, int t, int M, int N, F&& fn) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int n = row + 8 * h;
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const int token = 8 * j + 2 * t + c;
                if (n < N && token < M) fn(4 * j + 2 * h + c, n, token);
            }
    }
}

__device__ __forceinline__ float bias_of(const void* bias, i64 at) {
#if HAS_BIAS == 1  // bfloat16
    return __uint_as_float(((u32)((const u16*)bias)[at]) << 16);
#elif HAS_BIAS == 2  // float32
    return ((const float*)bias)[at];
#else
    return 0.0f;
#endif
}

extern "C" __global__ void __launch_bounds__(WG * 128, MINB) KERNEL(
    const u16* __restrict__ x, const u8* __restrict__ w, const u8* __restrict__ sc, const void* __restrict__ bias,
    const int* __restrict__ ids, u16* __restrict__ y, float* __restrict__ partial, int* __restrict__ locks, int M,
    int N, int K, int per, int sxa, int swe, int swn, int sse, int ssn, int sya, int sym, int sbe,
    unsigned long long* __restrict__ trace) {
    extern __shared__ __align__(128) uint4 xs[];  // x's ring (SLOTS spans), then the weight's (S stages)
    constexpr int THREADS = WG * 128;
    constexpr u32 CHUNK = 2 * NT * 128;  // bytes of x per K chunk of 16
    constexpr u32 SLOT = 8 * CHUNK;      // bytes of x per span
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int a = blockIdx.y, z = blockIdx.z, splits = gridDim.z;
    const int blocks = K >> 5;
    const int spans = (blocks + 3) >> 2;
    const int first = z * per, last = min(first + per, spans);
    const int whole = blocks >> 2;  // spans whose four blocks all exist
    const u32 base = shared_address(xs);
#if TRACE
    const i64 blockIdx_linear = ((i64)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    long long cycles[5] = {0, 0, 0, 0, 0};  // weight, x, MMAs, scales, the main loop
#endif
    TRACE_NOW(0);

    // This thread's rows: g and g + 8 of its warp's 16 (past N: row N - 1, not written).
    const int row = blockIdx.x * (64 * WG) + warp * 16 + g;
    if (!HAS_IDS && t == 0) {  // the expert's id is another kernel's output
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const i64 n = min(row + 8 * h, N - 1);
            prefetch_row(w + a * (i64)swe + n * swn, sc + a * (i64)sse + n * ssn, first, last);
        }
    }
    after_previous_kernel();
    TRACE_NOW(1);
    const i64 e = HAS_IDS ? (i64)ids[a] : (i64)a;
    const u8* wp[2];
    const u8* sp[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const i64 n = min(row + 8 * h, N - 1);
        wp[h] = w + e * swe + n * swn + 16 * (4 * first + t);
        sp[h] = sc + e * sse + n * ssn + 4 * first + SCALE_T * t;
    }
    // The weight streams through a ring of S stages in shared memory by asynchronous copies, each
    // stage G spans (one commit group: a warp asks for 64 G contiguous bytes of each of its rows at
    // once), S - 1 stages in flight; a thread reads back only the 32 bytes a span it copied itself.
    // Group `q` (spans first + G q ..) copied into `stage` (past K, in the span K ends inside: zeros),
    // the pointers moved on; span i read back from `weight_at(i)`.
    const u32 ring = base + SLOTS * SLOT + threadIdx.x * 16;
    auto issue_group = [&](int q, int stage) {
#pragma unroll
        for (int j = 0; j < G; ++j) {
            const int at = first + G * q + j;
            if (at < last) {
                const bool ok = at < whole || 4 * at + t < blocks;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    copy_weight(ring + (u32)((stage * G + j) * 2 + h) * THREADS * 16, ok ? (const void*)wp[h] : w,
                                ok ? 16u : 0u);
                    wp[h] += 64;
                }
            }
        }
        copies_commit();  // empty past the last span: the count of groups in flight stays S - 1
    };
    auto weight_at = [&](int i, int h) {
        if constexpr (G == 1) return ring + (u32)((i % S) * 2 + h) * THREADS * 16;
        return ring + (u32)((((i / G) % S) * G + i % G) * 2 + h) * THREADS * 16;
    };
    // Once span i is read back (its group's last span), the group S - 1 on copied into the stage the
    // group before it left.
    auto weight_wait = [&](int i) {
        if (G == 1 || i % G == 0) copies_wait<S - 2>();
    };
    auto weight_next = [&](int i) {
        if constexpr (G == 1)
            issue_group(i + S - 1, (i + S - 1) % S);
        else if (i % G == G - 1)
            issue_group(i / G + S - 1, (i / G + S - 1) % S);
    };
    auto load_scales = [&](u32 (&sv)[2], int at) {  // scale words (fp4_common.cuh)
        const bool ok = at < last && (at < whole || 4 * at + t < blocks);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            sv[h] = ok ? span_scales(sp[h], t, at >= whole) : NO_SCALE;
            sp[h] += 4;
        }
    };
    // x's spans stream through a ring of SLOTS slots by bulk copies (the host put each span's
    // elements in the slot's layout, one contiguous run), which thread 0 issues SLOTS - 1 spans
    // ahead; slot j's mbarrier completes a phase per span copied in.
    __shared__ __align__(8) unsigned long long arrived[SLOTS];
    const u32 bars = shared_address(arrived);
    const u16* xa = x + (i64)a * sxa;
    auto issue_x = [&](int at) {
        if (threadIdx.x == 0 && at < last)
            bulk_copy(base + (u32)((at - first) % SLOTS) * SLOT, xa + (i64)at * (SLOT / 2), SLOT,
                      bars + 8 * ((at - first) % SLOTS));
    };
    if (threadIdx.x == 0) {
        for (int j = 0; j < SLOTS; ++j) barrier_init(bars + 8 * j);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    float acc[NT * 4];
#pragma unroll
    for (int i = 0; i < NT * 4; ++i) acc[i] = 0.0f;
    u32 sv[2][2];  // the scale bytes of the span being decoded (J) and the next (1 - J)

    // Prologue: x's first SLOTS - 1 spans and the weight's first S - 1 in flight, the first two
    // spans' scale bytes loaded.
    for (int j = 0; j < SLOTS - 1; ++j) issue_x(first + j);
#pragma unroll
    for (int j = 0; j < S - 1; ++j) issue_group(j, j);
    load_scales(sv[0], first);
    load_scales(sv[1], first + 1);

    // Span first + i (J = i mod 2, for the registers' indices): once the MMAs of span i - 1 are done
    // in every warpgroup (with the A registers and x's slot), x's span i + SLOTS - 1 copied into that
    // slot; the weight's copies waited for and decoded; x's slot waited for; the MMAs issued; while
    // they run, the weight's span i + S - 1 copied (into the stage span i - 1 left) and span i + 2's
    // scale bytes loaded into the registers span i's leave: a whole span's time for their latency
    // (loaded one span ahead, the next span's vote on them waits for the load).
#if PAIRS
    // The MMAs of a span in four groups of two K chunks, A registers in two sets: the pair q + 1 is
    // decoded into one set while the MMAs of pair q, which read the other, run (wgmma.wait_group 1:
    // the group before the newest is done, and with it the set about to be written). x's slot of
    // span i - 1 is free once the first group of span i is issued (every group of span i - 1 done).
    u32 av[2][2][4];
    auto step = [&](const int J, int i) {
        const int at = first + i;
        TIC(weight);
        weight_wait(i);
        u32 wv[2][4];
#pragma unroll
        for (int h = 0; h < 2; ++h) load_shared(weight_at(i, h), wv[h]);
        TOC(weight, 0);
        TIC(scales);
        const bool two = __any_sync(FULL_MASK, scale_big(sv[J][0]) || scale_big(sv[J][1]));
        TOC(scales, 3);
        const u32 span = base + (u32)(i % SLOTS) * SLOT;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            u32 (&set)[2][4] = av[q & 1];
            TIC(mma);
            wgmma_wait<1>();
            keep(set);
            TOC(mma, 2);
            if (q == 1) {
                if (WG > 1) __syncthreads();
                issue_x(at + SLOTS - 1);
            }
            if (two)
                decode_pair<true>(wv, sv[J], q, set[0], set[1]);
            else
                decode_pair<false>(wv, sv[J], q, set[0], set[1]);
            if (q == 0) {
                TIC(x);
                barrier_wait(bars + 8 * (i % SLOTS), (i / SLOTS) & 1);
                TOC(x, 1);
            }
            wgmma_fence();
#pragma unroll
            for (int h = 0; h < 2; ++h)
                wgmma_chunk(acc, set[h][0], set[h][1], set[h][2], set[h][3],
                            descriptor(span + (2 * q + h) * CHUNK, NT * 128, 128));
            wgmma_commit();
        }
        weight_next(i);
        load_scales(sv[J], at + 2);
    };
#else
    u32 av[8][4];
    auto step = [&](const int J, int i) {  // J a literal at each call: the registers' indices are constants
        const int at = first + i;
        TIC(mma);
        wgmma_wait<0>();
        keep(av);
        TOC(mma, 2);
        if (WG > 1) __syncthreads();
        issue_x(at + SLOTS - 1);
        TIC(weight);
        weight_wait(i);
        u32 wv[2][4];
#pragma unroll
        for (int h = 0; h < 2; ++h) load_shared(weight_at(i, h), wv[h]);
        TOC(weight, 0);
        TIC(scales);
        const bool two = __any_sync(FULL_MASK, scale_big(sv[J][0]) || scale_big(sv[J][1]));
        TOC(scales, 3);
        if (two)
            decode_span<true>(wv, sv[J], av);
        else
            decode_span<false>(wv, sv[J], av);
        TIC(x);
        barrier_wait(bars + 8 * (i % SLOTS), (i / SLOTS) & 1);
        TOC(x, 1);
        wgmma_fence();
        const u32 span = base + (u32)(i % SLOTS) * SLOT;
#pragma unroll
        for (int c = 0; c < 8; ++c)
            wgmma_chunk(acc, av[c][0], av[c][1], av[c][2], av[c][3], descriptor(span + c * CHUNK, NT * 128, 128));
        wgmma_commit();
        weight_next(i);
        load_scales(sv[J], at + 2);
    };
#endif
    const int count = last - first;
    TRACE_NOW(2);
    TIC(loop);
    for (int i = 0; i < count; i += 2) {
        step(0, i);
        if (i + 1 < count) step(1, i + 1);
    }
    wgmma_wait<0>();
    keep(av);
    keep(acc);
    TOC(loop, 4);
    TRACE_NOW(3);
#if TRACE
    if (threadIdx.x == 0)
        for (int c = 0; c < 5; ++c) trace[blockIdx_linear * TRACE_SLOTS + 6 + c] = (unsigned long long)cycles[c];
    if (threadIdx.x == 0) {
        u32 sm;
        asm volatile("mov.u32 %0, %smid;" : "=r"(sm));
        trace[blockIdx_linear * TRACE_SLOTS + 11] = sm;
        trace[blockIdx_linear * TRACE_SLOTS + 12] = (unsigned long long)count;
    }
#endif
    let_next_kernel_start();

    u16* ya = y + (i64)a * sya;
#if CLUSTER
    // The row tile's splits are one cluster (CTA rank z): each puts its sums in its own shared memory
    // (x's ring, which no copy or MMA uses once every warpgroup's MMAs are done), in its threads'
    // order; split 0 adds them in split order from every CTA's shared memory, as the global path adds
    // them (the same bits), while the others wait (their shared memory must outlive the reads).
    if (splits > 1) {
        if (WG > 1) __syncthreads();  // another warpgroup's last MMAs may still read x's slot
        const u32 mine = base + threadIdx.x * 16;
#pragma unroll
        for (int j = 0; j < NT; ++j)
            asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(mine + j * THREADS * 16), "f"(acc[4 * j]),
                         "f"(acc[4 * j + 1]), "f"(acc[4 * j + 2]), "f"(acc[4 * j + 3]) : "memory");
        cluster_sync();
        if (z == 0) {
#pragma unroll
            for (int i = 0; i < NT * 4; ++i) acc[i] = 0.0f;
            for (int p = 0; p < splits; ++p) {
                const u32 theirs = cluster_map(mine, (u32)p);
                float4 v[NT];  // all loaded before any is added
#pragma unroll
                for (int j = 0; j < NT; ++j) v[j] = load_cluster(theirs + j * THREADS * 16);
#pragma unroll
                for (int j = 0; j < NT; ++j) add_sums(acc, j, v[j]);
            }
        }
        cluster_sync();
        if (z != 0) {
            TRACE_NOW(4);
            TRACE_ZERO(5);
            return;
        }
    }
#else
    if (splits > 1) {
#if PAIRS
        // The sums of this tile's splits in the order of their threads: token tile j's four of every
        // thread together ([a][tile][split][j][thread]), so that one base address serves them all.
        float4* tile = (float4*)partial + ((i64)a * gridDim.x + blockIdx.x) * splits * NT * THREADS + threadIdx.x;
#pragma unroll
        for (int j = 0; j < NT; ++j)
            __stcg(tile + (z * NT + j) * THREADS, make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]));
#else
        float* mine = partial + (i64)(a * splits + z) * M * N;
        each_output(row, t, M, N, [&](int i, int n, int token) { mine[(i64)token * N + n] = acc[i]; });
#endif
        __threadfence();
        __syncthreads();
        __shared__ int is_last;
        if (threadIdx.x == 0) {
            int* count = locks + a * gridDim.x + blockIdx.x;
            is_last = atomicAdd(count, 1) == splits - 1;
            if (is_last) *count = 0;
        }
        __syncthreads();
        if (!is_last) {
            TRACE_NOW(4);
            TRACE_ZERO(5);
            return;
        }
        __threadfence();
        // Split by split, each adding all of this thread's sums (their loads in flight together), so
        // that every sum is taken in split order.
#pragma unroll
        for (int i = 0; i < NT * 4; ++i) acc[i] = 0.0f;
#if PAIRS
        for (int p = 0; p < splits; ++p) {
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                add_sums(acc, j, __ldcg(tile + (p * NT + j) * THREADS));
            }
        }
#else
        const float* all = partial + (i64)a * splits * M * N;
        for (int p = 0; p < splits; ++p) {
            const float* part = all + (i64)p * M * N;
            each_output(row, t, M, N, [&](int i, int n, int token) { acc[i] += __ldcg(part + (i64)token * N + n); });
        }
#endif
    }
#endif
    float add[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) add[h] = row + 8 * h < N ? bias_of(bias, e * sbe + row + 8 * h) : 0.0f;
    each_output(row, t, M, N, [&](int i, int n, int token) {
        ya[(i64)token * sym + n] = to_bf16(acc[i] + add[(n - row) >> 3]);
    });
    TRACE_NOW(5);
    TRACE_ZERO(4);
}
