"""MXFP4 on TPU, compiled by libtpu's compile-only client (nothing runs on a TPU): the cast and its
inverse from 1 MB to 1 GB (kernels, bytes against the ideal, the cost model's time), XLA's own
compilation of the same formulation beside them, and the fused MXFP4 matmul at decode shapes beside
a bfloat16 matmul of the same shape.

    PYTHONPATH=. python tools/bench/mx4_cast_tpu.py --out tools/bench/results/mx4_cast_tpu.json
    PYTHONPATH=. .venv-torchtpu/bin/python tools/bench/mx4_cast_tpu.py --generations v7 --out tools/bench/results/mx4_cast_tpu_v7.json

(v7 needs libtpu >= 0.0.50: the TorchTPU environment's.) Each kernel is compiled as xlabridge
issues it for the generation: for v7 with its arrays pinned to HBM (``xlabridge/mx/_mosaic/hbm.py``;
``pin_hbm`` in each row). Ideal bytes: the cast reads the bf16 input and writes the packed data
(half a byte per element) and the scale bytes; the inverse the other way. ``buffer_bytes`` are the
executable's argument and output buffers (the tile padding of XLA's layouts included). A Mosaic
kernel's bytes and flops in XLA's cost analysis are what the kernel declares (``pl.CostEstimate``),
so ``cost_model_s`` of a kernel is XLA's time for those.
Matmul rows: ``y = x @ W.T`` for ``x`` of ``tokens`` rows, ``W`` MXFP4 (the Mosaic kernel) or
bfloat16 (XLA's dot); ``weight_bytes_per_parameter`` is the weight's argument bytes per element.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time

MB = 1 << 20
K = 8192
SIZES_MB = (1, 16, 256, 1024)
TOKENS = (1, 8, 64)
MATMULS = {"gpt-oss-20b gate_up": (5760, 2880), "gpt-oss-20b down": (2880, 2880), "llama 4096x4096": (4096, 4096)}


def xla_cast(x):
    """The formulation compiled by XLA itself (JAX ops, no kernel): what XLA makes of it."""
    from xlabridge.mx import _formulation
    from xlabridge.mx._jax import JaxOps

    ops = JaxOps()
    codes, scale = _formulation.cast_blocks_fp4(ops, x.reshape(x.shape[:-1] + (x.shape[-1] // 32, 32)), 32, "floor")
    return _formulation.pack_nibbles(ops, codes.reshape(x.shape)), scale


def bf16_linear(x, w):
    import jax.numpy as jnp

    return jnp.dot(x, w.T, preferred_element_type=jnp.float32).astype(x.dtype)


def _row(result, **fields) -> dict:
    memory = result.memory
    return {**fields, "kernel_count": result.kernel_count, "kernels": list(result.kernels),
            "argument_bytes": memory.argument_bytes, "output_bytes": memory.output_bytes, "temp_bytes": memory.temp_bytes,
            "cost_model_bytes": result.bytes_accessed, "cost_model_s": result.cost_model_seconds,
            "compile_s": result.compile_seconds, "label": result.label, "libtpu": result.libtpu_version, "jax": result.jax_version}


def cast_rows(compiler, generation: str, sizes) -> list[dict]:
    import jax

    from tools.bench import mx4_cast_tpu as this  # by its import name, so the compile worker can import it
    from xlabridge import tpu
    from xlabridge.mx._mosaic import fp4, hbm

    bandwidth = tpu.CHIPS[generation].hbm_bandwidth_bytes_per_s
    vmem = tpu.CHIPS[generation].vmem_bytes
    pin = hbm.pins(generation)
    rows = []
    for size_mb in sizes:
        shape = (size_mb * MB // 2 // K, K)
        n = shape[0] * shape[1]
        ideal = 2 * n + n // 2 + n // 32
        variants = [
            ("cast", functools.partial(fp4.to_mxfp4, rounding="floor", vmem_bytes=vmem, pin_hbm=pin),
             [jax.ShapeDtypeStruct(shape, "bfloat16")]),
            ("dequantize", functools.partial(fp4.from_mxfp4, dtype="bfloat16", vmem_bytes=vmem, pin_hbm=pin),
             [jax.ShapeDtypeStruct((shape[0], K // 2), "uint8"), jax.ShapeDtypeStruct((shape[0], K // 32), "uint8")]),
        ]
        if size_mb <= 16:  # XLA's own compilation of the formulation, for comparison
            variants.append(("cast, XLA's own fusions", this.xla_cast, [jax.ShapeDtypeStruct(shape, "bfloat16")]))
        for variant, fn, args in variants:
            result = compiler.compile_jax(fn, *args, topology=f"tpu:{generation}")
            buffers = result.memory.argument_bytes + result.memory.output_bytes
            row = _row(result, generation=generation, size_MB=size_mb, shape=list(shape), variant=variant,
                       pin_hbm=pin and variant in ("cast", "dequantize"), ideal_bytes=ideal,
                       buffer_bytes=buffers, buffer_bytes_vs_ideal=buffers / ideal, roofline_s=ideal / bandwidth)
            rows.append(row)
            print(json.dumps({k: row[k] for k in ("generation", "size_MB", "variant", "kernel_count", "buffer_bytes_vs_ideal",
                                                  "cost_model_s", "roofline_s")}), flush=True)
    return rows


def matmul_rows(compiler, generation: str) -> list[dict]:
    import jax

    from tools.bench import mx4_cast_tpu as this
    from xlabridge.mx._mosaic import fp4_matmul, hbm

    S = jax.ShapeDtypeStruct
    pin = hbm.pins(generation)
    linear = functools.partial(fp4_matmul.linear, pin_hbm=pin)
    rows = []
    for name, (n, k) in MATMULS.items():
        for tokens in TOKENS:
            fused = compiler.compile_jax(linear, S((tokens, k), "bfloat16"), S((n, k // 2), "uint8"),
                                         S((n, k // 32), "uint8"), topology=f"tpu:{generation}")
            dense = compiler.compile_jax(this.bf16_linear, S((tokens, k), "bfloat16"), S((n, k), "bfloat16"), topology=f"tpu:{generation}")
            for variant, result, weight_bytes in (("mxfp4 (Mosaic kernel)", fused, n * k // 2 + n * k // 32),
                                                  ("bf16 (XLA dot)", dense, 2 * n * k)):
                row = _row(result, generation=generation, shape=name, n=n, k=k, tokens=tokens, variant=variant,
                           pin_hbm=pin and result is fused,
                           weight_bytes=weight_bytes, weight_bytes_per_parameter=weight_bytes / (n * k))
                rows.append(row)
            fused_row, dense_row = rows[-2], rows[-1]
            if fused_row["cost_model_s"] and dense_row["cost_model_s"]:
                fused_row["cost_model_speedup_vs_bf16"] = dense_row["cost_model_s"] / fused_row["cost_model_s"]
            print(json.dumps({"generation": generation, "shape": name, "tokens": tokens,
                              "mxfp4": [fused_row["kernel_count"], fused_row["cost_model_s"]],
                              "bf16": [dense_row["kernel_count"], dense_row["cost_model_s"]]}), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="mx4_cast_tpu.json")
    parser.add_argument("--generations", default="v5e,v6e")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES_MB)))
    parser.add_argument("--no-matmul", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, os.getcwd())
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # this process's JAX only traces; libtpu loads in the worker
    from xlabridge import tpu

    generations = args.generations.split(",")
    started = time.time()
    results: dict = {"commit": os.environ.get("XLABRIDGE_COMMIT"), "command": " ".join(sys.argv),
                     "what": "compiled for TPU by libtpu's compile-only client, not run", "cast": [], "matmul": []}
    with tpu.TpuCompiler(f"tpu:{generations[0]}") as compiler:
        for generation in generations:
            results["cast"] += cast_rows(compiler, generation, [int(s) for s in args.sizes.split(",")])
            if not args.no_matmul:
                results["matmul"] += matmul_rows(compiler, generation)
        results["libtpu"], results["jax"] = compiler.versions["libtpu"], compiler.versions["jax"]
    kernels = [r for r in results["cast"] if not r["variant"].startswith("cast, XLA")]
    results["summary"] = {
        "kernel_counts": {f"{r['generation']} {r['variant']} {r['size_MB']} MB": r["kernels"] for r in kernels},
        "one_kernel_everywhere": all(r["kernel_count"] == 1 for r in kernels),
        "max_buffer_bytes_vs_ideal": max(r["buffer_bytes_vs_ideal"] for r in kernels),
    }
    results["seconds"] = time.time() - started
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps(results["summary"], indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
