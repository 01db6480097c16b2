"""How fast the warpgroup MXFP4 kernel's weight loads alone can read HBM, by layout: its copies
(16 bytes a thread into a ring of shared memory, ``stages - 1`` spans in flight) with nothing decoded
and no MMA, on Llama's and gpt-oss's weight shapes, against a device copy in the same run.

    PYTHONPATH=. python3 tools/bench/mx4_read_pattern.py

Layouts: ``rows``, the MXFP4 weight as stored (``[N, K / 2]`` bytes: a warp's 16 rows are a row's
length apart, 64 bytes each a span), as the kernel reads it, one span a stage or ``group`` spans a
stage (a row's ``64 group`` bytes asked for at once); ``tiles``, the same bytes packed per
64-row tile and span (4 KB contiguous, what a warpgroup reads in one span). Per layout and grid (CTAs
of one or two warpgroups, ``K`` split so that the grid has about ``per_sm`` CTAs an SM): the time
(CUDA-graph replays, weights rotated past L2) and the read rate as a share of the copy's. Where
``tiles`` reads markedly faster than ``rows``, the stored layout, not the kernel's pipeline, bounds
the decode kernels; where both are near the copy, it does not.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.getcwd())
from tools.bench import mx4_linear  # noqa: E402
from tools.bench.mx_cast import gpu_time  # noqa: E402
from xlabridge.mx._cuda import COMMON, _runtime  # noqa: E402

SOURCE = r"""
// Each CTA (WG warpgroups, 64 WG rows) reads spans [z per, (z + 1) per) of its rows' K, as fp4_wgmma.cu
// does: thread t of a quad copies 16 bytes of each of its two rows (g, g + 8 of its warp's 16) a
// span into a ring of S stages, S - 1 spans in flight; TILED: span s of row tile b is 4 KB at
// (b * spans + s) * 4096, thread i's 32 bytes at 32 i. G spans a stage (one commit group): a warp asks
// for G * 64 contiguous bytes of each of its rows at once.
extern "C" __global__ void __launch_bounds__(WG * 128) KERNEL(const u8* __restrict__ w, u32* __restrict__ out,
                                                            int N, int K, int per) {
    extern __shared__ __align__(128) uint4 ring_[];
    constexpr int THREADS = WG * 128;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int spans = K >> 7;
    const int first = blockIdx.z * per, last = min(first + per, spans);
    const int row = blockIdx.x * (64 * WG) + warp * 16 + g;
    const u32 ring = shared_address(ring_) + threadIdx.x * 16;
    const u8* p[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#if TILED
        const int tile = row / 64;
        p[h] = w + ((i64)tile * spans + first) * 4096 + (threadIdx.x % 128) * 32 + 16 * h;
#else
        p[h] = w + (i64)min(row + 8 * h, N - 1) * (K / 2) + 16 * (4 * first + t);
#endif
    }
    auto issue = [&](int group, int stage) {  // spans first + G group .. + G - 1 into the stage
#pragma unroll
        for (int j = 0; j < G; ++j) {
            if (first + G * group + j < last) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    copy_weight(ring + (u32)((stage * G + j) * 2 + h) * THREADS * 16, p[h], 16u);
#if TILED
                    p[h] += 4096;
#else
                    p[h] += 64;
#endif
                }
            }
        }
        copies_commit();
    };
#pragma unroll
    for (int j = 0; j < S - 1; ++j) issue(j, j);
    u32 sum = 0;
    for (int i = 0; i < last - first; ++i) {
        const int group = i / G, j = i % G;
        if (j == 0) copies_wait<S - 2>();
        u32 v[4];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            load_shared(ring + (u32)(((group % S) * G + j) * 2 + h) * THREADS * 16, v);
            sum ^= v[0] ^ v[1] ^ v[2] ^ v[3];
        }
        __syncwarp();
        if (j == G - 1) issue(group + S - 1, (group + S - 1) % S);
    }
    if (sum == 0x9E3779B9u) out[threadIdx.x] = sum;  // keeps the loads; never true for random bytes in practice
}
"""


def _kernel(wg: int, stages: int, tiled: bool, group: int) -> _runtime.Kernel:
    name = f"read_pattern_g{wg}_s{stages}_{int(tiled)}_{group}"
    options = [f"-DWG={wg}", f"-DS={stages}", f"-DTILED={int(tiled)}", f"-DG={group}", f"-DKERNEL={name}",
               "-DPREFETCH=0"]
    code = _runtime.compile_cubin(COMMON.read_text() + SOURCE, name, "90a", options)
    return _runtime.Kernel(code, name, 200 * 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                      "mx4_read_pattern.json"))
    parser.add_argument("--shapes", default="llama up 14336x4096,gpt-oss-20b expert gate_up")
    args = parser.parse_args()
    started = time.time()
    dev = torch.device("cuda")
    torch.zeros(1, device=dev)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    copy = mx4_linear.copy_bandwidth(dev)
    results = {"command": " ".join(sys.argv), "device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "copy_GBps": copy, "rows": []}
    out = torch.zeros(1024, dtype=torch.int32, device=dev)
    for name in args.shapes.split(","):
        n, k = mx4_linear.LINEARS[name]
        k = k // 128 * 128
        nbytes = n * k // 2
        copies = max(2, math.ceil(mx4_linear.WORKING_SET / nbytes))
        weights = [torch.randint(0, 256, (n * k // 2 + 64 * 4096,), dtype=torch.uint8, device=dev) for _ in range(copies)]
        spans = k // 128
        for wg, (stages, group), per_sm, tiled in itertools.product((1, 2), ((4, 1), (8, 1), (3, 4), (2, 8)), (1, 2, 4),
                                                                    (False, True)):
            if tiled and group > 1:
                continue
            run = _kernel(wg, stages, tiled, group)
            tiles = -(-n // (64 * wg))
            split = 1
            while tiles * split < per_sm * sms and spans >= 2 * split:
                split *= 2
            per = -(-spans // split)
            grid = (tiles, 1, -(-spans // per))
            shared = stages * group * wg * 128 * 32

            def call(w, run=run, grid=grid, wg=wg, per=per, shared=shared):
                run(grid, (128 * wg, 1, 1), [w, out, n, k, per], torch.cuda.current_stream(dev).cuda_stream, shared)
            ms = gpu_time(call, weights, reps=10)
            row = {"shape": name, "layout": "tiles" if tiled else "rows", "wg": wg, "stages": stages, "group": group,
                   "per_sm": per_sm,
                   "ctas": grid[0] * grid[2], "resident": run.resident(128 * wg, shared), "ms": ms,
                   "GBps": nbytes / ms / 1e6, "share": nbytes / ms / 1e6 / copy}
            results["rows"].append(row)
            print(json.dumps(row), flush=True)
        del weights
        torch.cuda.empty_cache()
    results["seconds"] = time.time() - started
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {args.out} after {results['seconds']:.0f} s")


if __name__ == "__main__":
    main()
