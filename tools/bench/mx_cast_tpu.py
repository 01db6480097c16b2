"""MXFP8 cast compiled for TPU by libtpu's compile-only client (nothing runs on a TPU): kernels,
bytes and the cost model's estimate of xlabridge's plain formulation (``two_pass``, ``recompute``,
through JAX) against the Mosaic kernel, each against the roofline, for bf16 inputs with K = 8192
from 1 MB to 1 GB, per TPU generation.

    flock /tmp/xlabridge-bench.lock nice -n 10 python tools/bench/mx_cast_tpu.py   # writes tools/bench/results/mx_cast_tpu.json

Ideal bytes: the input read once, the float8 data and the scale bytes written once. Roofline:
ideal bytes over the chip's HBM bandwidth (``xlabridge.tpu.CHIPS``). For the plain formulations
``bytes accessed`` and ``cost model s`` are XLA's cost analysis of the optimized program. XLA's
cost model does not look inside a Mosaic kernel: it reports what the kernel declares
(``pl.CostEstimate``: its input and output bytes), so for the kernel the bytes are also read
from the executable's buffers (arguments + outputs), and its vector work is given by libtpu's own
static schedule of the kernel's inner loop (``--static-schedule``: LLO bundles per 1024 elements,
from libtpu's dump of the compiled kernel), which no cost model figure covers.

Also: the kernel counts of ``to_mxfp8`` and ``from_mxfp8`` as torch_xla builds them for a TPU
(``xlabridge.hlo.kernel_count(..., target="tpu:<gen>")``).
"""

from __future__ import annotations

import argparse
import collections
import functools
import glob
import json
import os
import re
import shutil
import sys
import tempfile
import time

MB = 2**20
K = 8192
SIZES_MB = (1, 16, 256, 1024)
GENERATIONS = ("v5e", "v6e", "v4", "v5p")
VARIANTS = ("two_pass", "recompute", "mosaic")


def cast_fn(variant: str, generation: str):
    """The function compiled for ``variant`` (module-level functions: the worker imports them)."""
    from xlabridge.mx import _jax
    from xlabridge.mx._mosaic import rows as _mosaic
    from xlabridge.tpu import CHIPS

    if variant == "mosaic":
        return functools.partial(_mosaic.to_mxfp8, block_size=32, rounding="floor",
                                 vmem_bytes=CHIPS[generation].vmem_bytes)
    return functools.partial(_jax.to_mxfp8, block_size=32, rounding="floor", strategy=variant)


