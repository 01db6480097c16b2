"""The MXFP4 linear on a CUDA GPU against ``torch.nn.functional.linear`` of the bfloat16
dequantized weight, and against a public 4-bit kernel (gemlite), at decode shapes (1 to 64 tokens),
all in one run.

    PYTHONPATH=. python3 tools/bench/mx4_linear.py    # writes tools/bench/results/mx4_linear.json

Shapes: gpt-oss-20b's (its public config: hidden and intermediate size 2880, 32 experts, 4 per
token) one expert's ``gate_up`` (5760 x 2880) and ``down`` (2880 x 2880) projections, and the
expert matmul of a decode step (``mxfp4_expert_linear``: each of ``T`` tokens routed to 4 distinct
experts drawn at random (seeded), so experts get unequal numbers of rows; the experts hit, each
with the rows of the most-hit one (``mxfp4_expert_linear`` takes groups of equal rows), against
``torch.bmm`` of those experts' bf16 weights); Llama-like (Llama-3-8B's) 4096 x 4096,
14336 x 4096 and 4096 x 14336.

Each time is ``tools/bench/mx_cast.py``'s ``gpu_time`` (CUDA-graph replays between CUDA events)
over enough distinct weights (>= 256 MB for the bf16 side, the MXFP4 side rotating the same
number of copies; the experts rotate the routing over other experts) that no weight is served
from L2, as in decode, where each layer's weights are read once per token. ``speedup`` is the
bf16 time over the MXFP4 time, both from this run. ``copy_GBps`` is a device-to-device copy of
1 GiB in the same run (bytes read plus bytes written), and ``weight_read_share`` the MXFP4
weight's bytes (data and scales) over the time, as a share of it. The first call per shape times
its candidates (``fp4_matmul.TUNING``, written out per shape: the fused kernel's configs and the
dequantize-then-matmul path) and keeps the fastest (``path`` and ``config``); ``--precompile N``
first makes those first calls in ``N`` processes, which compile the candidates into Triton's cache
in parallel.

Checks, per shape and token count: the result against the float64 product of the dequantized
weight (``max_error_ulps``: in bf16 ulps of the exact value; 0.5 is correct rounding, 1 is a
neighbour that float32 sums in another order can reach), and bit for bit against the bf16
``linear`` (``bits_equal``: the share of outputs with identical bits; cuBLAS sums in its own
order too).

``--packing`` (default ``decode``): the layout of the MXFP4 weights the fused path reads, repacked
once from the cast's (``MXFP4Tensor.repack``; the bytes read are the same), as a server packs them
at load; ``spec`` times the checkpoint layout as it is.

gemlite (``--gemlite``, where it imports: carried as a wheel, not a dependency) is timed the same
way on the same shapes: its MXFP4 path (``A16W4_MXFP`` on the same packed bytes and scale bytes,
checked against the same float64 product) and its int4 path with 32-element groups
(``A16Wn``, bf16 scales and zeros: 0.625 bytes per parameter; checked against the float64 product
of its own dequantized weight). What fails to run is recorded with its error.
"""

from __future__ import annotations

import argparse
import dataclasses
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
from xlabridge.mx._cuda.dispatch import kernel_of  # noqa: E402
from xlabridge.mx._cuda import fp4_decode, fp4_wgmma  # noqa: E402
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
EXPERT_SHAPE = "gpt-oss-20b experts gate_up (top-4 routing)"


PACKING = "decode"
"""The fused path's weight layout (``--packing``)."""


def _weights(n: int, k: int, copies: int, dev, experts: int | None = None, packing: str = "spec"):
    """``copies`` MXFP4 weights of ``[n, k]`` (``[experts, n, k]``), laid out as ``packing``, and
    their bf16 dequantizations."""
    shape = (n, k) if experts is None else (experts, n, k)
    g = torch.Generator(device=dev).manual_seed(n * 31 + k)
    out = []
    for _ in range(copies):
        w = mx.to_mxfp4(torch.randn(shape, device=dev, dtype=torch.bfloat16, generator=g) * 0.02)
        out.append((w.repack(packing), w.dequantize(torch.bfloat16)))
    return out


