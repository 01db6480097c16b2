"""Variants of the MXFP4 CUDA kernels on a GPU, in one process: every config of the bfloat16 cast
and a wide set of fused-linear configs (``WIDE``, more than ``fp4_matmul.CONFIGS`` times at a
first call) on every shape of ``mx4_linear.py``, each checked before it is timed. The tables it
prints (and ``--out`` JSON) are what ``fp4.BF16_CAST_CONFIG`` and ``fp4_matmul.CONFIGS`` are
chosen from; the benchmarks then measure the chosen ones.

    PYTHONPATH=. python3 tools/bench/mx4_sweep.py --out mx4_sweep.json

Cast: bytes against the NumPy spec model (seeded inputs with 40% special blocks, both roundings),
then GPU time over 256 MB and over four 64 MB inputs, beside a device copy of the same inputs.
Linear: ``WIDE`` (tiles, stages, programs per SM and how many steps ahead the scale bytes are
prefetched: 0 is not at all) at 1, 16 and 64 tokens, each config's result within bfloat16 rounding of the float64 product of the dequantized
weight (``mx4_linear.py``'s check), then ``gpu_time`` over rotated weight copies, beside
``torch.nn.functional.linear`` (``torch.bmm`` for the experts) of the bfloat16 weight. Kernels are
compiled first by worker processes (``--workers``), which fill Triton's cache for the timing
process.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import multiprocessing
import os
import sys
import time

import torch

sys.path.insert(0, os.getcwd())
from tools.bench import mx4_linear  # noqa: E402
from tools.bench.mx_cast import gpu_time  # noqa: E402
from xlabridge import mx  # noqa: E402
from xlabridge.mx._triton import fp4, fp4_matmul  # noqa: E402

MB = 1 << 20
SMALL_TILES = ((64, 256, 4), (64, 128, 4), (128, 128, 4))
LARGE_TILES = ((64, 128, 4), (128, 128, 8), (256, 128, 8))
STAGES = (3, 4)
PER_SM = (1, 2, 4, 8)
AHEAD = (0, 1, 2)


def _wide(tiles):
    return tuple(fp4_matmul.Config("asm", bn, bk, warps, stages, per_sm, ahead)
                 for (bn, bk, warps), stages, per_sm, ahead in itertools.product(tiles, STAGES, PER_SM, AHEAD))


WIDE = {16: _wide(SMALL_TILES), 64: _wide(LARGE_TILES)}
"""Per row tile (``fp4_matmul.row_tile``): what the sweep times at up to 16 tokens and at 64."""
TOKENS = (1, 16, 64)


def _shapes():
    """(name, n, k, experts or None) of every benchmark shape."""
    out = [(name, n, k, None) for name, (n, k) in mx4_linear.LINEARS.items()]
    out.append(("experts", 2 * mx4_linear.INTERMEDIATE, mx4_linear.HIDDEN, mx4_linear.EXPERTS))
    return out


def _operands(n, k, experts, tokens, dev, copies=1, seed=0):
    """Random MXFP4 weights (``copies`` of them; scale bytes of weights ~ 0.02) and ``x``."""
    g = torch.Generator(device=dev).manual_seed(seed)
    e = experts or 1
    weights = []
    for _ in range(copies):
        data = torch.randint(0, 256, (e, n, k // 2), device=dev, dtype=torch.uint8, generator=g)
        scale = torch.randint(115, 122, (e, n, k // 32), device=dev, dtype=torch.uint8, generator=g)
        weights.append((data, scale))
    if experts:
        groups = min(experts, mx4_linear.TOP_K * tokens)
        rows = math.ceil(mx4_linear.TOP_K * tokens / groups)
        ids = torch.arange(groups, device=dev, dtype=torch.int32)
    else:
        groups, rows, ids = 1, tokens, None
    x = torch.randn(groups, rows, k, device=dev, dtype=torch.bfloat16, generator=g)
    return weights, x, ids


def _compile_worker(configs):
    """Run each config once on every shape and row tile it is for (filling Triton's cache)."""
    dev = torch.device("cuda")
    for name, n, k, experts in _shapes():
        for tokens in TOKENS:
            weights, x, ids = _operands(n, k, experts, tokens, dev)
            data, scale = weights[0]
            y = torch.empty(x.shape[0], x.shape[1], n, dtype=torch.bfloat16, device=dev)
            for config in _for_rows(configs, x.shape[1]):
                try:
                    fp4_matmul._launch(config, x, data, scale, ids, None, y)
                except Exception:  # noqa: BLE001 - the timing process records why
                    pass
    torch.cuda.synchronize()
    return len(configs)


def _for_rows(configs, rows):
    return [c for c in configs if c in WIDE[16 if rows <= 16 else 64]]


def precompile(configs, workers):
    """Compile ``configs`` in ``workers`` processes, each kernel (configs that differ only in
    ``per_sm`` share one) in one of them."""
    kernels = {}
    for c in configs:
        kernels.setdefault((c.mode, c.bn, c.bk, c.warps, c.stages, c.ahead), []).append(c)
    groups = list(kernels.values())
    chunks = [[c for group in groups[i::workers] for c in group] for i in range(workers)]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers) as pool:
        pool.map(_compile_worker, [c for c in chunks if c])


