"""First-call compile time in inference: ``openxla`` vs ``xlabridge``, and a warm-cache restart.

torch_xla keeps an in-process compilation cache keyed by HLO, so each measurement is one
fresh process (``--worker``): build the model on the XLA device, then time its first
compiled call under ``torch.no_grad()`` up to the result on the host. The driver alternates
the configurations per repeat, takes medians and prints each model's ratio to ``openxla``
measured in the same run. For the cache it runs xlabridge twice with one ``cache_dir`` and
reports the second process's XLA compilations and the cache's state (on PJRT CPU with
torch_xla 2.9 the cache cannot load entries, so the second process compiles again; the
result says so rather than claiming a warm start).

The TPU part (``--part tpu``, or ``all``) measures the same first call's XLA graphs on the
compiler TPU users wait for: per model and path it captures the graphs XLA compiles during the
call (a fresh process with XLA's dump flags; only modules dumped after the model and batch are
on the device), then compiles each with libtpu for ``--tpu-target`` (``xlabridge.tpu``,
compile-only, nothing runs) and sums the compile seconds measured around libtpu's compile call.
The forward-only path is the xlabridge backend's (``openxla_eval`` for graphs that need no
gradients), the AOTAutograd path openxla's. One worker compiles every graph ``--repeats`` times,
paths alternating, after a warm-up compile; medians. Beside them: the same call's XLA:CPU compile
seconds (torch_xla's CompileTime metric, timed runs without dumps) when the CPU part runs too.

    PJRT_DEVICE=CPU python tools/bench/compile_time.py --models gpt2 bert llama t5 resnet18 --repeats 3
    PJRT_DEVICE=CPU python tools/bench/compile_time.py --part tpu --tpu-target tpu:v5e
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ("openxla", "xlabridge")
MODELS = ("gpt2", "bert", "roberta", "llama", "t5", "resnet18")
# The compile path each backend takes for a model's graphs in an inference call.
PATHS = {"openxla": "aot_autograd", "xlabridge": "forward_only"}
_DUMPED_MODULE = re.compile(r"^(module_\d+)\..*\.before_optimizations\.hlo\.pb$")


def _cpu_seconds() -> float:
    """This process's CPU seconds (user and system, all threads): less moved than wall time by
    other work on a shared machine."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _worker(model_name: str, backend: str, cache_dir: str | None, dump_dir: str | None) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    import torch
    import torch_xla
    import torch_xla.debug.metrics as met

    import xlabridge
    from tests import models
    from xlabridge.backend import cache

    device = torch_xla.device()
    model, inputs = models.build(model_name, device)
    model.eval()
    batch = models.without_labels(model, inputs)
    compiled = (
        torch.compile(model, backend="openxla") if backend == "openxla"
        else xlabridge.compile(model, cache_dir=cache_dir)
    )
    # Graphs compiled before the call (weights and batch to the device) are not the model's.
    before = met.metric_data("CompileTime")
    modules_before = sorted(os.listdir(dump_dir)) if dump_dir and os.path.isdir(dump_dir) else []
    start, cpu_start = time.perf_counter(), _cpu_seconds()
    with torch.no_grad():
        output = compiled(**batch)
    logits = output if isinstance(output, torch.Tensor) else output.logits
    logits.cpu()
    seconds, cpu_seconds = time.perf_counter() - start, _cpu_seconds() - cpu_start
    compile_time = met.metric_data("CompileTime")
    return {
        "first_call_s": seconds,
        "first_call_cpu_s": cpu_seconds,
        "xla_compiles": met.counter_value("UncachedCompile") or 0,
        "xla_compile_s": (compile_time[1] / 1e9) if compile_time else 0.0,
        "call_xla_compile_s": ((compile_time[1] - (before[1] if before else 0)) / 1e9) if compile_time else 0.0,
        "cache": cache.status() if backend == "xlabridge" else None,
        "modules_before": modules_before,
    }