def _check(y: torch.Tensor, x: torch.Tensor, w: torch.Tensor, reference: torch.Tensor | None) -> dict:
    """Errors of ``y`` in bf16 ulps of the float64 product ``x @ w.T``, and bit equality with ``reference``."""
    exact = (x.double() @ w.double().transpose(-1, -2))
    ulp = torch.finfo(torch.bfloat16).eps * exact.abs().clamp_min(1e-30)
    # an exponent's ulp is eps * 2**floor(log2 |v|); eps * |v| is within a factor 2 of it
    off = (y.double() - exact).abs()
    ulps = off / ulp
    # the bound the tests hold the kernel to: a bf16 rounding of each output, plus float32 sums'
    # noise relative to the largest output (outputs near zero come out of cancellation)
    bound = torch.finfo(torch.bfloat16).eps * exact.abs() + 2.0**-16 * exact.abs().amax()
    out = {"max_error_ulps": float(ulps.max()), "share_within_1_ulp": float((ulps <= 1).double().mean()),
           "within_bound": bool((off <= bound).all())}
    if reference is not None:
        out["bits_equal"] = float((y.view(torch.int16) == reference.view(torch.int16)).double().mean())
        out["bf16_max_error_ulps"] = float(((reference.double() - exact).abs() / ulp).max())
    return out


def copy_bandwidth(dev) -> float:
    """GB/s of a device-to-device copy of 1 GiB (bytes read plus bytes written)."""
    sources = [torch.randn(512 * MB, device=dev, dtype=torch.bfloat16) for _ in range(2)]
    target = torch.empty_like(sources[0])
    ms = gpu_time(target.copy_, sources)
    del sources, target
    torch.cuda.empty_cache()
    return 2 * 1024 * MB / ms / 1e6


def _chosen(n: int, k: int, groups: int, tokens: int, ids: bool) -> dict | None:
    key = next((key for key in fp4_matmul.TUNING if key[1:4] == (n, k, groups) and key[5] == ids
                and key[0] == fp4_matmul.row_tile(tokens) and key[8] == fp4_matmul.decode_tiles(tokens)), None)
    config = None if key is None else fp4_matmul._CHOSEN.get(key)
    if config is None:
        return None
    path = {"dequantize": "dequantize + matmul", "cuda": "CUDA decode kernel"}.get(config.mode, "Triton fused kernel")
    if config.mode == "cuda" and kernel_of(config.decode) is fp4_wgmma:
        path = "CUDA warpgroup kernel"
    return {"path": path, "config": dataclasses.asdict(config)}


def linear_rows(name: str, n: int, k: int, dev, copy_GBps: float) -> list[dict]:
    copies = max(2, math.ceil(WORKING_SET / (2 * n * k)))
    weights = _weights(n, k, copies, dev, packing=PACKING)
    weight_bytes = n * k // 2 + n * k // 32
    rows = []
    for tokens in TOKENS:
        x = torch.randn(tokens, k, device=dev, dtype=torch.bfloat16)
        fused = gpu_time(lambda w: mx.mxfp4_linear(x, w[0]), weights)
        dense = gpu_time(lambda w: torch.nn.functional.linear(x, w[1]), weights)
        y, reference = mx.mxfp4_linear(x, weights[0][0]), torch.nn.functional.linear(x, weights[0][1])
        row = {"shape": name, "n": n, "k": k, "tokens": tokens, "copies_rotated": copies,
               "fused_ms": fused, "bf16_linear_ms": dense, "speedup": dense / fused,
               "fused_weight_GBps": weight_bytes / fused / 1e6, "bf16_weight_GBps": 2 * n * k / dense / 1e6,
               "weight_read_share": weight_bytes / fused / 1e6 / copy_GBps,
               **(_chosen(n, k, 1, tokens, False) or {}), **_check(y, x, weights[0][1], reference)}
        rows.append(row)
        print(json.dumps({k_: row.get(k_) for k_ in ("shape", "tokens", "fused_ms", "bf16_linear_ms", "speedup",
                                                    "weight_read_share", "path", "max_error_ulps")}), flush=True)
    return rows


