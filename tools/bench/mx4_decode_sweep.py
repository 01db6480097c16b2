"""Every configuration of the CUDA MXFP4 decode kernels (``xlabridge/mx/_cuda``: ``fp4_decode.cu``,
and on Hopper ``fp4_wgmma.cu``; ``--kernels`` picks) on ``mx4_linear.py``'s shapes and token
counts, against bf16 ``linear`` (``bmm`` for the experts) timed in the same run, each result
checked against the float64 product.

    PYTHONPATH=. python3 tools/bench/mx4_decode_sweep.py   # writes tools/bench/results/mx4_decode_sweep.json

The kernels are compiled in parallel first (NVRTC); the driver gives each one's registers,
spilled bytes and CTAs an SM holds at once (``resident``: past that many a SM, a grid runs in waves). Times are
``mx_cast.gpu_time``'s (CUDA-graph replays over weights rotated past L2), as ``mx4_linear.py``'s.
Per shape and token count: bf16's time, every configuration's time, registers, spill bytes, residency and
whether its result is within the error bound, and the fastest within it. ``--packing``: the weight in
the spec's layout, repacked (``Packing.DECODE``: its own build of each kernel, for the scale rows'
alignment of each shape; ``x_paired`` configurations timed as their twins without the copy, since
that kernel reads ``x`` in those runs as it lies), or both, each configuration's entry saying which.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
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
from xlabridge.mx._cuda.dispatch import kernel_of  # noqa: E402
from xlabridge.mx._cuda import fp4_decode, fp4_wgmma  # noqa: E402
from xlabridge.mx._fp4_packing import Packing, repack  # noqa: E402

KERNELS = ("decode", "wgmma")
"""The default ``--kernels``; ``split`` (CTAs of many rows with ``K`` split across them), ``chains``
(the candidates with two sets of accumulators) and
``candidates`` (``fp4_matmul.DECODE``'s) are asked for by name."""
WARPS = ((1, 4), (1, 8), (1, 16), (2, 4))
"""(wn, wk): warps along N sharing x through L1, and splitting K."""


def decode_configs(nt: int, x_early: tuple[bool | None, ...] = (None,),
                   budgets: tuple[int, ...] = ()) -> list[fp4_decode.Config]:
    """The register path's shapes: row tiles a warp (four from 16 tokens), spans a step (four from
    32 tokens) or the next step's loads first; the ring's depths, with ``x`` through the ring or
    through L1 (through L1 only from 32 tokens); each with the register budget cut for more CTAs per
    SM too (a full SM's threads, and each of ``budgets`` CTAs per SM that fits: the register path's);
    from 16 tokens, ``x`` paired by the host (one span a step); up to 16 tokens, the register
    path's ``x`` loaded with the weight or through L1 as each of ``x_early`` says (``Config.x_early``)."""
    out = []
    steps = ((1, False), (2, False), (1, True)) + (((4, False),) if nt >= 4 else ())
    for rt, (wn, wk), (spans, double) in itertools.product((1, 2, 4) if nt >= 2 else (1, 2), WARPS, steps):
        if rt == 4 and wk == 16:
            continue
        full = 1024 // (wn * wk * 32)
        for blocks in sorted({1, full, *(b for b in budgets if b < 2 * full)}):
            for paired in ((False, True) if nt >= 2 and spans == 1 else (False,)):
                for early in (x_early if nt <= 2 else (None,)):
                    out.append(fp4_decode.Config(rt, wn, wk, spans, double, 0, False, paired, blocks, early))
    for rt, (wn, wk), stages, x_async in itertools.product((1, 2), WARPS, (4, 6, 8), (False, True) if nt <= 2 else (False,)):
        for blocks in sorted({1, 1024 // (wn * wk * 32)}):
            out.append(fp4_decode.Config(rt, wn, wk, 1, False, stages, x_async, False, blocks))
    return [c for c in out if c.fits(nt)]


def split_configs(nt: int) -> list[fp4_decode.Config]:
    """CTAs of many rows with ``K`` split across them (``Config.k_spans``), so that ``x`` is read from
    L2 once per 32 to 256 rows: one or two row tiles a warp, 2 to 8 warps along N (sharing ``x``
    through L1) and 1 to 4 along K, a span a step or the next step's loads first, splits of 8, 16 or
    32 spans, each warp taking at least 4 spans of its split; each with the register budget cut for
    a full SM's threads too (1024 of them), where that is more CTAs than one."""
    out = []
    for rt, (wn, wk), double, k_spans in itertools.product(
            (1, 2), ((2, 2), (2, 4), (4, 1), (4, 2), (4, 4), (8, 1), (8, 2)), (False, True), (8, 16, 32)):
        for blocks in sorted({1, 1024 // (wn * wk * 32)}):
            config = fp4_decode.Config(rt, wn, wk, 1, double, min_blocks=blocks, k_spans=k_spans)
            if config.fits(nt) and k_spans >= 4 * wk:
                out.append(config)
    return out


def wgmma_configs(nt: int, groups: tuple[int, ...] = (1,),
                  sums: tuple[fp4_wgmma.Sums, ...] = (fp4_wgmma.Sums.GLOBAL,)) -> list[fp4_wgmma.Config]:
    """The warpgroup kernel's: one or two warpgroups a CTA, the weight's ring of 4 or 8 stages of a
    span (of 2 or 3 stages of each of ``groups``' spans, copied together), split-K aimed at 1 to 8 CTAs
    per SM, the register budget cut for two or four CTAs per SM (warpgroups) or not; the MMAs fed a span
    at a time (``x`` in 4 slots) or two chunks at a time (``x`` in 2, 3 or 4 slots: its fewer
    registers leave shared memory bounding the CTAs per SM); a split's sums added where each of ``sums``
    says."""
    pipelines = [(fp4_wgmma.Pipeline.SPAN, 4)] + [(fp4_wgmma.Pipeline.PAIRS, slots) for slots in (2, 3, 4)]
    rings = [(stages, group) for group in groups for stages in ((4, 8) if group == 1 else (2, 3))]
    return [fp4_wgmma.Config(wg, stages, per_sm, blocks, pipeline, slots, group, where) for wg in (1, 2)
            for stages, group in rings for per_sm in (1, 2, 4, 8) for blocks in ((1, 2, 4) if wg == 1 else (1, 2))
            for pipeline, slots in pipelines for where in sums]


def candidate_configs(nt: int) -> list:
    """``fp4_matmul.DECODE``'s CUDA candidates for ``nt`` token tiles (those the tuning picks from)."""
    from xlabridge.mx._triton import fp4_matmul

    return [c.decode for c in fp4_matmul.DECODE[fp4_matmul.decode_tiles(8 * nt)]
            if isinstance(c.decode, fp4_wgmma.Config) or c.decode.fits(nt)]


def chain_configs(nt: int) -> list:
    """The candidates' decode-kernel configurations with two sets of accumulators (``acc_sets``): the
    same loads and decoding, chains of dependent MMAs half as long."""
    return [dataclasses.replace(c, acc_sets=2) for c in candidate_configs(nt)
            if isinstance(c, fp4_decode.Config) and c.fits(nt)]


def _fields(entry: dict) -> list[str]:
    """A result entry's kernel and configuration fields."""
    module = fp4_wgmma if entry["kernel"] == "fp4_wgmma" else fp4_decode
    return ["kernel", *(f.name for f in dataclasses.fields(module.Config)), "dependent", "packing"]


def _job_name(job) -> str:
    config, nt, bias, ids, packing, align = job
    if isinstance(config, fp4_wgmma.Config):
        return fp4_wgmma._name(config, nt, bias, ids, packing=packing, align=align)
    return fp4_decode._name(config, nt, bias, ids, packing, align)


def _resident(run, config, nt: int) -> int:
    """The driver's count of the kernel's CTAs an SM holds at once, as launched for ``nt`` token tiles."""
    shared = fp4_wgmma.shared_bytes(config, nt) if isinstance(config, fp4_wgmma.Config) else config.dynamic_bytes(nt)
    return run.resident(config.threads, shared)


def build(jobs, capability) -> dict:
    """``{(config, nt, bias, ids): (binary or None, info)}``, compiled by NVRTC in parallel, with
    the compile's error if any (the warpgroup kernel's builds shared between configs that differ
    only in how launches split ``K``)."""

    def one(job):
        config, nt, bias, ids, packing, align = job
        try:
            if isinstance(config, fp4_wgmma.Config):
                return job, fp4_wgmma.binary(config, nt, bias, ids, cached=False, packing=packing, align=align), {}
            return job, fp4_decode.binary(config, nt, bias, ids, capability, cached=False, packing=packing,
                                          align=align), {}
        except Exception as error:  # noqa: BLE001 - recorded
            return job, None, {"error": str(error)[-400:]}

    names = {}
    for job in jobs:  # one build per distinct kernel
        names.setdefault(_job_name(job), job)
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 4) as pool:
        done = {_job_name(job): (code, info) for job, code, info in pool.map(one, names.values())}
    return {job: done[_job_name(job)] for job in jobs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                      "mx4_decode_sweep.json"))
    parser.add_argument("--shapes", default=",".join(mx4_linear.LINEARS) + ",experts")
    parser.add_argument("--tokens", default=",".join(map(str, mx4_linear.TOKENS)))
    parser.add_argument("--kernels", default=",".join(KERNELS), help="which kernels' configurations: decode, wgmma, "
                        "split (CTAs of many rows with K split across them), chains (the candidates with two sets of "
                        "accumulators), or candidates "
                        "(fp4_matmul.DECODE's alone)")
    parser.add_argument("--launch", default="dependent", choices=("dependent", "plain", "both"),
                        help="launched to overlap the previous kernel (dependent), or not, or each config both ways")
    parser.add_argument("--prefetch", type=int, default=fp4_decode.PREFETCH_SPANS,
                        help="spans of a row brought into L2 before the previous kernel's end")
    parser.add_argument("--groups", default="1", help="the warpgroup kernel's spans a stage of its ring (1,4: "
                        "both)")
    parser.add_argument("--sums", default="global", help="where the warpgroup kernel's splits add their sums: "
                        "global, cluster, or both (global,cluster)")
    parser.add_argument("--x-early", default="auto", choices=("auto", "late", "both"),
                        help="up to 16 tokens, the register path's x loaded with the weight (auto) or through L1 "
                        "as the arithmetic reaches it (late), or both")
    parser.add_argument("--packing", default="spec", choices=("spec", "decode", "both"),
                        help="the weight's layout: the spec's, Packing.DECODE, or each configuration with both")
    parser.add_argument("--budgets", default="", help="CTAs per SM to cut the register path's budget for, besides "
                        "none and a full SM's threads (2,3,4: each that fits)")
    parser.add_argument("--every", type=int, default=1, help="time every n-th configuration only (a quick check)")
    parser.add_argument("--seconds", type=float, default=480, help="stop timing new cases after this long")
    args = parser.parse_args()
    fp4_decode.PREFETCH_SPANS = args.prefetch
    modes = {"dependent": (True,), "plain": (False,), "both": (False, True)}[args.launch]
    started = time.time()
    dev = torch.device("cuda")
    torch.zeros(1, device=dev)  # torch's context, current on this thread, for the driver to load into
    capability = torch.cuda.get_device_capability(dev)
    tokens_list = [int(t) for t in args.tokens.split(",")]
    wanted = args.shapes.split(",")
    nts = sorted({fp4_decode.token_tiles(t) for t in tokens_list})
    # the experts' rows per expert stay within two token tiles at these token counts
    kernels = args.kernels.split(",")
    packings = [Packing.SPEC, Packing.DECODE] if args.packing == "both" else [Packing(args.packing)]
    # a DECODE weight's kernels for both scale alignments of these shapes (K / 32 a multiple of 4, or of 2)
    jobs = [(c, nt, 0, ids, packing, align) for nt in nts for packing in packings
            for align in ((4, 2) if packing is Packing.DECODE else (1,))
            for c in ((decode_configs(nt, {"auto": (None,), "late": (False,), "both": (None, False)}[args.x_early],
                                      tuple(int(b) for b in args.budgets.split(",") if b))
                       if "decode" in kernels else [])[::args.every]
                      + (wgmma_configs(nt, tuple(int(g) for g in args.groups.split(",")),
                                       tuple(fp4_wgmma.Sums(w) for w in args.sums.split(",")))
                         if "wgmma" in kernels else [])
                      + (candidate_configs(nt) if "candidates" in kernels else [])
                      + (split_configs(nt) if "split" in kernels else [])
                      + (chain_configs(nt) if "chains" in kernels else []))
            if not isinstance(c, fp4_wgmma.Config) or fp4_wgmma.available(dev)
            for ids in ((False, True) if "experts" in wanted and nt <= 2 else (False,))]
    # x_paired's order is what a DECODE weight's kernel reads of x as it is: its twin without the copy
    twins = []
    for config, *rest in jobs:
        if rest[3] is Packing.DECODE and getattr(config, "x_paired", False):
            config = dataclasses.replace(config, x_paired=False)
        twins.append((config, *rest))
    jobs = list(dict.fromkeys(twins))
    built = build(jobs, capability)
    results = {"commit": os.environ.get("XLABRIDGE_COMMIT"), "command": " ".join(sys.argv), "device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "compile_seconds": time.time() - started, "kernels": len(built), "rows": []}
    print(f"compiled {len(built)} kernels in {results['compile_seconds']:.0f} s", flush=True)
    loaded = {}
    for job, (code, info) in built.items():
        if code is None:
            continue
        try:
            config, nt, bias, ids, packing, align = job
            if isinstance(config, fp4_wgmma.Config):
                run = fp4_wgmma.load(code, config, nt, bias, ids, packing=packing, align=align)
            else:
                run = fp4_decode.load(code, config, nt, bias, ids, packing=packing, align=align)
            loaded[job] = (run, {**info, "registers": run.registers, "spill_bytes": run.local_bytes,
                                 "resident": _resident(run, *job[:2])})
        except Exception as error:  # noqa: BLE001 - recorded
            info["load_error"] = str(error)[-300:]
    errors = {_job_name(job): info for job, (code, info) in built.items() if code is None or "load_error" in info}
    results["build_errors"] = dict(list(errors.items())[:20])
    print(f"loaded {len(loaded)} in {time.time() - started:.0f} s; {len(errors)} failed", flush=True)
    copy = results["copy_GBps"] = mx4_linear.copy_bandwidth(dev)
    print(f"copy {copy:.0f} GB/s", flush=True)

    def case(name, n, k, tokens, xs, weight_args, dense_fn, dense_inputs, exact_w, weight_bytes, groups, ids_list):
        """Time bf16 and every loaded kernel for one shape and token count."""
        nt = fp4_decode.token_tiles(tokens)
        dense = gpu_time(dense_fn, dense_inputs)
        exact = (xs.double() @ exact_w.double().transpose(-1, -2))
        bound = torch.finfo(torch.bfloat16).eps * exact.abs() + 2.0**-16 * exact.abs().amax()
        row = {"shape": name, "n": n, "k": k, "tokens": tokens, "bf16_ms": dense, "configs": []}
        if any(isinstance(job[0], fp4_wgmma.Config) and job[1] == nt for job in loaded):
            row["mma_order_x_ms"] = gpu_time(lambda w: fp4_wgmma.mma_order_x(xs, nt), weight_args)
        aligns = {Packing.SPEC: 1, Packing.DECODE: fp4_decode.scale_alignment(weight_args[0][1])}
        for ((config, nt_, bias, ids, packing, align), (run, info)), dependent in itertools.product(loaded.items(), modes):
            if nt_ != nt or ids != (ids_list is not None) or align != aligns[packing]:
                continue
            entry = {"kernel": kernel_of(config).__name__.rsplit(".", 1)[-1], **dataclasses.asdict(config), **info,
                     "dependent": dependent, "packing": packing.value}
            try:
                def call(w, config=config, run=run, dependent=dependent, packing=packing):
                    data, scale, ids_ = w
                    data = packed_data[data.data_ptr()] if packing is Packing.DECODE else data
                    if isinstance(config, fp4_wgmma.Config):
                        fp4_wgmma.launch_loaded(run, config, xs, data, scale, ids_, None, out, dependent, packing=packing)
                    else:
                        fp4_decode.launch_loaded(run, config, xs, data, scale, ids_, None, out, dependent,
                                                 packing=packing)
                out = torch.empty(xs.shape[0], xs.shape[1], n, dtype=torch.bfloat16, device=dev)
                call(weight_args[0])
                torch.cuda.synchronize()
                entry["within_bound"] = bool(((out.double() - exact).abs() <= bound).all())
                entry["max_error"] = float((out.double() - exact).abs().max())
                entry["ms"] = gpu_time(call, weight_args, reps=10)
            except Exception as error:  # noqa: BLE001 - recorded
                entry["error"] = f"{type(error).__name__}: {str(error)[:200]}"
            row["configs"].append(entry)
        ok = [c for c in row["configs"] if c.get("within_bound") and "ms" in c]
        row["wrong"] = sum(1 for c in row["configs"] if c.get("within_bound") is False)
        if ok:
            best = min(ok, key=lambda c: c["ms"])
            row.update(best_ms=best["ms"], speedup=dense / best["ms"],
                       weight_read_share=weight_bytes / best["ms"] / 1e6 / copy,
                       best={k_: best[k_] for k_ in _fields(best) + ["registers", "resident"]})
            row["top"] = [{**{k_: c[k_] for k_ in _fields(c)}, "ms": c["ms"]} for c in sorted(ok, key=lambda c: c["ms"])[:8]]
        results["rows"].append(row)
        with open(args.out, "w") as f:  # kept if the run is cut short
            json.dump(results, f, indent=1)
        print(json.dumps({k_: row.get(k_) for k_ in ("shape", "tokens", "bf16_ms", "best_ms", "speedup",
                                                    "weight_read_share", "best", "wrong")}), flush=True)

    packed_data: dict[int, torch.Tensor] = {}  # a weight's data (by address) repacked, for Packing.DECODE jobs

    def packed(data: torch.Tensor) -> torch.Tensor:
        if Packing.DECODE in packings:
            packed_data[data.data_ptr()] = repack(data, Packing.DECODE, Packing.SPEC)
        return data

    for name, (n, k) in mx4_linear.LINEARS.items():
        if name not in wanted:
            continue
        copies = max(2, math.ceil(mx4_linear.WORKING_SET / (2 * n * k)))
        weights = mx4_linear._weights(n, k, copies, dev)
        packed_data.clear()
        weight_args = [(packed(w.data[None]), w.scale[None], None) for w, _ in weights]
        for tokens in tokens_list:
            if time.time() - started > args.seconds:
                results.setdefault("skipped", []).append([name, tokens])
                continue
            x = torch.randn(1, tokens, k, device=dev, dtype=torch.bfloat16)
            case(name, n, k, tokens, x, weight_args, lambda w: torch.nn.functional.linear(x[0], w[1]), weights,
                 weights[0][1][None], n * k // 2 + n * k // 32, 1, None)
        del weights, weight_args
        torch.cuda.empty_cache()
    if "experts" in wanted:
        n, k = 2 * mx4_linear.INTERMEDIATE, mx4_linear.HIDDEN
        weight, weight_bf16 = mx4_linear._weights(n, k, 1, dev, experts=mx4_linear.EXPERTS)[0]
        packed_data.clear()
        packed(weight.data)
        for tokens in tokens_list:
            if time.time() - started > args.seconds:
                results.setdefault("skipped", []).append(["experts", tokens])
                continue
            hit, per_group = mx4_linear.routing(tokens)
            groups = len(hit)
            base = torch.tensor(hit, device=dev, dtype=torch.int32)
            subsets = [(base + i * groups) % mx4_linear.EXPERTS for i in range(max(2, mx4_linear.EXPERTS // groups))]
            x = torch.randn(groups, per_group, k, device=dev, dtype=torch.bfloat16)
            dense_weights = [weight_bf16[ids.long()].transpose(1, 2) for ids in subsets]
            case(mx4_linear.EXPERT_SHAPE, n, k, per_group, x, [(weight.data, weight.scale, ids) for ids in subsets],
                 lambda w: torch.bmm(x, w), dense_weights, weight_bf16[subsets[0].long()],
                 groups * (n * k // 2 + n * k // 32), groups, subsets)
            results["rows"][-1].update(token_count=tokens, experts_read=groups)
            del dense_weights
            torch.cuda.empty_cache()
    results["seconds"] = time.time() - started
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {args.out} after {results['seconds']:.0f} s")


if __name__ == "__main__":
    main()