def _spawn(model_name: str, backend: str, cache_dir: str | None = None, dump_dir: str | None = None) -> dict[str, Any]:
    command = [sys.executable, __file__, "--worker", "--models", model_name, "--backend", backend]
    if cache_dir is not None:
        command += ["--cache-dir", cache_dir]
    env = {**os.environ, "PJRT_DEVICE": os.environ.get("PJRT_DEVICE", "CPU")}
    if dump_dir is not None:
        command += ["--dump-dir", dump_dir]
        flags = f"--xla_dump_to={dump_dir} --xla_dump_hlo_as_proto"
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flags}".strip()
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
    cpu_medians = {b: statistics.median(r["first_call_cpu_s"] for r in runs[b]) for b in BACKENDS}
    with tempfile.TemporaryDirectory(prefix="xlabridge-cache-") as cache_dir:
        cold = _spawn(model_name, "xlabridge", cache_dir)
        warm = _spawn(model_name, "xlabridge", cache_dir)
    return {
        "first_call_s": {b: [r["first_call_s"] for r in runs[b]] for b in BACKENDS},
        "median_first_call_s": medians,
        "xlabridge_vs_openxla": medians["xlabridge"] / medians["openxla"],
        "first_call_cpu_s": {b: [r["first_call_cpu_s"] for r in runs[b]] for b in BACKENDS},
        "median_first_call_cpu_s": cpu_medians,
        "xlabridge_vs_openxla_cpu": cpu_medians["xlabridge"] / cpu_medians["openxla"],
        "xla_compiles": {b: runs[b][0]["xla_compiles"] for b in BACKENDS},
        "xla_compile_s_median": {b: statistics.median(r["xla_compile_s"] for r in runs[b]) for b in BACKENDS},
        "call_xla_compile_s_median": {b: statistics.median(r["call_xla_compile_s"] for r in runs[b]) for b in BACKENDS},
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
    print(f"{'model':10} {'openxla s':>10} {'xlabridge s':>12} {'ratio':>6} {'saved':>6} {'CPU-s ratio':>12}  "
          "warm-cache restart")
    for name, r in summary["models"].items():
        m, warm = r["median_first_call_s"], r["warm_cache"]
        state = warm["cache"]["state"]
        print(
            f"{name:10} {m['openxla']:10.2f} {m['xlabridge']:12.2f} {r['xlabridge_vs_openxla']:6.2f} "
            f"{1 - r['xlabridge_vs_openxla']:6.0%} {r['xlabridge_vs_openxla_cpu']:12.2f}  cache {state}: {warm['warm_xla_compiles']} XLA compiles, "
            f"{warm['warm_first_call_s']:.2f} s (cold {warm['cold_first_call_s']:.2f} s)"
        )
    cache = next(iter(summary["models"].values()))["warm_cache"]["cache"]
    print(f"cache: {cache['state']}: {cache['reason']}")
    print(f"load average before {summary['load_average_before']}, after {summary['load_average_after']}")


def _captured_graphs(model_name: str, backend: str, workdir: Path) -> list[tuple[str, bytes]]:
    """The HloModuleProtos XLA compiled during the model's first call on ``backend``."""
    from tests.tpu._hlo_proto import hlo_module

    dump = workdir / f"{model_name}-{backend}"
    before = {m.group(1) for name in _spawn(model_name, backend, dump_dir=str(dump))["modules_before"]
              if (m := _DUMPED_MODULE.match(name))}
    graphs = []
    for path in sorted(dump.iterdir()):
        match = _DUMPED_MODULE.match(path.name)
        if match and match.group(1) not in before:
            graphs.append((path.name.split(".before_optimizations")[0], hlo_module(path.read_bytes())))
    if not graphs:
        raise RuntimeError(f"{model_name}/{backend}: no XLA graph was dumped during the call")
    return graphs


def _drive_tpu(model_names: list[str], repeats: int, target: str, cpu: dict[str, Any] | None) -> dict[str, Any]:
    from xlabridge import tpu

    started = time.time()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="xlabridge-bench-dumps-") as workdir:
        graphs = {
            name: {PATHS[b]: _captured_graphs(name, b, Path(workdir)) for b in BACKENDS} for name in model_names
        }
    models: dict[str, Any] = {}
    with tpu.TpuCompiler(target) as compiler:
        warm_name, warm_graph = graphs[model_names[0]]["forward_only"][0]
        compiler.compile_hlo_proto(warm_graph, name=warm_name)  # libtpu's one-time start-up work
        for name in model_names:
            seconds: dict[str, list[float]] = {path: [] for path in PATHS.values()}
            last: dict[str, list[Any]] = {}
            for repeat in range(repeats):
                order = list(PATHS.values()) if repeat % 2 == 0 else list(PATHS.values())[::-1]
                for path in order:
                    results = [compiler.compile_hlo_proto(g, name=n) for n, g in graphs[name][path]]
                    seconds[path].append(sum(r.compile_seconds for r in results))
                    last[path] = results
            median = {path: statistics.median(values) for path, values in seconds.items()}
            digests = {path: [hashlib.sha1(g).hexdigest() for _, g in graphs[name][path]] for path in PATHS.values()}
            entry: dict[str, Any] = {
                # Both paths may hand XLA the very same graphs: then only the Python side differs.
                "identical_graphs": digests["forward_only"] == digests["aot_autograd"],
                "tpu_compile_s": seconds,
                "median_tpu_compile_s": median,
                "tpu_forward_only_vs_aot_autograd": median["forward_only"] / median["aot_autograd"],
                "graphs": {
                    path: [
                        {"name": r.name, "compile_s": r.compile_seconds, "kernels": r.kernel_count,
                         "hbm_bytes": r.memory.total_bytes if r.memory else None, "fits": r.fits}
                        for r in results
                    ]
                    for path, results in last.items()
                },
            }
            if cpu is not None and name in cpu["models"]:
                cpu_s = cpu["models"][name]["call_xla_compile_s_median"]
                entry["median_cpu_xla_compile_s"] = {PATHS[b]: cpu_s[b] for b in BACKENDS}
                entry["cpu_forward_only_vs_aot_autograd"] = cpu_s["xlabridge"] / cpu_s["openxla"]
            models[name] = entry
        label = last["forward_only"][0].label
        versions = compiler.versions
    return {
        "what": (
            "XLA:TPU compile seconds of the XLA graphs of the first inference call (torch.no_grad), "
            "forward-only (xlabridge) vs AOTAutograd (openxla) path; each graph compiled by libtpu's "
            "compile-only client, seconds measured around its compile call, summed per path; medians"
        ),
        "label": label,
        "target": target,
        "libtpu": versions["libtpu"],
        "jax": versions["jax"],
        "cpu_figures": "XLA:CPU compile seconds of the same call (torch_xla CompileTime, no dumps), this run"
        if cpu is not None else None,
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "wall_s": time.time() - started,
        "repeats": repeats,
        "models": models,
    }