def _within_bf16(y, x, data, scale, ids):
    """``mx4_linear.py``'s check: within a bfloat16 ulp of the exact product (plus float32 noise);
    "exact" in float32 here (its rounding error is far below a bfloat16 ulp at these sizes)."""
    w = mx.from_mxfp4(mx.MXFP4Tensor(data, scale), torch.float32)
    if ids is not None:
        w = w[ids.long()]
    exact = torch.matmul(x.float(), w.transpose(-1, -2)).double()
    ulp = torch.finfo(torch.bfloat16).eps * exact.abs()
    return bool(((y.double() - exact).abs() <= ulp + 2**-16 * exact.abs().amax()).all())


def linear_sweep(dev, configs, save=lambda rows: None) -> list[dict]:
    rows = []
    for name, n, k, experts in _shapes():
        e = experts or 1
        copies = max(2, math.ceil(256 * MB / (2 * n * k * e))) if experts is None else 1
        for tokens in TOKENS:
            weights, x, ids = _operands(n, k, experts, tokens, dev, copies=copies, seed=tokens)
            if experts:
                subsets = [torch.arange(i * x.shape[0], (i + 1) * x.shape[0], device=dev, dtype=torch.int32) % experts
                           for i in range(max(1, experts // x.shape[0]))]
                data, scale = weights[0]
                dense = mx.from_mxfp4(mx.MXFP4Tensor(data, scale), torch.bfloat16)
                dense_ws = [dense[s.long()].transpose(1, 2) for s in subsets]
                bf16_ms = gpu_time(lambda w: torch.bmm(x, w), dense_ws)
                del dense_ws
                calls = [(data, scale, s) for s in subsets]
            else:
                dense_ws = [mx.from_mxfp4(mx.MXFP4Tensor(d[0], s[0]), torch.bfloat16) for d, s in weights]
                bf16_ms = gpu_time(lambda w: torch.nn.functional.linear(x[0], w), dense_ws)
                del dense_ws
                calls = [(d, s, None) for d, s in weights]
            torch.cuda.empty_cache()
            y = torch.empty(x.shape[0], x.shape[1], n, dtype=torch.bfloat16, device=dev)
            row = {"shape": name, "n": n, "k": k, "tokens": tokens, "bf16_ms": bf16_ms, "configs": []}
            for config in _for_rows(configs, x.shape[1]):
                entry = {"config": [config.mode, config.bn, config.bk, config.warps, config.stages, config.per_sm,
                                    config.ahead]}
                try:
                    d0, s0, i0 = calls[0]
                    y.fill_(float("nan"))
                    fp4_matmul._launch(config, x, d0, s0, i0, None, y)
                    if not _within_bf16(y, x, d0, s0, i0):
                        entry["error"] = "not within bfloat16 rounding"
                    else:
                        entry["ms"] = gpu_time(lambda c: fp4_matmul._launch(config, x, c[0], c[1], c[2], None, y), calls)
                except Exception as error:  # noqa: BLE001 - recorded
                    entry["error"] = f"{type(error).__name__}: {str(error)[:200]}"
                row["configs"].append(entry)
            timed = [c for c in row["configs"] if "ms" in c]
            best = min(timed, key=lambda c: c["ms"]) if timed else None
            row["best"] = best
            row["speedup"] = bf16_ms / best["ms"] if best else None
            rows.append(row)
            print(f"{name:28s} {tokens:3d}  bf16 {bf16_ms * 1e3:7.2f} us  fused {best['ms'] * 1e3 if best else float('nan'):7.2f} us"
                  f"  x{row['speedup'] or 0:5.2f}  {best['config'] if best else None}"
                  f"  errors {sum('error' in c for c in row['configs'])}", flush=True)
            save(rows)
            del weights, calls
            torch.cuda.empty_cache()
    return rows


def cast_sweep(dev) -> dict:
    from tools.bench.mx4_cast import exact_against_spec, shape_for, spec_bytes
    from tests.mx._cases import make_input

    x256 = [torch.randn(shape_for(256), device=dev, dtype=torch.bfloat16)]
    x64 = [torch.randn(shape_for(64), device=dev, dtype=torch.bfloat16) for _ in range(4)]
    copy_256 = gpu_time(torch.empty_like(x256[0]).copy_, x256)
    copy_64 = gpu_time(torch.empty_like(x64[0]).copy_, x64)
    specials = [make_input(shape, torch.bfloat16, seed=600 + i, elem="e2m1").to(dev) for i, shape in
                enumerate([(512, 1024), (64, 2880), (3, 40, 96)])]
    expected = spec_bytes(specials)
    numel = x256[0].numel()
    moved = 2 * numel + numel // 2 + numel // 32
    rows = []
    default = fp4.BF16_CAST_CONFIG
    for config in fp4.BF16_CONFIGS:
        fp4.BF16_CAST_CONFIG = config
        row = {"blocks": config[0], "warps": config[1], "quad": config[2]}
        try:
            row["exact"] = exact_against_spec(expected)
            for rounding in ("floor", "rceil"):
                ms256 = gpu_time(lambda t, r=rounding: mx.to_mxfp4(t, rounding=r), x256)
                ms64 = gpu_time(lambda t, r=rounding: mx.to_mxfp4(t, rounding=r), x64)
                row[rounding] = {"ms_256MB": ms256, "ms_64MB": ms64,
                                 "vs_copy_256MB": (moved / ms256) / (4 * numel / copy_256),
                                 "vs_copy_64MB": (moved / 4 / ms64) / (numel / copy_64)}
        except Exception as error:  # noqa: BLE001 - recorded
            row["error"] = f"{type(error).__name__}: {str(error)[:200]}"
        rows.append(row)
        if "error" in row:
            print(f"cast {config}: {row['error']}", flush=True)
        else:
            print(f"cast {config[0]:5d} blocks {config[1]:2d} warps {'quad  ' if config[2] else 'thread'} exact {row['exact']}"
                  + "".join(f"  {r} {row[r]['vs_copy_256MB']:.3f}/{row[r]['vs_copy_64MB']:.3f}" for r in ("floor", "rceil")),
                  flush=True)
    fp4.BF16_CAST_CONFIG = default
    return {"copy_ms_256MB": copy_256, "copy_ms_64MB": copy_64, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="mx4_sweep.json")
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--skip-cast", action="store_true")
    parser.add_argument("--skip-linear", action="store_true")
    args = parser.parse_args()
    import triton

    dev = torch.device("cuda")
    started = time.time()
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}

    def save(rows=None):
        if rows is not None:
            results["linear"] = rows
        results["seconds"] = time.time() - started
        with open(args.out, "w") as f:
            json.dump(results, f)

    wide = tuple(dict.fromkeys(WIDE[16] + WIDE[64]))
    if not args.skip_linear:
        precompile(wide, args.workers)
        results["compile_seconds"] = time.time() - started
        print(f"compiled in {results['compile_seconds']:.0f} s", flush=True)
    if not args.skip_cast:
        results["cast"] = cast_sweep(dev)
        save()
    if not args.skip_linear:
        linear_sweep(dev, wide, save)
    save()
    print(f"wrote {args.out} after {results['seconds']:.0f} s")


if __name__ == "__main__":
    main()
