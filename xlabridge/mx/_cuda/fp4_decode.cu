// The MXFP4 decode matmul on Hopper: y[a] = x[a] @ W[e].T (+ bias[e]) for up to 64 rows of x,
// W[e] ([N, K]) read as MXFP4 bytes and decoded in the registers that feed the tensor cores
// (mma.sync m16n8k16, bfloat16 in, float32 accumulation): no bfloat16 copy of the weight is made.
//
// The weight is the MMA's A operand (its rows fill the MMA's 16-row side; x's rows, the tokens,
// are the 8-column side, NT tiles of 8), decoded as fp4_common.cuh says: each thread reads 16
// contiguous bytes of a row per span (one 16-byte load), one scale byte, and the 32 elements of x
// its block covers (64 bytes), paired as the decoder pairs the weight's by byte permutes of x's
// natural pairs.
//
// A CTA has WN x WK warps: WN warps side by side along N (RT tiles of 16 rows each) sharing x's
// elements through L1, WK warps splitting K into contiguous ranges of spans, whose partial sums the
// CTA adds in shared memory in warp order (the result does not depend on timing). Each thread's
// addresses are set once and moved on span by span; rows past N and tokens past M read row N - 1
// and token M - 1 instead (their results are not written), so only the span K ends inside is read
// with checks.
//
// Two ways to keep loads in flight: ASYNC = 0 holds them in registers (U spans a step; DB: the next
// step's loads issued before this step's arithmetic; X_EARLY: x's words of a span loaded with the
// weight's, not when the arithmetic reaches them); ASYNC = 1 streams each warp's spans through a
// ring of S stages in shared memory by asynchronous copies (X_ASYNC: x's elements too, else x is
// read from global memory through L1 at each span). X_PAIRED: the host gave x with each 8 elements
// in the order the MMA pairs them (0, 4, 1, 5, 2, 6, 3, 7), so no byte permutes are needed, and
// each span's 8-element chunks in the order (q, t), K padded with zeros to a whole span: the four
// threads of a quad then read one 64-byte run of a token's row per load, not four 16-byte pieces
// 64 bytes apart, half the L1 wavefronts per load.
//
// PACKING 1: the weight was repacked offline (_fp4_packing.Packing.DECODE) so that the decoder's
// pairs are consecutive elements, x's own (no byte permutes), and so that in a whole span thread t's
// word q holds elements 32q + 8t .. 32q + 8t + 7: the quad's loads of x for word q are one 64-byte
// run of x as it lies in memory (what X_PAIRED's extra launch gives the spec layout), and each thread
// reads its span's four scale bytes, one factor per word. The span K ends inside is read block by
// block, as PACKING 0 reads every span.
//
// KS > 0: a CTA takes KS spans of K (blockIdx.z: a split of K across CTAs), not the whole of it, so
// that a CTA can cover many rows (WN warps along N sharing x through L1) and the grid still fill the
// SMs: x is read from L2 once per CTA, and a CTA of 16 RT WN rows taking a K-th of it reads
// 1 / (RT WN) of what CTAs of 16 rows taking all of K read. The CTAs of a row tile's splits write
// their float32 sums (split_sums[a][tile][z][thread order]) and count themselves in at
// locks[a][tile]; the last adds them in split order (the result does not depend on timing), writes y
// and sets the count back to zero.
//
// AS = 2: two sets of accumulators, the two MMAs of each K chunk pair into one each (added at the
// end), so that a span's MMAs into one accumulator form chains of 4, not 8, dependent MMAs.
//
// PROBE (benchmarks only, register path): 1 loads without the arithmetic, 2 the arithmetic without
// the loads; 0 otherwise.
//
// Configuration macros (set by the host): NT, RT, WN, WK, U, DB, X_EARLY, ASYNC, S, X_ASYNC,
// X_PAIRED, PACKING, KS, AS, PROBE, MINB (CTAs per SM the registers are budgeted for), HAS_BIAS (0 none, 1 bfloat16,
// 2 float32), HAS_IDS, KERNEL.

// Elements between a thread's chunk q and q + 1 of x in a span, and between threads t and t + 1.
#define X_CHUNK ((X_PAIRED || PACKING) ? 32 : 8)
#define X_T ((X_PAIRED || PACKING) ? 8 : 32)
#if X_PAIRED && PACKING
#error "X_PAIRED is for the spec layout: a PACKING 1 weight takes x as it is"
#endif
#ifndef KS
#define KS 0
#endif
#ifndef AS
#define AS 1
#endif

