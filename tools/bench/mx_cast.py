"""MXFP8 cast benchmark on a CUDA GPU: the Triton kernel, torch.compile of the naive and the
reordered PyTorch code, the JAX/XLA:GPU version of xlabridge's formulation, and a plain device
copy of the input as the bandwidth ceiling, for inputs from 1 MB to 1 GB.

    PYTHONPATH=. python3 tools/bench/mx_cast.py --out results.json

GB/s counts the bytes a kernel must move: the cast reads the input and writes the float8 data
and the scale bytes; the copy reads and writes the input. Every timed callable runs over enough
distinct inputs (>= 256 MB) that nothing is served from L2. PyTorch-side timings replay a CUDA
graph and read CUDA events (GPU time); JAX has no events, so its calls are timed back to back
on the host clock after a warm-up, which at the small sizes includes dispatch time.

XLA:GPU is probed: each strategy of ``xlabridge/mx/_formulation.py`` is compiled in a fresh
process with the default XLA options and with each fusion-related XLA flag the installed jaxlib
knows, recording the kernels of the optimized HLO (``xlabridge.hlo.parse_kernels``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

MB = 2**20
SIZES_MB = (1, 16, 64, 256, 1024)
K = 8192
WORKING_SET = 256 * MB
FLAG_HINTS = ("triton_softmax", "multi_output", "block_level", "normalization", "generic_triton",
              "heroless", "softmax", "priority_fusion", "fusion_block", "triton_fusion")


def shape_for(size_mb: int, itemsize: int = 2) -> tuple[int, int]:
    return (size_mb * MB // itemsize // K, K)


# ----------------------------------------------------------------------------- PyTorch side


def torch_side(args) -> dict:
    import torch
    import triton

    from xlabridge import mx
    from xlabridge.mx import _triton

    torch.manual_seed(0)
    dev = torch.device("cuda")
    results: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}

    def baseline(x, cast_first):
        """PyTorch code modeled on torchao's to_mx (floor), as a user would write it."""
        shape = x.shape
        blocks = x.reshape(*shape[:-1], shape[-1] // 32, 32)
        max_abs = torch.amax(torch.abs(blocks), -1).unsqueeze(-1).to(torch.float32)
        blocks = blocks.to(torch.float32)
        unbiased = torch.clamp(((max_abs.view(torch.int32) >> 23) & 0xFF) - 127 - 8, min=-127, max=128)
        scale = (unbiased + 127).to(torch.uint8).squeeze(-1)
        scale_fp = (torch.clamp(unbiased + 127, min=1) << 23).view(torch.float32)
        scaled = torch.clamp(blocks / scale_fp, -448.0, 448.0)
        if cast_first:
            return scaled.to(torch.float8_e4m3fn).reshape(shape), scale
        return scaled.reshape(shape).to(torch.float8_e4m3fn), scale

    def naive(x):  # reshape back to x's shape *before* the fp8 cast
        return baseline(x, cast_first=False)

    def reordered(x):  # the fp8 cast first, then the reshape (a view of the fp8 result)
        return baseline(x, cast_first=True)

    compiled = {"compile_view_first": torch.compile(naive), "compile_cast_first": torch.compile(reordered)}

    def xlabridge_cast(x):
        q = mx.to_mxfp8(x)
        return q.data, q.scale

    def gpu_time(fn, inputs, reps=20) -> float:
        """Median ms of one call, from CUDA-graph replays over all inputs."""
        for x in inputs[:2]:
            fn(x)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for x in inputs:
                fn(x)
        graph.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / len(inputs))
        del graph
        return statistics.median(times)

    def kernels_of(fn, x) -> list[str]:
        fn(x)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            fn(x)
            torch.cuda.synchronize()
        return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]

    # Tile sweep of the Triton kernel at 256 MB.
    x = torch.randn(shape_for(256), device=dev, dtype=torch.bfloat16)
    sweep = []
    for tile in (16, 32, 64, 128, 256):
        for warps in (2, 4, 8):
            _triton.TILE, _triton.NUM_WARPS = tile, warps
            ms = gpu_time(xlabridge_cast, [x], reps=10)
            sweep.append({"tile": tile, "num_warps": warps, "ms": ms})
    best = min(sweep, key=lambda r: r["ms"])
    _triton.TILE, _triton.NUM_WARPS = best["tile"], best["num_warps"]
    results["triton_tile_sweep_256MB"] = sweep
    results["triton_config"] = {"tile": best["tile"], "num_warps": best["num_warps"]}

    results["kernels"] = {name: kernels_of(fn, x) for name, fn in [("xlabridge_cuda", xlabridge_cast), *compiled.items()]}
    ref_data, ref_scale = xlabridge_cast(x)
    results["agree_with_xlabridge"] = {
        name: bool(torch.equal(fn(x)[0].view(torch.uint8), ref_data.view(torch.uint8)) and torch.equal(fn(x)[1], ref_scale))
        for name, fn in compiled.items()
    }
    del x, ref_data, ref_scale

    rows = []
    cases = [(mb, torch.bfloat16) for mb in SIZES_MB] + [(256, torch.float32)]
    for size_mb, dtype in cases:
        itemsize = torch.tensor([], dtype=dtype).element_size()
        shape = shape_for(size_mb, itemsize)
        count = max(1, WORKING_SET // (size_mb * MB))
        inputs = [torch.randn(shape, device=dev, dtype=dtype) for _ in range(count)]
        numel = shape[0] * shape[1]
        in_bytes = numel * itemsize
        cast_bytes = in_bytes + numel + numel // 32
        dst = torch.empty_like(inputs[0])
        row = {"size_MB": size_mb, "dtype": str(dtype).removeprefix("torch."), "shape": list(shape), "inputs_rotated": count}
        copy_ms = gpu_time(lambda t: dst.copy_(t), inputs)
        row["copy"] = {"ms": copy_ms, "GBps": 2 * in_bytes / copy_ms / 1e6}
        variants = [("xlabridge_cuda", xlabridge_cast)]
        if dtype == torch.bfloat16:
            variants += list(compiled.items())
        for name, fn in variants:
            ms = gpu_time(fn, inputs)
            row[name] = {"ms": ms, "GBps": cast_bytes / ms / 1e6, "vs_copy": (cast_bytes / ms) / (2 * in_bytes / copy_ms)}
        if "compile_view_first" in row:
            row["xlabridge_cuda"]["speedup_vs_view_first"] = row["compile_view_first"]["ms"] / row["xlabridge_cuda"]["ms"]
        rows.append(row)
        print(json.dumps(row), flush=True)
        del inputs, dst
        torch.cuda.empty_cache()
    results["sizes"] = rows
    return results


# ----------------------------------------------------------------------------- JAX side


def candidate_flags() -> list[str]:
    """Fusion-related boolean XLA:GPU flags named in the installed jaxlib/plugin binaries."""
    import importlib.util

    roots = []
    for module in ("jaxlib", "jax_plugins"):
        spec = importlib.util.find_spec(module)
        if spec and spec.submodule_search_locations:
            roots += list(spec.submodule_search_locations)
    names: set[str] = set()
    for root in roots:
        for dirpath, _, files in os.walk(root):
            for name in files:
                if ".so" in name:
                    with open(os.path.join(dirpath, name), "rb") as f:
                        names.update(m.decode() for m in re.findall(rb"xla_gpu_[a-z0-9_]{4,80}", f.read()))
    return sorted(n for n in names if any(h in n for h in FLAG_HINTS) and not n.endswith("_"))


def jax_probe(strategy: str, size_mb: int, reps: int) -> dict:
    """Runs in its own process (XLA_FLAGS are per process): compile, count, check, time."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    sys.path.insert(0, os.getcwd())
    import torch

    from tests.mx._cases import make_input
    from tests.mx._reference import mxfp8_reference
    from xlabridge.hlo import parse_kernels
    from xlabridge.mx import _jax, _pallas

    if strategy == "pallas":
        cast = jax.jit(lambda a: _pallas.to_mxfp8(a, 32, "floor"))
    else:
        cast = jax.jit(lambda a: _jax.to_mxfp8(a, 32, "floor", strategy))
    small = make_input((256, 1024), torch.bfloat16, seed=1)
    data, scale = cast(jnp.asarray(small.float().numpy()).astype(jnp.bfloat16))
    got = (np.asarray(data).view(np.uint8), np.asarray(scale))
    exact = {}
    for ftz in (False, True):
        ref = mxfp8_reference(small.double().numpy(), 32, "floor", ftz=ftz)
        exact["ftz" if ftz else "ieee"] = bool((got[0] == ref[0]).all() and (got[1] == ref[1]).all())
    shape = shape_for(size_mb)
    count = max(1, WORKING_SET // (size_mb * MB))
    keys = jax.random.split(jax.random.PRNGKey(0), count)
    inputs = [jax.random.normal(k, shape, jnp.bfloat16) for k in keys]
    report = parse_kernels(cast.lower(inputs[0]).compile().as_text())
    jax.block_until_ready(cast(inputs[0]))
    times = []
    for _ in range(5):
        start = time.perf_counter()
        out = None
        for i in range(reps):
            out = cast(inputs[i % count])
        jax.block_until_ready(out)
        times.append((time.perf_counter() - start) / reps * 1e3)
    numel = shape[0] * shape[1]
    ms = statistics.median(times)
    return {"strategy": strategy, "size_MB": size_mb, "kernels": list(report.kernels), "kernel_count": report.count,
            "bit_exact_vs_reference": exact["ieee"], "bit_exact_vs_ftz_reference": exact["ftz"], "ms": ms, "GBps": (2 * numel + numel + numel // 32) / ms / 1e6,
            "jax": jax.__version__, "hlo": report.hlo if size_mb == 256 else None}


def run_probe(strategy: str, size_mb: int, flags: str, timeout: float = 120) -> dict:
    env = dict(os.environ, XLA_FLAGS=flags, XLA_PYTHON_CLIENT_PREALLOCATE="false", PYTHONPATH=os.getcwd())
    cmd = [sys.executable, __file__, "--probe", strategy, str(size_mb)]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"strategy": strategy, "flags": flags, "error": "timeout"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"strategy": strategy, "flags": flags, "error": done.stderr.strip().splitlines()[-3:]}
    return dict(json.loads(lines[-1]), flags=flags)


def jax_side(args) -> dict:
    from xlabridge.mx._formulation import STRATEGIES

    flags = args.flags.split(",") if args.flags is not None else candidate_flags()[: args.max_flags]
    probes = []
    for strategy in (*STRATEGIES, "pallas"):
        for flag in [""] + ([f"--{name}=true" for name in flags if name] if strategy != "pallas" else []):
            result = run_probe(strategy, 256, flag)
            summary = {k: result.get(k) for k in ("strategy", "flags", "kernel_count", "ms", "GBps", "bit_exact_vs_reference", "error")}
            print(json.dumps(summary), flush=True)
            probes.append(result)
    sizes = []
    for strategy in (*STRATEGIES, "pallas"):
        for size_mb in SIZES_MB:
            row = run_probe(strategy, size_mb, "")
            row.pop("hlo", None)
            sizes.append(row)
            print(json.dumps({k: row.get(k) for k in ("strategy", "size_MB", "kernel_count", "ms", "GBps", "error")}), flush=True)
    return {"candidate_flags": flags, "probes": probes, "sizes": sizes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="mx_cast.json")
    parser.add_argument("--max-flags", type=int, default=14)
    parser.add_argument("--flags", help="comma-separated XLA:GPU flags to try (default: discover)")
    parser.add_argument("--skip-jax", action="store_true")
    parser.add_argument("--skip-torch", action="store_true")
    parser.add_argument("--probe", nargs=2, metavar=("STRATEGY", "SIZE_MB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        print(json.dumps(jax_probe(args.probe[0], int(args.probe[1]), reps=20)))
        return
    results = {"commit": os.environ.get("XLABRIDGE_COMMIT"), "command": " ".join(sys.argv)}
    if not args.skip_torch:
        results["torch"] = torch_side(args)
    if not args.skip_jax:
        results["jax"] = jax_side(args)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