def routing(tokens: int, seed: int = 0) -> tuple[list[int], int]:
    """The experts that ``tokens`` tokens, each routed to ``TOP_K`` distinct experts at random,
    hit, and the most rows any of them gets."""
    g = torch.Generator().manual_seed(seed)
    counts = torch.zeros(EXPERTS, dtype=torch.int64)
    for _ in range(tokens):
        counts[torch.randperm(EXPERTS, generator=g)[:TOP_K]] += 1
    return [int(e) for e in torch.nonzero(counts).flatten()], int(counts.max())


def expert_rows(dev, copy_GBps: float) -> list[dict]:
    """gpt-oss-20b's gate_up expert matmul at decode: the experts the routing hits, relabelled
    (``+ i * groups``, mod 32) for each rotated call so that consecutive calls read other experts."""
    n, k = 2 * INTERMEDIATE, HIDDEN
    weights = _weights(n, k, 1, dev, experts=EXPERTS, packing=PACKING)
    weight, weight_bf16 = weights[0]
    rows = []
    for tokens in TOKENS:
        hit, per_group = routing(tokens)
        groups = len(hit)
        base = torch.tensor(hit, device=dev, dtype=torch.int32)
        subsets = [(base + i * groups) % EXPERTS for i in range(max(2, EXPERTS // groups))]
        x = torch.randn(groups, per_group, k, device=dev, dtype=torch.bfloat16)
        dense_weights = [weight_bf16[ids.long()].transpose(1, 2) for ids in subsets]  # gathered once, outside the timing
        fused = gpu_time(lambda ids: mx.mxfp4_expert_linear(x, weight, ids), subsets)
        dense = gpu_time(lambda w: torch.bmm(x, w), dense_weights)
        y = mx.mxfp4_expert_linear(x, weight, subsets[0])
        reference = torch.bmm(x, dense_weights[0])
        weight_bytes = groups * (n * k // 2 + n * k // 32)
        row = {"shape": EXPERT_SHAPE, "n": n, "k": k, "tokens": tokens, "experts_read": groups,
               "rows_per_expert": per_group, "fused_ms": fused, "bf16_bmm_ms": dense, "speedup": dense / fused,
               "fused_weight_GBps": weight_bytes / fused / 1e6, "bf16_weight_GBps": groups * 2 * n * k / dense / 1e6,
               "weight_read_share": weight_bytes / fused / 1e6 / copy_GBps,
               **(_chosen(n, k, groups, per_group, True) or {}),
               **_check(y, x, weight_bf16[subsets[0].long()], reference)}
        rows.append(row)
        print(json.dumps({k_: row.get(k_) for k_ in ("shape", "tokens", "experts_read", "rows_per_expert", "fused_ms",
                                                    "bf16_bmm_ms", "speedup", "weight_read_share", "path",
                                                    "max_error_ulps")}), flush=True)
        del dense_weights
        torch.cuda.empty_cache()
    return rows


def _gemlite_mxfp4(weight):
    import gemlite

    return gemlite.helper.A16W4_MXFP(device=weight.data.device, dtype=torch.bfloat16).from_packed_weights(
        weight.data, weight.scale.view(torch.float8_e8m0fnu))


def _gemlite_int4(n: int, k: int, dev, seed: int):
    """gemlite's int4 layer with 32-element groups (random codes, scales and zeros) and its weight
    dequantized in float64."""
    import gemlite

    g = torch.Generator(device=dev).manual_seed(seed)
    q = torch.randint(0, 16, (n, k), device=dev, dtype=torch.uint8, generator=g)
    scales = (torch.rand(n, k // 32, device=dev, generator=g) * 0.004 + 0.001).to(torch.bfloat16)
    zeros = torch.full((n, k // 32), 8.0, device=dev).to(torch.bfloat16)  # zeros * scales exact in bf16
    layer = gemlite.helper.A16Wn(device=dev, dtype=torch.bfloat16).from_weights(q, scales, zeros, W_nbits=4, group_size=32)
    w = (q.double().view(n, k // 32, 32) - zeros.double()[..., None]) * scales.double()[..., None]
    return layer, w.view(n, k)


def gemlite_rows(dev, copy_GBps: float, seconds: float) -> dict:
    """Both gemlite paths on every linear shape and token count, until ``seconds`` have passed."""
    try:
        import gemlite
    except Exception as error:  # noqa: BLE001 - recorded: the comparison is optional
        return {"error": f"{type(error).__name__}: {error}"}
    started = time.time()
    out = {"version": getattr(gemlite, "__version__", None), "rows": [], "skipped": []}
    order = ["llama up 14336x4096", "gpt-oss-20b expert gate_up", "llama down 4096x14336"]  # the targets' shapes first
    for name in order + [name for name in LINEARS if name not in order]:
        n, k = LINEARS[name]
        copies = max(2, math.ceil(WORKING_SET / (2 * n * k)))
        weights = [w for w, _ in _weights(n, k, copies, dev)]
        dense0 = weights[0].dequantize(torch.float32)
        for path in ("mxfp4", "int4 g32"):
            try:
                if path == "mxfp4":
                    layers, exact_w, per_param = [_gemlite_mxfp4(w) for w in weights], dense0, 0.5 + 1 / 32
                else:
                    made = [_gemlite_int4(n, k, dev, seed) for seed in range(copies)]
                    layers, exact_w, per_param = [m[0] for m in made], made[0][1], 0.5 + 4 / 32
                    del made
            except Exception as error:  # noqa: BLE001 - recorded
                out["rows"].append({"shape": name, "path": path, "error": f"{type(error).__name__}: {str(error)[:300]}"})
                continue
            for tokens in TOKENS:
                if time.time() - started > seconds:
                    out["skipped"].append([name, path, tokens])
                    continue
                x = torch.randn(tokens, k, device=dev, dtype=torch.bfloat16)
                row = {"shape": name, "path": path, "n": n, "k": k, "tokens": tokens}
                try:
                    ms = gpu_time(lambda layer: layer(x), layers)
                    y = layers[0](x)
                    row.update({"ms": ms, "weight_GBps": n * k * per_param / ms / 1e6,
                                "weight_read_share": n * k * per_param / ms / 1e6 / copy_GBps,
                                **_check(y.to(torch.bfloat16), x, exact_w, None)})
                except Exception as error:  # noqa: BLE001 - recorded
                    row["error"] = f"{type(error).__name__}: {str(error)[:300]}"
                out["rows"].append(row)
                print(json.dumps({"gemlite": path, **{k_: row.get(k_) for k_ in ("shape", "tokens", "ms", "max_error_ulps", "error")}}),
                      flush=True)
            del layers
            torch.cuda.empty_cache()
    out["seconds"] = time.time() - started
    return out


def add_candidates(path: str | None) -> dict:
    """The decode-kernel configurations in ``path`` (JSON ``{token tiles: [fp4_decode.Config
    fields]}``: a sweep's finds) put first in ``fp4_matmul.DECODE``, so that the tuning times them as it
    would once they join the table; what was added (none without ``path``)."""
    if not path:
        return {}
    with open(path) as f:
        extra = json.load(f)
    for key, configs in extra.items():
        added = fp4_matmul._decode(*(fp4_decode.Config(**fields) for fields in configs))
        fp4_matmul.DECODE[int(key)] = tuple(dict.fromkeys(added + fp4_matmul.DECODE[int(key)]))
    return extra


def _warm(tasks, packing: str, candidates: str | None = None) -> None:
    """One call of each (shape, tokens) task: compiles what its first-call tuning times."""
    add_candidates(candidates)
    dev = torch.device("cuda")
    for name, tokens in tasks:
        if name == "experts":
            n, k = 2 * INTERMEDIATE, HIDDEN
            weight, _ = _weights(n, k, 1, dev, experts=EXPERTS, packing=packing)[0]
            hit, per_group = routing(tokens)
            x = torch.randn(len(hit), per_group, k, device=dev, dtype=torch.bfloat16)
            mx.mxfp4_expert_linear(x, weight, torch.tensor(hit, device=dev, dtype=torch.int32))
        else:
            n, k = LINEARS[name]
            weight, _ = _weights(n, k, 1, dev, packing=packing)[0]
            mx.mxfp4_linear(torch.randn(tokens, k, device=dev, dtype=torch.bfloat16), weight)
    torch.cuda.synchronize()


def precompile(names: list[str], workers: int, candidates: str | None = None) -> None:
    """Run every (shape, tokens) once in ``workers`` processes first: their first-call tuning
    compiles the candidates into Triton's on-disk cache, in parallel, for this process to load."""
    tasks = [(name, tokens) for name in names for tokens in TOKENS]
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pool.starmap(_warm, [(tasks[i::workers], PACKING, candidates) for i in range(workers)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "mx4_linear.json"))
    parser.add_argument("--shapes", default=",".join(LINEARS) + ",experts", help="comma-separated names (default: all)")
    parser.add_argument("--precompile", type=int, default=0, metavar="WORKERS",
                        help="compile the candidates in this many processes first (0: compile as the tuning needs them)")
    parser.add_argument("--gemlite", type=float, default=0, metavar="SECONDS",
                        help="time gemlite's 4-bit paths too, for at most this long (0: not)")
    parser.add_argument("--packing", default="decode", choices=("spec", "decode"),
                        help="the fused path's weight layout (MXFP4Tensor.repack): decode (default) or spec")
    parser.add_argument("--candidates", metavar="FILE",
                        help="JSON {token tiles: [fp4_decode.Config fields]}: decode-kernel configurations the "
                        "tuning times before fp4_matmul.DECODE's (a sweep's finds, before they join the table)")
    args = parser.parse_args()
    globals()["PACKING"] = args.packing
    import triton

    extra = add_candidates(args.candidates)

    dev = torch.device("cuda")
    started = time.time()
    results = {"commit": os.environ.get("XLABRIDGE_COMMIT"), "command": " ".join(sys.argv),
               "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "packing": PACKING, "rows": []}
    if extra:
        results["added_candidates"] = extra
    wanted = args.shapes.split(",")
    if args.precompile:
        precompile(wanted, args.precompile, args.candidates)
        results["precompile_seconds"] = time.time() - started
    results["copy_GBps"] = copy_GBps = copy_bandwidth(dev)
    print(f"copy {copy_GBps:.0f} GB/s", flush=True)
    for name, (n, k) in LINEARS.items():
        if name in wanted:
            results["rows"] += linear_rows(name, n, k, dev, copy_GBps)
    if "experts" in wanted:
        results["rows"] += expert_rows(dev, copy_GBps)
    results["tuning"] = [{"key": [str(part) for part in key], "candidates": table} for key, table in fp4_matmul.TUNING.items()]
    if args.gemlite:
        with open(args.out, "w") as f:  # kept if gemlite takes the process down
            json.dump(results, f, indent=1)
        results["gemlite"] = gemlite_rows(dev, copy_GBps, args.gemlite)
    by_shape: dict = {}
    for row in results["rows"]:
        by_shape.setdefault(row["shape"], []).append(row)
    results["summary"] = {
        shape: {"min_speedup": min(r["speedup"] for r in rows), "max_speedup": max(r["speedup"] for r in rows),
                "max_error_ulps": max(r["max_error_ulps"] for r in rows),
                "all_within_bound": all(r["within_bound"] for r in rows),
                "weight_read_share_1_16": [min(r["weight_read_share"] for r in rows if r["tokens"] <= 16),
                                           max(r["weight_read_share"] for r in rows if r["tokens"] <= 16)]}
        for shape, rows in by_shape.items()
    }
    results["seconds"] = time.time() - started
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps(results["summary"], indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