// Elements from a thread's place in x's span (X_T t) to its chunk q; in the span K ends inside
// (`tail`), a PACKING 1 thread reads its own block, 32t + 8q, as the weight's words there are.
__device__ __forceinline__ int x_chunk(int q, int t, bool tail) {
    return (PACKING && tail) ? 24 * t + 8 * q : X_CHUNK * q;
}

__device__ __forceinline__ void mma(float (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One span of K for this thread's rows: w (row tile, row g / g + 8, word) decoded under scale
// bytes s and multiplied with x's 8-token tiles; x_words(j, q, v) gives word q of this thread's
// block of x for token 8j + g (zeros where there is none).
template <bool TWO, class X>
__device__ __forceinline__ void span_math(float (&acc)[AS][RT][NT][4], const u32 (&w)[RT][2][4], const u32 (&s)[RT][2],
                                          const X& x_words) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        u32 lo[RT][4], hi[RT][4];  // the A registers of K chunks 2q and 2q + 1, rows g and g + 8
#pragma unroll
        for (int r = 0; r < RT; ++r) {
            u32 f1[2], f2[2];  // word q's factors (PACKING 0: the same for every q, computed once)
#pragma unroll
            for (int h = 0; h < 2; ++h) word_factors<TWO>(s[r][h], q, f1[h], f2[h]);
            decode<TWO>(w[r][0][q], f1[0], f2[0], lo[r]);
            decode<TWO>(w[r][1][q], f1[1], f2[1], hi[r]);
        }
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            u32 v[4];
            x_words(j, q, v);
#if X_PAIRED || PACKING
            // x's elements come paired as the MMA takes them: (0, 4), (1, 5), (2, 6), (3, 7) of each 8
            // (X_PAIRED), or the weight's pairs are x's own, (0, 1), (2, 3), (4, 5), (6, 7) (PACKING)
            const u32 b00 = v[0], b01 = v[1], b10 = v[2], b11 = v[3];
#else
            const u32 b00 = permute(v[0], v[2], 0x5410u), b01 = permute(v[0], v[2], 0x7632u);
            const u32 b10 = permute(v[1], v[3], 0x5410u), b11 = permute(v[1], v[3], 0x7632u);
#endif
#pragma unroll
            for (int r = 0; r < RT; ++r) {
                mma(acc[0][r][j], lo[r][0], hi[r][0], lo[r][1], hi[r][1], b00, b01);
                mma(acc[AS - 1][r][j], lo[r][2], hi[r][2], lo[r][3], hi[r][3], b10, b11);
            }
        }
    }
}

// One span: span_math on the faster path unless a scale byte of the span is above 128 anywhere in
// the warp (s: scale words, fp4_common.cuh).
template <class X>
__device__ __forceinline__ void one_span(float (&acc)[AS][RT][NT][4], const u32 (&w)[RT][2][4], const u32 (&s)[RT][2],
                                         const X& x_words) {
    bool big = false;
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) big |= scale_big(s[r][h]);
    if (__any_sync(FULL_MASK, big))
        span_math<true>(acc, w, s, x_words);
    else
        span_math<false>(acc, w, s, x_words);
}

// x's words for span_math from this thread's slots of a ring stage in shared memory.
struct SharedX {
    u32 address;
    __device__ __forceinline__ void operator()(int j, int q, u32 (&v)[4]) const {
        load_shared(address + (j * 4 + q) * 512, v);
    }
};

// ... from registers loaded with the weight.
struct RegisterX {
    const u32 (&words)[NT][4][4];
    __device__ __forceinline__ void operator()(int j, int q, u32 (&v)[4]) const {
#pragma unroll
        for (int i = 0; i < 4; ++i) v[i] = words[j][q][i];
    }
};

// ... from global memory (through L1): this thread's elements of each token's row at `p`; zeros
// where `ok` is false (the blocks past K); `tail`: the span K ends inside.
struct SpanX {
    const u16* const (&p)[NT];
    bool ok, tail;
    int t;
    __device__ __forceinline__ void operator()(int j, int q, u32 (&v)[4]) const {
        if (ok)
            load_x(p[j] + x_chunk(q, t, tail), v[0], v[1], v[2], v[3]);
        else
            v[0] = v[1] = v[2] = v[3] = 0u;
    }
};

