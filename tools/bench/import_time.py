"""What ``import xlabridge`` costs over ``import torch``, and what it loads.

Each measurement is a fresh interpreter that imports torch, then the module measured
(``xlabridge``, or ``xlabridge.backend``: what ``backend="xlabridge"`` loads at the first
compile), timing each import on the process's own clock: the ratio
``(torch + module) / torch`` is taken within one process, so that a busy moment of a shared
machine weighs on the baseline as on the module. The driver alternates the two modules on every
repeat and takes medians of the per-process ratios; the target is at most 1.10. It also reports
which heavy packages (torch_xla, JAX, Triton, libtpu, ...) ended up loaded.

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
MODULES = ("xlabridge", "xlabridge.backend")


def _child(module: str) -> dict:
    program = (
        "import time, sys, json\n"
        "t0 = time.perf_counter()\n"
        "import torch\n"
        "t1 = time.perf_counter()\n"
        f"import {module}\n"
        "t2 = time.perf_counter()\n"
        f"print(json.dumps({{'torch_s': t1 - t0, 'module_s': t2 - t1, "
        f"'loaded': [m for m in {HEAVY!r} if m in sys.modules]}}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default=str(ROOT / "tools" / "bench" / "results" / "import_time.json"))
    args = parser.parse_args()
    for module in MODULES:  # warm the file cache once, not measured
        _child(module)
    runs: dict[str, list[dict]] = {module: [] for module in MODULES}
    load_before = os.getloadavg()
    started = time.time()
    for _ in range(args.repeats):
        for module in MODULES:
            runs[module].append(_child(module))
    ratios = {module: [(r["torch_s"] + r["module_s"]) / r["torch_s"] for r in rs] for module, rs in runs.items()}
    result = {
        "what": "fresh interpreter: import torch, then the module, each timed in the same process; "
                "ratio (torch + module) / torch per process, medians",
        "python": platform.python_version(),
        "torch": __import__("torch").__version__,
        "cpus": os.cpu_count(),
        "load_average_before": list(load_before),
        "load_average_after": list(os.getloadavg()),
        "wall_s": time.time() - started,
        "repeats": args.repeats,
        "median_import_torch_s": statistics.median(r["torch_s"] for rs in runs.values() for r in rs),
        "median_module_s": {module: statistics.median(r["module_s"] for r in rs) for module, rs in runs.items()},
        "runs": runs,
        "heavy_loaded": {module: sorted({m for r in rs for m in r["loaded"]}) for module, rs in runs.items()},
        "xlabridge_vs_torch": statistics.median(ratios["xlabridge"]),
        "backend_vs_torch": statistics.median(ratios["xlabridge.backend"]),
        "target": 1.10,
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"import torch: {result['median_import_torch_s']:.3f} s; import xlabridge after it: "
          f"{result['median_module_s']['xlabridge'] * 1e3:.1f} ms ({result['xlabridge_vs_torch']:.3f}x, target <= 1.10); "
          f"import xlabridge.backend after it: {result['median_module_s']['xlabridge.backend'] * 1e3:.1f} ms "
          f"({result['backend_vs_torch']:.3f}x); heavy packages loaded by import xlabridge: "
          f"{result['heavy_loaded']['xlabridge'] or 'none'}")

if __name__ == "__main__":
    main()
