"""The fused MXFP4 linear on a CUDA GPU against ``torch.nn.functional.linear`` of the bfloat16
dequantized weight, at decode shapes (1 to 64 tokens), all in one run.

    PYTHONPATH=. python3 tools/bench/mx4_linear.py    # writes tools/bench/results/mx4_linear.json

Shapes: gpt-oss-20b's (its public config: hidden and intermediate size 2880, 32 experts, 4 per
token) one expert's ``gate_up`` (5760 x 2880) and ``down`` (2880 x 2880) projections, and the
expert matmul of a decode step (``mxfp4_expert_linear``: the experts ``T`` tokens route to,
``min(32, 4T)`` of them, ``4T / experts`` rows each, against ``torch.bmm`` of those experts' bf16
weights); Llama-like (Llama-3-8B's) 4096 x 4096, 14336 x 4096 and 4096 x 14336.

Each time is ``tools/bench/mx_cast.py``'s ``gpu_time`` (CUDA-graph replays between CUDA events)
over enough distinct weights (>= 256 MB for the bf16 side, the MXFP4 side rotating the same
number of copies) that no weight is served from L2, as in decode, where each layer's weights are
read once per token. ``speedup`` is the bf16 time over the fused time, both from this run. The
fused kernel's first call per shape times its candidate configs (``fp4_matmul.TUNING``, written
out per shape) and keeps the fastest; ``--precompile N`` first makes those first calls in ``N``
processes, which compile the candidates into Triton's cache in parallel.

Checks, per shape and token count: the fused result against the float64 product of the
dequantized weight (``max_error_ulps``: in bf16 ulps of the exact value; 0.5 is correct rounding,
1 is a neighbour that float32 sums in another order can reach), and bit for bit against the
bf16 ``linear`` (``bits_equal``: the share of outputs with identical bits; cuBLAS sums in its own
order too).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import time

import torch

sys.path.insert(0, os.getcwd())
from tools.bench.mx_cast import gpu_time  # noqa: E402
from xlabridge import mx  # noqa: E402
from xlabridge.mx._triton import fp4_matmul  # noqa: E402

MB = 1 << 20
TOKENS = (1, 2, 4, 8, 16, 32, 64)
WORKING_SET = 256 * MB
HIDDEN, INTERMEDIATE, EXPERTS, TOP_K = 2880, 2880, 32, 4  # gpt-oss-20b
LINEARS = {
    "gpt-oss-20b expert gate_up": (2 * INTERMEDIATE, HIDDEN),
    "gpt-oss-20b expert down": (HIDDEN, INTERMEDIATE),
    "llama 4096x4096": (4096, 4096),
    "llama up 14336x4096": (14336, 4096),
    "llama down 4096x14336": (4096, 14336),
}


def _weights(n: int, k: int, copies: int, dev, experts: int | None = None):
    """``copies`` MXFP4 weights of ``[n, k]`` (``[experts, n, k]``) and their bf16 dequantizations."""
    shape = (n, k) if experts is None else (experts, n, k)
    g = torch.Generator(device=dev).manual_seed(n * 31 + k)
    out = []
    for _ in range(copies):
        w = mx.to_mxfp4(torch.randn(shape, device=dev, dtype=torch.bfloat16, generator=g) * 0.02)
        out.append((w, w.dequantize(torch.bfloat16)))
    return out


def _check(y: torch.Tensor, x: torch.Tensor, w_bf16: torch.Tensor, reference: torch.Tensor) -> dict:
    """Errors of ``y`` in bf16 ulps of the float64 product, and bit equality with ``reference``."""
    exact = (x.double() @ w_bf16.double().transpose(-1, -2))
    ulp = torch.finfo(torch.bfloat16).eps * exact.abs().clamp_min(1e-30)
    # an exponent's ulp is eps * 2**floor(log2 |v|); eps * |v| is within a factor 2 of it
    ulps = ((y.double() - exact).abs() / ulp)
    return {"max_error_ulps": float(ulps.max()), "share_within_1_ulp": float((ulps <= 1).double().mean()),
            "bits_equal": float((y.view(torch.int16) == reference.view(torch.int16)).double().mean())}


def linear_rows(name: str, n: int, k: int, dev) -> list[dict]:
    copies = max(2, math.ceil(WORKING_SET / (2 * n * k)))
    weights = _weights(n, k, copies, dev)
    rows = []
    for tokens in TOKENS:
        x = torch.randn(tokens, k, device=dev, dtype=torch.bfloat16)
        fused = gpu_time(lambda w: mx.mxfp4_linear(x, w[0]), weights)
        dense = gpu_time(lambda w: torch.nn.functional.linear(x, w[1]), weights)
        y, reference = mx.mxfp4_linear(x, weights[0][0]), torch.nn.functional.linear(x, weights[0][1])
        key = next(key for key in fp4_matmul.TUNING if key[1:5] == (n, k, 1, False) and key[0] == fp4_matmul.row_tile(tokens))
        chosen = fp4_matmul._CHOSEN.get(key)
        weight_bytes = n * k // 2 + n * k // 32
        row = {"shape": name, "n": n, "k": k, "tokens": tokens, "copies_rotated": copies,
               "fused_ms": fused, "bf16_linear_ms": dense, "speedup": dense / fused,
               "fused_weight_GBps": weight_bytes / fused / 1e6, "bf16_weight_GBps": 2 * n * k / dense / 1e6,
               "config": None if chosen is None else chosen.__dict__, **_check(y, x, weights[0][1], reference)}
        rows.append(row)
        print(json.dumps({k_: row[k_] for k_ in ("shape", "tokens", "fused_ms", "bf16_linear_ms", "speedup", "max_error_ulps")}),
              flush=True)
    return rows


def expert_rows(dev) -> list[dict]:
    """gpt-oss-20b's gate_up expert matmul at decode: the experts T tokens route to (distinct, rotated)."""
    n, k = 2 * INTERMEDIATE, HIDDEN
    weights = _weights(n, k, 1, dev, experts=EXPERTS)
    weight, weight_bf16 = weights[0]
    rows = []
    for tokens in TOKENS:
        groups = min(EXPERTS, TOP_K * tokens)
        per_group = math.ceil(TOP_K * tokens / groups)
        subsets = [torch.arange(i * groups, (i + 1) * groups, device=dev, dtype=torch.int32) % EXPERTS
                   for i in range(max(1, EXPERTS // groups))]
        x = torch.randn(groups, per_group, k, device=dev, dtype=torch.bfloat16)
        dense_weights = [weight_bf16[ids.long()].transpose(1, 2) for ids in subsets]  # gathered once, outside the timing
        fused = gpu_time(lambda ids: mx.mxfp4_expert_linear(x, weight, ids), subsets)
        dense = gpu_time(lambda w: torch.bmm(x, w), dense_weights)
        y = mx.mxfp4_expert_linear(x, weight, subsets[0])
        reference = torch.bmm(x, dense_weights[0])
        row = {"shape": "gpt-oss-20b experts gate_up (top-4 routing)", "n": n, "k": k, "tokens": tokens, "experts_read": groups,
               "rows_per_expert": per_group, "fused_ms": fused, "bf16_bmm_ms": dense, "speedup": dense / fused,
               "fused_weight_GBps": groups * (n * k // 2 + n * k // 32) / fused / 1e6,
               "bf16_weight_GBps": groups * 2 * n * k / dense / 1e6,
               **_check(y, x, weight_bf16[subsets[0].long()], reference)}
        rows.append(row)
        print(json.dumps({k_: row[k_] for k_ in ("shape", "tokens", "fused_ms", "bf16_bmm_ms", "speedup", "max_error_ulps")}),
              flush=True)
        del dense_weights
        torch.cuda.empty_cache()
    return rows


def _warm(tasks) -> None:
    """One call of each (shape, tokens) task: compiles what its first-call tuning times."""
    dev = torch.device("cuda")
    for name, tokens in tasks:
        if name == "experts":
            n, k = 2 * INTERMEDIATE, HIDDEN
            weight, _ = _weights(n, k, 1, dev, experts=EXPERTS)[0]
            groups = min(EXPERTS, TOP_K * tokens)
            x = torch.randn(groups, math.ceil(TOP_K * tokens / groups), k, device=dev, dtype=torch.bfloat16)
            mx.mxfp4_expert_linear(x, weight, torch.arange(groups, device=dev, dtype=torch.int32))
        else:
            n, k = LINEARS[name]
            weight, _ = _weights(n, k, 1, dev)[0]
            mx.mxfp4_linear(torch.randn(tokens, k, device=dev, dtype=torch.bfloat16), weight)
    torch.cuda.synchronize()


def precompile(names: list[str], workers: int) -> None:
    """Run every (shape, tokens) once in ``workers`` processes first: their first-call tuning
    compiles the candidates into Triton's on-disk cache, in parallel, for this process to load."""
    tasks = [(name, tokens) for name in names for tokens in TOKENS]
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pool.map(_warm, [tasks[i::workers] for i in range(workers)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "mx4_linear.json"))
    parser.add_argument("--shapes", default=",".join(LINEARS) + ",experts", help="comma-separated names (default: all)")
    parser.add_argument("--precompile", type=int, default=0, metavar="WORKERS",
                        help="compile the candidates in this many processes first (0: compile as the tuning needs them)")
    args = parser.parse_args()
    import triton

    dev = torch.device("cuda")
    started = time.time()
    results = {"commit": os.environ.get("XLABRIDGE_COMMIT"), "command": " ".join(sys.argv),
               "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "rows": []}
    wanted = args.shapes.split(",")
    if args.precompile:
        precompile(wanted, args.precompile)
        results["precompile_seconds"] = time.time() - started
    for name, (n, k) in LINEARS.items():
        if name in wanted:
            results["rows"] += linear_rows(name, n, k, dev)
    if "experts" in wanted:
        results["rows"] += expert_rows(dev)
    results["tuning"] = [{"key": [str(part) for part in key], "candidates": table} for key, table in fp4_matmul.TUNING.items()]
    by_shape: dict = {}
    for row in results["rows"]:
        by_shape.setdefault(row["shape"], []).append(row)
    results["summary"] = {
        shape: {"min_speedup": min(r["speedup"] for r in rows), "max_speedup": max(r["speedup"] for r in rows),
                "max_error_ulps": max(r["max_error_ulps"] for r in rows)}
        for shape, rows in by_shape.items()
    }
    results["seconds"] = time.time() - started
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps(results["summary"], indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