def compiled_rows(generations, sizes) -> list[dict]:
    import jax
    import jax.numpy as jnp

    from xlabridge import tpu

    rows = []
    with tpu.TpuCompiler(f"tpu:{generations[0]}") as compiler:
        for generation in generations:
            bandwidth = tpu.CHIPS[generation].hbm_bandwidth_bytes_per_s
            for size_mb in sizes:
                shape = (size_mb * MB // 2 // K, K)
                numel = shape[0] * shape[1]
                ideal = 2 * numel + numel + numel // 32
                for variant in VARIANTS:
                    result = compiler.compile_jax(cast_fn(variant, generation), jax.ShapeDtypeStruct(shape, jnp.bfloat16),
                                                  topology=f"tpu:{generation}")
                    buffers = result.memory.argument_bytes + result.memory.output_bytes
                    row = {
                        "generation": generation, "topology": result.topology, "size_MB": size_mb, "shape": list(shape),
                        "variant": variant, "kernel_count": result.kernel_count, "kernels": list(result.kernels),
                        "ideal_bytes": ideal, "roofline_s": ideal / bandwidth,
                        "cost_model_bytes": result.bytes_accessed, "cost_model_s": result.cost_model_seconds,
                        "buffer_bytes": buffers, "temp_bytes": result.memory.temp_bytes,
                        "compile_s": result.compile_seconds, "label": result.label,
                        "libtpu": result.libtpu_version, "jax": result.jax_version,
                    }
                    if variant == "mosaic":
                        # XLA's figures for the kernel are its own declaration; its traffic is its buffers
                        row["bytes"] = buffers
                        row["cost_model_note"] = "declared by the kernel (pl.CostEstimate), not XLA's analysis"
                    else:
                        row["bytes"] = result.bytes_accessed
                    row["bytes_vs_ideal"] = row["bytes"] / ideal
                    row["bytes_at_hbm_s"] = row["bytes"] / bandwidth
                    rows.append(row)
                    print(json.dumps({k: row[k] for k in ("generation", "size_MB", "variant", "kernel_count",
                                                          "bytes_vs_ideal", "cost_model_s", "roofline_s")}), flush=True)
    return rows


# ------------------------------------------------------------------ static schedule of the kernel

_BUNDLE = re.compile(r"\s*0x([0-9a-f]+)\s")
_BACK_BRANCH = re.compile(r"sbr\.rel .*target bundleno = (\d+)")


def _loops(bundles_text: str) -> list[tuple[int, int]]:
    """(first, last) bundle of each loop: a branch back to an earlier bundle closes one."""
    loops = []
    for line in bundles_text.splitlines():
        match = _BUNDLE.match(line)
        branch = _BACK_BRANCH.search(line)
        if match and branch and int(branch.group(1)) < int(match.group(1), 16):
            loops.append((int(branch.group(1)), int(match.group(1), 16)))
    return loops


def static_schedule(generations, size_mb: int = 256) -> dict:
    """libtpu's static schedule of the Mosaic kernel's chunk loop, per generation: bundles (VLIW
    instruction words, one issued per cycle) per 1024 elements, and per unit the bundles its
    operations need at least (operations / the unit's slots per bundle)."""
    import jax
    import jax.numpy as jnp

    from xlabridge import tpu
    from xlabridge.mx._mosaic import rows as _mosaic

    out = {}
    shape = (size_mb * MB // 2 // K, K)
    for generation in generations:
        dump = tempfile.mkdtemp(prefix="xlabridge-llo-")
        previous = os.environ.get("LIBTPU_INIT_ARGS")
        # libtpu reads its flags when the worker loads it; the worker inherits this environment
        os.environ["LIBTPU_INIT_ARGS"] = f"{previous or ''} --xla_jf_dump_to={dump} --xla_jf_dump_llo_text=true".strip()
        try:
            with tpu.TpuCompiler(f"tpu:{generation}") as compiler:
                compiler.compile_jax(cast_fn("mosaic", generation), jax.ShapeDtypeStruct(shape, jnp.bfloat16))
        finally:
            if previous is None:
                del os.environ["LIBTPU_INIT_ARGS"]
            else:
                os.environ["LIBTPU_INIT_ARGS"] = previous
        # the program holds one kernel; "TLP" files are the top-level program that launches it
        bundles = [p for p in glob.glob(f"{dump}/*final_bundles.txt") if "schedule" not in p and "-TLP-" not in p]
        usage = [p for p in glob.glob(f"{dump}/*final_hlo-static-per-bundle-utilization.txt") if "-TLP-" not in p]
        if len(bundles) != 1 or len(usage) != 1:
            out[generation] = {"error": f"expected one kernel's LLO dump in {dump}, found {bundles}"}
            continue
        loops = _loops(open(bundles[0]).read())
        outer = max(loops, key=lambda loop: loop[1] - loop[0])
        first, last = min((loop for loop in loops if loop != outer), key=lambda loop: loop[0])
        elements = _mosaic.UNROLL * _mosaic.LANES * _mosaic.CHUNK_ROWS
        lines = open(usage[0]).read().splitlines()
        units = [u.strip() for u in lines[1].split(",")]
        capacity = [int(v) for v in lines[2].split()]
        per_bundle = [list(map(int, line.split())) for line in lines[4:] if line.strip() and line.split()[0].isdigit()]
        totals = [sum(row[i] for row in per_bundle[first:last + 1]) for i in range(len(units))]
        per_1024 = 1024 / elements
        out[generation] = {
            "bundles_per_1024_elements": (last - first + 1) * per_1024,
            "unit_bound_bundles_per_1024_elements": {
                u: t / c * per_1024 for u, t, c in zip(units, totals, capacity) if t
            },
            "slots_per_bundle": dict(zip(units, capacity)),
            "loop_bundles": last - first + 1,
            "loop_elements": elements,
        }
        shutil.rmtree(dump, ignore_errors=True)
        print(json.dumps({generation: out[generation]}), flush=True)
    return out


# ------------------------------------------------------------------ through torch_xla


def torch_xla_counts(generations, size_mb: int = 16) -> dict:
    """Kernel counts of the cast and of its inverse as torch_xla builds them for a TPU."""
    import torch

    from xlabridge import hlo, mx

    x = torch.randn(size_mb * MB // 2 // K, K, dtype=torch.bfloat16)
    q = mx.to_mxfp8(x)
    out = {}
    for generation in generations:
        cast = hlo.kernel_count(lambda t: mx.to_mxfp8(t), x, target=f"tpu:{generation}")
        dequantize = hlo.kernel_count(lambda d, s: mx.from_mxfp8(mx.MXTensor(d, s, 32, torch.bfloat16)),
                                      q.data, q.scale, target=f"tpu:{generation}")
        out[generation] = {
            "size_MB": size_mb,
            "to_mxfp8": {"kernel_count": cast.count, "kernels": list(cast.kernels), "label": cast.tpu.label},
            "from_mxfp8": {"kernel_count": dequantize.count, "kernels": list(dequantize.kernels),
                           "cost_model_bytes": dequantize.tpu.bytes_accessed, "label": dequantize.tpu.label},
        }
        print(json.dumps({generation: {k: v["kernel_count"] for k, v in out[generation].items() if isinstance(v, dict)}}),
              flush=True)
    return out


def summary(rows: list[dict]) -> list[dict]:
    """Per generation and size: each variant's kernels, bytes over ideal, and estimate over roofline."""
    table = collections.defaultdict(dict)
    for row in rows:
        key = (row["generation"], row["size_MB"])
        estimate = row["cost_model_s"] if row["variant"] != "mosaic" else None
        table[key][row["variant"]] = {
            "kernels": row["kernel_count"],
            "bytes_vs_ideal": round(row["bytes_vs_ideal"], 3),
            "cost_model_s_vs_roofline": None if estimate is None else round(estimate / row["roofline_s"], 2),
        }
    return [{"generation": g, "size_MB": s, **v} for (g, s), v in table.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "mx_cast_tpu.json"))
    parser.add_argument("--generations", default=",".join(GENERATIONS))
    parser.add_argument("--sizes", default=",".join(map(str, SIZES_MB)), help="input sizes in MB")
    parser.add_argument("--no-static-schedule", action="store_true")
    parser.add_argument("--no-torch-xla", action="store_true")
    args = parser.parse_args()
    generations = args.generations.split(",")
    sizes = [int(s) for s in args.sizes.split(",")]
    sys.path.insert(0, os.getcwd())
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # this process's JAX only traces; libtpu loads in the worker

    started = time.time()
    results: dict = {"commit": os.environ.get("XLABRIDGE_COMMIT"), "command": " ".join(sys.argv),
                     "what": "compiled for TPU by libtpu's compile-only client, not run"}
    results["rows"] = compiled_rows(generations, sizes)
    results["summary"] = summary(results["rows"])
    results["libtpu"], results["jax"] = results["rows"][0]["libtpu"], results["rows"][0]["jax"]
    if not args.no_static_schedule:
        results["static_schedule"] = static_schedule(generations)
    if not args.no_torch_xla:
        results["torch_xla"] = torch_xla_counts(generations)
    results["seconds"] = time.time() - started
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