extern "C" __global__ void __launch_bounds__(WN * WK * 32, MINB) KERNEL(
    const u16* __restrict__ x, const u8* __restrict__ w, const u8* __restrict__ sc, const void* __restrict__ bias,
    const int* __restrict__ ids, u16* __restrict__ y, float* __restrict__ split_sums, int* __restrict__ locks, int M,
    int N, int K, int sxa, int sxm, int swe, int swn, int sse, int ssn, int sya, int sym, int sbe) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int wn = warp % WN, wk = warp / WN;
    const int a = blockIdx.y;
    const int blocks = K >> 5;
    const int spans = (blocks + 3) >> 2;
    const int n0 = blockIdx.x * (16 * RT * WN) + wn * (16 * RT);
    // The CTA takes spans [c0, c1) (KS: its split's; else all), warp wk a contiguous range of them.
#if KS
    const int c0 = min((int)blockIdx.z * KS, spans), c1 = min(c0 + KS, spans);
#else
    const int c0 = 0, c1 = spans;
#endif
    const int per = (c1 - c0 + WK - 1) / WK;
    const int first = min(c0 + wk * per, c1), last = min(first + per, c1);
    if (!HAS_IDS && t == 0) {  // the expert's id is another kernel's output
#pragma unroll
        for (int r = 0; r < RT; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const i64 n = min(n0 + 16 * r + g + 8 * h, N - 1);
                prefetch_row(w + a * (i64)swe + n * swn, sc + a * (i64)sse + n * ssn, first, last);
            }
    }
    after_previous_kernel();
    const i64 e = HAS_IDS ? (i64)ids[a] : (i64)a;

    const u16* xa = x + (i64)a * sxa;

    float accs[AS][RT][NT][4];
#pragma unroll
    for (int c = 0; c < AS; ++c)
#pragma unroll
        for (int r = 0; r < RT; ++r)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int i = 0; i < 4; ++i) accs[c][r][j][i] = 0.0f;

    // Rows past N and tokens past M read row N - 1 and token M - 1 (their results are not written),
    // so that only the one span that K ends inside (K % 128) needs its loads checked: there, a block
    // past K reads as zeros, weight and x alike.
    const int whole = blocks >> 2;  // spans whose four blocks all exist
    // This thread's block of the next span to load, per row; moved on as spans are loaded
    // (loop-carried, so not recomputed per span).
    const u8* wp[RT][2];
    const u8* sp[RT][2];
#pragma unroll
    for (int r = 0; r < RT; ++r) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const i64 n = min(n0 + 16 * r + g + 8 * h, N - 1);
            wp[r][h] = w + e * swe + n * swn + 16 * (4 * first + t);
            sp[r][h] = sc + e * sse + n * ssn + 4 * first + SCALE_T * t;
        }
    }
    // x's elements of the next span to read, token 8j + g (advanced 128 elements a span).
    const u16* xp[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) xp[j] = xa + (i64)min(8 * j + g, M - 1) * sxm + 128 * first + X_T * t;
    // Span `at`'s arithmetic with x's words read at xp (zeros past K), then xp moved on; the test for
    // K's last span is out of the unchecked copy, as in the loads.
    auto span_with_x = [&](const u32 (&wv)[RT][2][4], const u32 (&sv)[RT][2], int at) {
        if (at < whole)
            one_span(accs, wv, sv, SpanX{xp, true, false, t});
        else
            one_span(accs, wv, sv, SpanX{xp, 4 * at + t < blocks, true, t});
#pragma unroll
        for (int j = 0; j < NT; ++j) xp[j] += 128;
    };

#if ASYNC
    // Each warp streams its spans through its own ring of S stages in shared memory: S - 1 spans
    // in flight while one is computed; a thread reads back only the bytes it copied itself. The
    // scale bytes come to registers, loaded as their span is copied.
    extern __shared__ uint4 ring[];
    constexpr int SLOT = (RT * 2 + (X_ASYNC ? NT * 4 : 0)) * 32;  // 16-byte units per stage of a warp
    const u32 base = shared_address(ring) + (u32)(warp * S * SLOT * 16 + lane * 16);
    u32 scales[S][RT][2];
    // Span `at` copied into `stage`; `check`: the span K ends inside (a literal at each call).
    auto issue_span = [&](bool check, int at, int stage) {
        const bool ok = !check || 4 * at + t < blocks;
#pragma unroll
        for (int r = 0; r < RT; ++r) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                copy_weight(base + (stage * SLOT + (r * 2 + h) * 32) * 16, ok ? (const void*)wp[r][h] : w,
                            ok ? 16u : 0u);
                scales[stage][r][h] = ok ? span_scales(sp[r][h], t, check) : NO_SCALE;
                wp[r][h] += 64;
                sp[r][h] += 4;
            }
        }
