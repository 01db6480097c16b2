"""Where the CUDA MXFP4 decode kernel's time goes: chosen configurations timed as built, with the
loads only (``PROBE=1``: the words folded into the result, no decoding) and with the arithmetic only
(``PROBE=2``: made-up words, no weight loads), beside bf16 ``linear``; with ``--profile``, one launch
of one configuration to run under Nsight Compute.

    PYTHONPATH=. python3 tools/bench/mx4_decode_probe.py --out mx4_decode_probe.json
    ncu --section SpeedOfLight --section WarpStateStats -k regex:mxfp4_decode \\
        python3 tools/bench/mx4_decode_probe.py --profile "llama up 14336x4096"
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from tools.bench import mx4_linear  # noqa: E402
from tools.bench.mx_cast import gpu_time  # noqa: E402
from xlabridge.mx._cuda import fp4_decode  # noqa: E402

C = fp4_decode.Config
VARIANTS = {
    "registers rt1 wk4": C(1, 1, 4, 1),
    "registers rt1 wk16": C(1, 1, 16, 1),
    "registers rt1 wk8 u4": C(1, 1, 8, 4),
    "registers rt2 wk4": C(2, 1, 4, 1),
    "ring rt1 wk4 s4 x": C(1, 1, 4, 1, False, 4, True),
    "ring rt1 wk4 s6": C(1, 1, 4, 1, False, 6),
}
PROBES = {0: "as built", 1: "loads only", 2: "arithmetic only"}


def _load(config, nt, probe, capability):
    code = fp4_decode.binary(config, nt, 0, False, capability, probe=probe)
    return fp4_decode.load(code, config, nt, 0, False, probe)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="mx4_decode_probe.json")
    parser.add_argument("--shapes", default="llama up 14336x4096,llama down 4096x14336,gpt-oss-20b expert gate_up")
    parser.add_argument("--tokens", default="1,16")
    parser.add_argument("--profile", metavar="SHAPE", help="one launch of --variant on SHAPE at 1 token, for ncu")
    parser.add_argument("--variant", default="registers rt1 wk4")
    args = parser.parse_args()
    dev = torch.device("cuda")
    torch.zeros(1, device=dev)
    capability = torch.cuda.get_device_capability(dev)
    if args.profile:
        n, k = mx4_linear.LINEARS[args.profile]
        w, _ = mx4_linear._weights(n, k, 1, dev)[0]
        x = torch.randn(1, 1, k, device=dev, dtype=torch.bfloat16)
        y = torch.empty(1, 1, n, device=dev, dtype=torch.bfloat16)
        run = _load(VARIANTS[args.variant], 1, 0, capability)
        for _ in range(3):
            fp4_decode.launch_loaded(run, VARIANTS[args.variant], x, w.data[None], w.scale[None], None, None, y)
        torch.cuda.synchronize()
        return
    out = {"device": torch.cuda.get_device_name(), "copy_GBps": mx4_linear.copy_bandwidth(dev), "rows": []}
    for name in args.shapes.split(","):
        n, k = mx4_linear.LINEARS[name]
        copies = max(2, math.ceil(mx4_linear.WORKING_SET / (2 * n * k)))
        weights = mx4_linear._weights(n, k, copies, dev)
        for tokens in map(int, args.tokens.split(",")):
            nt = fp4_decode.token_tiles(tokens)
            x = torch.randn(1, tokens, k, device=dev, dtype=torch.bfloat16)
            y = torch.empty(1, tokens, n, device=dev, dtype=torch.bfloat16)
            row = {"shape": name, "tokens": tokens,
                   "bf16_ms": gpu_time(lambda w: torch.nn.functional.linear(x[0], w[1]), weights), "variants": {}}
            for label, config in VARIANTS.items():
                for probe, what in PROBES.items():
                    if probe and config.stages:
                        continue
                    run = _load(config, nt, probe, capability)
                    ms = gpu_time(lambda w, run=run, config=config: fp4_decode.launch_loaded(
                        run, config, x, w[0].data[None], w[0].scale[None], None, None, y), weights)
                    row["variants"][f"{label} / {what}"] = {**dataclasses.asdict(config), "ms": ms,
                                                            "registers": run.registers}
            out["rows"].append(row)
            print(json.dumps({"shape": name, "tokens": tokens, "bf16_us": round(row["bf16_ms"] * 1e3, 2),
                              **{key: round(v["ms"] * 1e3, 2) for key, v in row["variants"].items()}}), flush=True)
        del weights
        torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
