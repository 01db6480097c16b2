"""First-call compile time in inference: ``openxla`` vs ``xlabridge``, and a warm-cache restart.

torch_xla keeps an in-process compilation cache keyed by HLO, so each measurement is one
fresh process (``--worker``): build the model on the XLA device, then time its first
compiled call under ``torch.no_grad()`` up to the result on the host. The driver alternates
the configurations per repeat, takes medians and prints each model's ratio to ``openxla``
measured in the same run. For the cache it runs xlabridge twice with one ``cache_dir`` and
reports the second process's XLA compilations and the cache's state (on PJRT CPU with
torch_xla 2.9 the cache cannot load entries, so the second process compiles again; the
result says so rather than claiming a warm start).

    PJRT_DEVICE=CPU python tools/bench/compile_time.py --models gpt2 bert llama resnet18 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ("openxla", "xlabridge")


def _worker(model_name: str, backend: str, cache_dir: str | None) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    import torch
    import torch_xla
    import torch_xla.debug.metrics as met

    import xlabridge
    from tests import models
    from xlabridge import cache

    device = torch_xla.device()
    model, inputs = models.build(model_name, device)
    model.eval()
    batch = models.without_labels(model, inputs)
    compiled = (
        torch.compile(model, backend="openxla") if backend == "openxla"
        else xlabridge.compile(model, cache_dir=cache_dir)
    )
    start = time.perf_counter()
    with torch.no_grad():
        output = compiled(**batch)
    logits = output if isinstance(output, torch.Tensor) else output.logits
    logits.cpu()
    seconds = time.perf_counter() - start
    compile_time = met.metric_data("CompileTime")
    return {
        "first_call_s": seconds,
        "xla_compiles": met.counter_value("UncachedCompile") or 0,
        "xla_compile_s": (compile_time[1] / 1e9) if compile_time else 0.0,
        "cache": cache.status() if backend == "xlabridge" else None,
    }


def _spawn(model_name: str, backend: str, cache_dir: str | None = None) -> dict[str, Any]:
    command = [sys.executable, __file__, "--worker", "--models", model_name, "--backend", backend]
    if cache_dir is not None:
        command += ["--cache-dir", cache_dir]
    env = {**os.environ, "PJRT_DEVICE": os.environ.get("PJRT_DEVICE", "CPU")}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"{model_name}/{backend} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _bench_model(model_name: str, repeats: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {b: [] for b in BACKENDS}
    for repeat in range(repeats):
        order = BACKENDS if repeat % 2 == 0 else BACKENDS[::-1]
        for backend in order:
            runs[backend].append(_spawn(model_name, backend))
    medians = {b: statistics.median(r["first_call_s"] for r in runs[b]) for b in BACKENDS}
    with tempfile.TemporaryDirectory(prefix="xlabridge-cache-") as cache_dir:
        cold = _spawn(model_name, "xlabridge", cache_dir)
        warm = _spawn(model_name, "xlabridge", cache_dir)
    return {
        "first_call_s": {b: [r["first_call_s"] for r in runs[b]] for b in BACKENDS},
        "median_first_call_s": medians,
        "xlabridge_vs_openxla": medians["xlabridge"] / medians["openxla"],
        "xla_compiles": {b: runs[b][0]["xla_compiles"] for b in BACKENDS},
        "xla_compile_s_median": {b: statistics.median(r["xla_compile_s"] for r in runs[b]) for b in BACKENDS},
        "warm_cache": {
            "cold_first_call_s": cold["first_call_s"],
            "warm_first_call_s": warm["first_call_s"],
            "warm_xla_compiles": warm["xla_compiles"],
            "cache": warm["cache"],
        },
    }


def _drive(model_names: list[str], repeats: int, output: Path) -> dict[str, Any]:
    import torch
    import torch_xla

    load_before = os.getloadavg()
    started = time.time()
    results = {name: _bench_model(name, repeats) for name in model_names}
    summary = {
        "what": "first compiled call in inference (torch.no_grad), fresh process each, medians",
        "pjrt_device": os.environ.get("PJRT_DEVICE", "CPU"),
        "torch": torch.__version__,
        "torch_xla": torch_xla.__version__,
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "wall_s": time.time() - started,
        "repeats": repeats,
        "models": results,
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _print(summary: dict[str, Any]) -> None:
    print(f"{'model':10} {'openxla s':>10} {'xlabridge s':>12} {'ratio':>6} {'saved':>6}  warm-cache restart")
    for name, r in summary["models"].items():
        m, warm = r["median_first_call_s"], r["warm_cache"]
        state = warm["cache"]["state"]
        print(
            f"{name:10} {m['openxla']:10.2f} {m['xlabridge']:12.2f} {r['xlabridge_vs_openxla']:6.2f} "
            f"{1 - r['xlabridge_vs_openxla']:6.0%}  cache {state}: {warm['warm_xla_compiles']} XLA compiles, "
            f"{warm['warm_first_call_s']:.2f} s (cold {warm['cold_first_call_s']:.2f} s)"
        )
    cache = next(iter(summary["models"].values()))["warm_cache"]["cache"]
    print(f"cache: {cache['state']}: {cache['reason']}")
    print(f"load average before {summary['load_average_before']}, after {summary['load_average_after']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["gpt2", "bert", "llama", "resnet18"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, default=ROOT / "tools/bench/results/compile_time.json")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--backend", choices=BACKENDS, help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.models[0], args.backend, args.cache_dir)))
        return
    _print(_drive(args.models, args.repeats, args.output))


if __name__ == "__main__":
    main()
