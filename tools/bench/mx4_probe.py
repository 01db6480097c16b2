"""Where the fused MXFP4 linear's time goes, on a CUDA GPU: a few configs of ``fp4_matmul`` timed
on chosen shapes (as ``mx4_linear.py`` times them), and, with ``--profile``, one launch of a
config and of bf16 ``linear`` to run under Nsight Compute.

    PYTHONPATH=. python3 tools/bench/mx4_probe.py --out mx4_probe.json
    ncu -k regex:'mxfp4_matmul|gemv|gemm|sm90' --launch-skip 4 --launch-count 2 \\
        python3 tools/bench/mx4_probe.py --profile llama_up
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from tools.bench import mx4_linear  # noqa: E402
from tools.bench.mx_cast import gpu_time  # noqa: E402
from xlabridge import mx  # noqa: E402
from xlabridge.mx._triton import fp4_matmul  # noqa: E402

C = fp4_matmul.Config
VARIANTS = {
    "64x256 s3": C("asm", 64, 256, 4, 3, 1),
    "64x256 s3 ahead0": C("asm", 64, 256, 4, 3, 1, 0),
    "64x128 s3": C("asm", 64, 128, 4, 3, 1),
    "64x128 s6": C("asm", 64, 128, 4, 6, 1),
    "64x128 s6 ps2": C("asm", 64, 128, 4, 6, 2),
    "128x128 w8 s4": C("asm", 128, 128, 8, 4, 1),
    "128x256 w8 s3": C("asm", 128, 256, 8, 3, 1),
}
SHAPES = {"llama_up": (14336, 4096, None), "gate_up": (5760, 2880, None), "experts": (5760, 2880, 32)}


def _operands(name, tokens, dev, copies):
    n, k, experts = SHAPES[name]
    if experts:
        weight = mx4_linear._weights(n, k, 1, dev, experts=experts)[0][0]
        hit, rows = mx4_linear.routing(tokens)
        x = torch.randn(len(hit), rows, k, device=dev, dtype=torch.bfloat16)
        base = torch.tensor(hit, device=dev, dtype=torch.int32)
        calls = [(weight.data, weight.scale, (base + i * len(hit)) % experts) for i in range(max(2, experts // len(hit)))]
        return x, calls, len(hit) * (n * k // 2 + n * k // 32)
    weights = mx4_linear._weights(n, k, copies, dev)
    x = torch.randn(1, tokens, k, device=dev, dtype=torch.bfloat16)
    return x, [(w.data[None], w.scale[None], None) for w, _ in weights], n * k // 2 + n * k // 32


def time_variants(dev, cases) -> list[dict]:
    rows = []
    for name, tokens in cases:
        n, k, _ = SHAPES[name]
        copies = max(2, math.ceil(mx4_linear.WORKING_SET / (2 * n * k)))
        x, calls, weight_bytes = _operands(name, tokens, dev, copies)
        y = torch.empty(x.shape[0], x.shape[1], n, dtype=torch.bfloat16, device=dev)
        for label, config in VARIANTS.items():
            row = {"shape": name, "tokens": tokens, "variant": label}
            try:
                ms = gpu_time(lambda c: fp4_matmul._launch(config, x, c[0], c[1], c[2], None, y), calls)
                row.update(ms=ms, weight_GBps=weight_bytes / ms / 1e6)
            except Exception as error:  # noqa: BLE001 - recorded
                row["error"] = f"{type(error).__name__}: {str(error)[:200]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def profile(dev, name: str) -> None:
    """Six launches of the first variant, then six of bf16 ``linear`` (ncu picks by name and skip)."""
    n, k, experts = SHAPES[name]
    x, calls, _ = _operands(name, 16 if experts else 1, dev, 1)
    y = torch.empty(x.shape[0], x.shape[1], n, dtype=torch.bfloat16, device=dev)
    config = next(iter(VARIANTS.values()))
    for _ in range(6):
        fp4_matmul._launch(config, x, calls[0][0], calls[0][1], calls[0][2], None, y)
    if calls[0][2] is None:
        w = mx.from_mxfp4(mx.MXFP4Tensor(calls[0][0][0], calls[0][1][0]), torch.bfloat16)
        for _ in range(6):
            torch.nn.functional.linear(x[0], w)
    torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="mx4_probe.json")
    parser.add_argument("--profile", choices=sorted(SHAPES))
    args = parser.parse_args()
    dev = torch.device("cuda")
    if args.profile:
        profile(dev, args.profile)
        return
    rows = time_variants(dev, [("llama_up", 1), ("llama_up", 16), ("gate_up", 1), ("experts", 16)])
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
