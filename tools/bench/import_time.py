"""What ``import xlabridge`` costs over ``import torch``, and what it loads.

Each measurement is a fresh interpreter that imports torch, then (for the xlabridge side)
xlabridge, and reports the seconds from before ``import torch`` to after the last import, on the
process's own clock, and which heavy packages ended up loaded. The driver alternates the two
sides on every repeat (so that a slower moment of a shared machine falls on both), takes medians
and prints the ratio xlabridge/torch measured in the same run; the target is at most 1.10.
Also measured: ``import xlabridge.backend`` (what ``backend="xlabridge"`` loads at the first
compile) over ``import torch``.

    python tools/bench/import_time.py --repeats 15 --out tools/bench/results/import_time.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch_xla", "jax", "jaxlib", "triton", "libtpu", "torch_tpu", "torchax", "transformers")
SIDES = {
    "torch": "import torch",
    "torch+xlabridge": "import torch\nimport xlabridge",
    "torch+xlabridge.backend": "import torch\nimport xlabridge.backend",
}


def _child(code: str) -> dict:
    program = (
        "import time, sys, json\n"
        "t0 = time.perf_counter()\n"
        f"{code}\n"
        "t1 = time.perf_counter()\n"
        f"print(json.dumps({{'seconds': t1 - t0, 'loaded': [m for m in {HEAVY!r} if m in sys.modules]}}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default=str(ROOT / "tools" / "bench" / "results" / "import_time.json"))
    args = parser.parse_args()
    for code in SIDES.values():  # warm the file cache once, not measured
        _child(code)
    runs: dict[str, list[dict]] = {side: [] for side in SIDES}
    load_before = os.getloadavg()
    started = time.time()
    for _ in range(args.repeats):
        for side, code in SIDES.items():
            runs[side].append(_child(code))
    medians = {side: statistics.median(r["seconds"] for r in rs) for side, rs in runs.items()}
    result = {
        "what": "fresh interpreter: seconds from before `import torch` to after the last import; medians",
        "python": platform.python_version(),
        "torch": __import__("torch").__version__,
        "cpus": os.cpu_count(),
        "load_average_before": list(load_before),
        "load_average_after": list(os.getloadavg()),
        "wall_s": time.time() - started,
        "repeats": args.repeats,
        "median_s": medians,
        "seconds": {side: [r["seconds"] for r in rs] for side, rs in runs.items()},
        "heavy_loaded": {side: sorted({m for r in rs for m in r["loaded"]}) for side, rs in runs.items()},
        "xlabridge_vs_torch": medians["torch+xlabridge"] / medians["torch"],
        "backend_vs_torch": medians["torch+xlabridge.backend"] / medians["torch"],
        "target": 1.10,
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"import torch: {medians['torch']:.3f} s; + xlabridge: {medians['torch+xlabridge']:.3f} s "
          f"({result['xlabridge_vs_torch']:.3f}x, target <= 1.10); + xlabridge.backend: "
          f"{medians['torch+xlabridge.backend']:.3f} s ({result['backend_vs_torch']:.3f}x); heavy packages "
          f"loaded by import xlabridge: {result['heavy_loaded']['torch+xlabridge'] or 'none'}")


if __name__ == "__main__":
    main()