def _print_tpu(summary: dict[str, Any]) -> None:
    print(f"\nXLA:TPU compile seconds ({summary['label']}), first inference call's graphs:")
    print("graphs: XLA graphs per path (AOTAutograd/forward-only), 'same' where both paths give XLA identical graphs")
    print(f"{'model':10} {'graphs':>6} {'AOTAutograd s':>14} {'forward-only s':>15} {'ratio':>6} {'saved':>6}"
          f"   XLA:CPU AOT s  fwd-only s  ratio")
    for name, r in summary["models"].items():
        m, ratio = r["median_tpu_compile_s"], r["tpu_forward_only_vs_aot_autograd"]
        graphs = "same" if r["identical_graphs"] else "/".join(str(len(r["graphs"][p])) for p in ("aot_autograd", "forward_only"))
        line = f"{name:10} {graphs:>6} {m['aot_autograd']:14.2f} {m['forward_only']:15.2f} {ratio:6.2f} {1 - ratio:6.0%}"
        if "median_cpu_xla_compile_s" in r:
            c = r["median_cpu_xla_compile_s"]
            line += f"   {c['aot_autograd']:13.2f} {c['forward_only']:11.2f} {r['cpu_forward_only_vs_aot_autograd']:6.2f}"
        print(line)
    print(f"load average before {summary['load_average_before']}, after {summary['load_average_after']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--part", choices=("all", "cpu", "tpu"), default="all",
                        help="cpu: first-call times on PJRT CPU; tpu: XLA:TPU compile seconds; all: both")
    parser.add_argument("--tpu-target", default="tpu:v5e")
    parser.add_argument("--output", type=Path, default=ROOT / "tools/bench/results/compile_time.json")
    parser.add_argument("--tpu-output", type=Path, default=ROOT / "tools/bench/results/compile_time_tpu.json")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--backend", choices=BACKENDS, help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", help=argparse.SUPPRESS)
    parser.add_argument("--dump-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.models[0], args.backend, args.cache_dir, args.dump_dir)))
        return
    cpu = None
    if args.part in ("all", "cpu"):
        cpu = _drive(args.models, args.repeats, args.output)
        _print(cpu)
    if args.part in ("all", "tpu"):
        sys.path.insert(0, str(ROOT))
        summary = _drive_tpu(args.models, args.repeats, args.tpu_target, cpu)
        args.tpu_output.parent.mkdir(parents=True, exist_ok=True)
        args.tpu_output.write_text(json.dumps(summary, indent=2) + "\n")
        _print_tpu(summary)


if __name__ == "__main__":
    main()