#if X_ASYNC
#pragma unroll
        for (int j = 0; j < NT; ++j) {
#pragma unroll
            for (int q = 0; q < 4; ++q)
                copy_x(base + (stage * SLOT + (RT * 2 + j * 4 + q) * 32) * 16,
                       ok ? (const void*)(xp[j] + x_chunk(q, t, check)) : x,
                       ok ? 16u : 0u);
            xp[j] += 128;
        }
#endif
    };
    auto issue = [&](int at, int stage) {
        if (at < last) {
            if (at < whole)
                issue_span(false, at, stage);
            else
                issue_span(true, at, stage);
        }
    };
    auto consume = [&](int at, int stage) {
        if (at < last) {
            u32 words[RT][2][4];
#pragma unroll
            for (int r = 0; r < RT; ++r)
#pragma unroll
                for (int h = 0; h < 2; ++h) load_shared(base + (stage * SLOT + (r * 2 + h) * 32) * 16, words[r][h]);
#if X_ASYNC
            one_span(accs, words, scales[stage], SharedX{base + (stage * SLOT + RT * 2 * 32) * 16});
#else
            span_with_x(words, scales[stage], at);
#endif
        }
    };
#pragma unroll
    for (int j = 0; j < S - 1; ++j) {
        issue(first + j, j);
        copies_commit();
    }
    for (int i0 = first; i0 < last; i0 += S) {
#pragma unroll
        for (int j = 0; j < S; ++j) {
            issue(i0 + j + S - 1, (j + S - 1) % S);
            copies_commit();
            copies_wait<S - 1>();
            consume(i0 + j, j);
        }
    }
    copies_wait<0>();
#else
    // Registers: U spans a step, loaded whole before their arithmetic (DB: the next step's loads
    // issued first).
    constexpr int XU = X_EARLY ? U : 1;
    constexpr int XJ = X_EARLY ? NT : 1;
    // Span `at`'s words; `check` (the span K ends inside; a literal at each call, so that the
    // unchecked copy has no tests): a block past K reads as zeros.
    auto load_span = [&](bool check, u32 (&wv)[RT][2][4], u32 (&sv)[RT][2], u32 (&xv)[XJ][4][4], int at) {
        const bool ok = !check || 4 * at + t < blocks;
#pragma unroll
        for (int r = 0; r < RT; ++r) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                if (PROBE == 2) {  // arithmetic only: made-up words, no loads
#pragma unroll
                    for (int q = 0; q < 4; ++q) wv[r][h][q] = (u32)(at * 16 + t * 4 + q + r * 2 + h) * 0x9E3779B9u;
                    sv[r][h] = PACKING ? 0x78787878u : 120u;
                } else if (ok) {
                    load_weight(wp[r][h], wv[r][h][0], wv[r][h][1], wv[r][h][2], wv[r][h][3]);
                    sv[r][h] = span_scales(sp[r][h], t, check);
                } else {
                    wv[r][h][0] = wv[r][h][1] = wv[r][h][2] = wv[r][h][3] = 0u;
                    sv[r][h] = NO_SCALE;
                }
                wp[r][h] += 64;
                sp[r][h] += 4;
            }
        }
#if X_EARLY
#pragma unroll
        for (int j = 0; j < NT; ++j) {
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                if (ok)
                    load_x(xp[j] + x_chunk(q, t, check), xv[j][q][0], xv[j][q][1], xv[j][q][2], xv[j][q][3]);
                else
                    xv[j][q][0] = xv[j][q][1] = xv[j][q][2] = xv[j][q][3] = 0u;
            }
            xp[j] += 128;
        }
#endif
    };
    auto load = [&](u32 (&wv)[U][RT][2][4], u32 (&sv)[U][RT][2], u32 (&xv)[XU][XJ][4][4], int span) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (u == 0 || span + u < last) {
                if (span + u < whole)
                    load_span(false, wv[u], sv[u], xv[X_EARLY ? u : 0], span + u);
                else
                    load_span(true, wv[u], sv[u], xv[X_EARLY ? u : 0], span + u);
            }
        }
    };
    auto math = [&](const u32 (&wv)[U][RT][2][4], const u32 (&sv)[U][RT][2], const u32 (&xv)[XU][XJ][4][4], int span) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (u == 0 || span + u < last) {
#if PROBE == 1  // loads only: the words folded into the result, no arithmetic
                u32 fold = sv[u][0][0];
#pragma unroll
                for (int r = 0; r < RT; ++r)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        fold ^= wv[u][r][h][0] ^ wv[u][r][h][1] ^ wv[u][r][h][2] ^ wv[u][r][h][3];
                accs[0][0][0][0] += (float)(fold & 1u);
#elif X_EARLY
                one_span(accs, wv[u], sv[u], RegisterX{xv[u]});
#else
                span_with_x(wv[u], sv[u], span + u);
#endif
            }
        }
    };
    u32 wa[U][RT][2][4], sa[U][RT][2], xa_[XU][XJ][4][4];
