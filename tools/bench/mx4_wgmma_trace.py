"""Where the warpgroup MXFP4 kernel's time goes: its diagnostic build (``fp4_wgmma``'s ``trace``) run on
``mx4_linear.py``'s shapes, each CTA recording the global timer at its start, once the previous
kernel is done, around its main loop and at its end, and the SM's cycles in the loop spent waiting
for the weight's copies, ``x``'s, the MMAs and the scale bytes (``fp4_wgmma.TRACE_FIELDS``).

    PYTHONPATH=. python3 tools/bench/mx4_wgmma_trace.py --shapes "llama up 14336x4096" --tokens 16,64

Per shape, token count and configuration: the plain build's time (``gpu_time``, CUDA-graph replays
over weights rotated past L2, as ``mx4_linear.py``'s) and the traced build's, and from the traced
build's last replay: the kernel's span from the first CTA's start to the last one's end; when CTAs
start (the launch's ramp) and how many an SM ran; the main loop's time per span; the loop's cycles
by what they waited for (the rest: decoding and issuing); the split-K epilogue's time, for a tile's
last CTA (it adds the partial sums) and for the others. The traced build records from one thread a
CTA: its own time is within a few per cent of the plain build's (both are printed).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.getcwd())
from tools.bench import mx4_linear  # noqa: E402
from tools.bench.mx_cast import gpu_time  # noqa: E402
from xlabridge.mx._cuda import fp4_decode, fp4_wgmma  # noqa: E402

F = fp4_wgmma.TRACE_FIELDS


def _config(text: str) -> fp4_wgmma.Config:
    """``wg,stages,per_sm,min_blocks,pipeline,slots[,group[,sums]]`` (``1,4,1,1,pairs,2,1,cluster``)."""
    wg, stages, per_sm, blocks, pipeline, slots, *rest = text.split(",")
    group = int(rest[0]) if rest else 1
    sums = fp4_wgmma.Sums(rest[1]) if len(rest) > 1 else fp4_wgmma.Sums.GLOBAL
    return fp4_wgmma.Config(int(wg), int(stages), int(per_sm), int(blocks), fp4_wgmma.Pipeline(pipeline), int(slots),
                            group, sums)


def summarize(trace: np.ndarray) -> dict:
    """The per-CTA records of one launch, summed up (times in µs, shares of the loop's cycles)."""
    start = trace[:, F["start_ns"]]
    t0 = start.min()
    finish = np.maximum(trace[:, F["end_ns"]], trace[:, F["left_ns"]])
    last = trace[:, F["end_ns"]] > 0
    loop_ns = trace[:, F["loop_end_ns"]] - trace[:, F["loop_start_ns"]]
    spans = np.maximum(trace[:, F["spans"]], 1)
    cycles = {name: trace[:, F[f"{name}_cycles"]].sum() for name in ("weight", "x", "mma", "scale", "loop")}
    per_sm = np.bincount(trace[:, F["sm"]].astype(np.int64))
    us = lambda v: round(float(v) / 1e3, 3)  # noqa: E731
    pct = lambda v: [us(np.percentile(v, q)) for q in (0, 50, 90, 100)]  # noqa: E731
    critical = int(np.argmax(finish))
    return {
        "ctas": int(len(trace)), "span_us": us(finish.max() - t0),
        "ctas_per_sm": {str(k): int(v) for k, v in zip(*np.unique(per_sm[per_sm > 0], return_counts=True))},
        "start_us_p0_50_90_100": pct(start - t0),
        "previous_wait_us_p50": us(np.median(trace[:, F["previous_done_ns"]] - start)),
        "prologue_us_p50": us(np.median(trace[:, F["loop_start_ns"]] - trace[:, F["previous_done_ns"]])),
        "loop_us_p0_50_90_100": pct(loop_ns),
        "loop_ns_per_span_p50": round(float(np.median(loop_ns / spans)), 1),
        "spans_p50": float(np.median(spans)),
        "clock_ghz": round(float(cycles["loop"]) / float(loop_ns.sum()), 3) if loop_ns.sum() else None,
        "loop_shares": {name: round(float(cycles[name]) / max(float(cycles["loop"]), 1.0), 3)
                        for name in ("weight", "x", "mma", "scale")},
        "epilogue_us_last_p50": us(np.median((finish - trace[:, F["loop_end_ns"]])[last])) if last.any() else None,
        "epilogue_us_other_p50": us(np.median((finish - trace[:, F["loop_end_ns"]])[~last])) if (~last).any() else None,
        "critical_cta": {"start_us": us(start[critical] - t0), "loop_us": us(loop_ns[critical]),
                         "end_us": us(finish[critical] - t0), "last": bool(last[critical])},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                      "mx4_wgmma_trace.json"))
    parser.add_argument("--shapes", default=",".join(mx4_linear.LINEARS))
    parser.add_argument("--tokens", default="16,64")
    parser.add_argument("--configs", default="1,4,1,1,span,4;1,4,1,1,pairs,2;2,4,1,2,span,4;2,4,1,1,pairs,2",
                        help="';'-separated wg,stages,per_sm,min_blocks,pipeline,slots[,group[,sums]]")
    args = parser.parse_args()
    started = time.time()
    dev = torch.device("cuda")
    torch.zeros(1, device=dev)
    configs = [_config(c) for c in args.configs.split(";")]
    copy = mx4_linear.copy_bandwidth(dev)
    results = {"command": " ".join(sys.argv), "device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "copy_GBps": copy, "rows": []}
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    for name in args.shapes.split(","):
        n, k = mx4_linear.LINEARS[name]
        copies = max(2, math.ceil(mx4_linear.WORKING_SET / (2 * n * k)))
        weights = [(w.data[None], w.scale[None]) for w, _ in mx4_linear._weights(n, k, copies, dev)]
        for tokens in (int(t) for t in args.tokens.split(",")):
            nt = fp4_decode.token_tiles(tokens)
            x = torch.randn(1, tokens, k, device=dev, dtype=torch.bfloat16)
            y = torch.empty(1, tokens, n, device=dev, dtype=torch.bfloat16)
            for config in configs:
                row = {"shape": name, "tokens": tokens, "config": config.__dict__ | {"pipeline": config.pipeline.value}}
                split, _ = fp4_wgmma.splits(config, -(-n // config.rows), k, sms)
                ctas = -(-n // config.rows) * split
                for traced in (False, True):
                    trace = torch.zeros(ctas, fp4_wgmma.TRACE_SLOTS, dtype=torch.int64, device=dev)
                    run = fp4_wgmma.load(fp4_wgmma.binary(config, nt, 0, False, trace=traced), config, nt, 0, False,
                                         traced)

                    def call(w, run=run, traced=traced, trace=trace):
                        fp4_wgmma.launch_loaded(run, config, x, w[0], w[1], None, None, y,
                                                trace=trace if traced else None)
                    row["traced_ms" if traced else "ms"] = gpu_time(call, weights, reps=10)
                    call(weights[0])
                row["weight_read_share"] = (n * k // 2 + n * k // 32) / row["ms"] / 1e6 / copy
                row["splits"] = split
                row.update(summarize(trace.cpu().numpy()))
                results["rows"].append(row)
                print(json.dumps(row), flush=True)
                with open(args.out, "w") as f:  # kept if the run is cut short
                    json.dump(results, f, indent=1)
        del weights
        torch.cuda.empty_cache()
    results["seconds"] = time.time() - started
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {args.out} after {results['seconds']:.0f} s")


if __name__ == "__main__":
    main()