#if DB
    u32 wb[U][RT][2][4], sb[U][RT][2], xb_[XU][XJ][4][4];
    if (first < last) load(wa, sa, xa_, first);
    for (int span = first; span < last; span += 2 * U) {
        if (span + U < last) load(wb, sb, xb_, span + U);
        math(wa, sa, xa_, span);
        if (span + 2 * U < last) load(wa, sa, xa_, span + 2 * U);
        if (span + U < last) math(wb, sb, xb_, span + U);
    }
#else
    for (int span = first; span < last; span += U) {
        load(wa, sa, xa_, span);
        math(wa, sa, xa_, span);
    }
#endif
#endif

    let_next_kernel_start();

    float (&acc)[RT][NT][4] = accs[0];
#if AS == 2
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[r][j][i] += accs[1][r][j][i];
#endif

#if WK > 1
    __shared__ float partial[WK - 1][WN][RT][NT][4][32];
    if (wk > 0) {
#pragma unroll
        for (int r = 0; r < RT; ++r)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int i = 0; i < 4; ++i) partial[wk - 1][wn][r][j][i][lane] = acc[r][j][i];
    }
    __syncthreads();
    if (wk > 0) return;
#pragma unroll
    for (int p = 0; p < WK - 1; ++p)
#pragma unroll
        for (int r = 0; r < RT; ++r)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[r][j][i] += partial[p][wn][r][j][i][lane];
#endif

#if KS
    if (gridDim.z > 1) {
        // This CTA's sums (the WN warps left), then the last of the tile's splits adds them all.
        constexpr int SUMS = WN * RT * NT * 32;  // float4s a split of a tile
        float4* tile = (float4*)split_sums + ((i64)a * gridDim.x + blockIdx.x) * gridDim.z * SUMS + threadIdx.x;
#pragma unroll
        for (int r = 0; r < RT; ++r)
#pragma unroll
            for (int j = 0; j < NT; ++j)
                __stcg(tile + blockIdx.z * SUMS + (r * NT + j) * (WN * 32),
                       make_float4(acc[r][j][0], acc[r][j][1], acc[r][j][2], acc[r][j][3]));
        __threadfence();
        __shared__ int is_last;
        asm volatile("bar.sync 1, %0;" ::"n"(WN * 32) : "memory");  // the warps along K past the first have left
        if (threadIdx.x == 0) {
            int* count = locks + a * gridDim.x + blockIdx.x;
            is_last = atomicAdd(count, 1) == (int)gridDim.z - 1;
            if (is_last) *count = 0;
        }
        asm volatile("bar.sync 1, %0;" ::"n"(WN * 32) : "memory");
        if (!is_last) return;
        __threadfence();
#pragma unroll
        for (int r = 0; r < RT; ++r)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[r][j][i] = 0.0f;
        for (int p = 0; p < (int)gridDim.z; ++p) {
#pragma unroll
            for (int r = 0; r < RT; ++r)
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    const float4 v = __ldcg(tile + p * SUMS + (r * NT + j) * (WN * 32));
                    acc[r][j][0] += v.x;
                    acc[r][j][1] += v.y;
                    acc[r][j][2] += v.z;
                    acc[r][j][3] += v.w;
                }
        }
    }
#endif

    u16* ya = y + (i64)a * sya;
#pragma unroll
    for (int r = 0; r < RT; ++r) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int n = n0 + 16 * r + g + 8 * h;
            if (n >= N) continue;
            float add = 0.0f;
#if HAS_BIAS == 1  // bfloat16
            add = __uint_as_float(((u32)((const u16*)bias)[e * sbe + n]) << 16);
#elif HAS_BIAS == 2  // float32
            add = ((const float*)bias)[e * sbe + n];
#endif
#pragma unroll
            for (int j = 0; j < NT; ++j) {
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    const int token = 8 * j + 2 * t + c;
                    if (token < M) ya[(i64)token * sym + n] = to_bf16(acc[r][j][2 * h + c] + add);
                }
            }
        }
    }
}
