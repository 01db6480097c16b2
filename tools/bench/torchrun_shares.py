"""Each rank's time split of torchrun DDP and FSDP2 jobs, cold and warm inductor caches, and its "other".

Runs ``xlabridge/examples/torchrun_train.py`` under ``xlabridge report --json`` with ``torchrun --standalone
--nproc_per_node N``: DDP (the model compiled whole) and FSDP2 (each block compiled, then sharded),
each first with a fresh ``TORCHINDUCTOR_CACHE_DIR`` (cold) and then again with the same one (warm).
NCCL on GPUs where CUDA has at least N of them, gloo on the CPU otherwise (the script picks). Writes
each process's shares in seconds and "other" as a fraction of its wall, and each rank's own clock
(script seconds, process-group interval), to the JSON file given (issue 32's goal: "other" at most
10% on each rank).

    python tools/bench/torchrun_shares.py --nproc 2 --out tools/bench/results/torchrun_shares.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "xlabridge" / "examples" / "torchrun_train.py"
CONFIGS = {"ddp": ["--mode", "ddp"], "fsdp2": ["--mode", "fsdp2", "--compile", "blocks"]}


def _device() -> str:
    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)} (NCCL)"
    return f"CPU, {os.cpu_count()} cores (gloo)"


def _run(config: str, cache: Path, work: Path, nproc: int, backend: str, steps: int) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache), PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    env.setdefault("PJRT_DEVICE", "CPU")
    command = [sys.executable, "-m", "xlabridge.cli", "report", "--events", str(work / "events"), "--json",
               str(work / "report.json"), "--", sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={nproc}", str(SCRIPT), *CONFIGS[config], "--backend", backend, "--steps",
               str(steps), "--out", str(work / "clock")]
    started = time.time()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.time() - started
    if done.returncode:
        return {"error": done.stderr[-2000:], "status": done.returncode}
    report = json.loads((work / "report.json").read_text())
    starts = {}
    for log in (work / "events").glob("events-*.jsonl"):
        first = json.loads(log.read_text().splitlines()[0])
        starts[first["pid"]] = first
    rows = {p["pid"]: p for p in report["processes"]}
    ranks = [p for p in rows.values() if p.get("rank") is not None]
    launcher_pids = {starts[p["pid"]].get("parent_pid") for p in ranks if p["pid"] in starts}
    processes = []
    for split in report["time"]:
        rank = rows.get(split["pid"], {}).get("rank")
        name = f"rank {rank}" if rank is not None else ("launcher" if split["pid"] in launcher_pids else
                                                         f"pid {split['pid']}")
        entry = {"process": name, "wall": round(split["wall"], 3),
                 "other_fraction": round(split["other"] / split["wall"], 4) if split["wall"] else None,
                 "shares": {k: round(v, 3) for k, v in split.items()
                            if k not in ("pid", "wall", "helpers") and isinstance(v, (int, float)) and v},
                 "helpers": split.get("helpers", 0)}
        if rank is not None:
            clock_file = work / f"clock.rank{rank}.json"
            if clock_file.is_file():
                clock = json.loads(clock_file.read_text())
                entry["clock"] = {"script": round(clock["end"] - clock["start"], 3),
                                  "process_group": round(clock["pg"] - clock["imported"], 3)}
        processes.append(entry)
    processes.sort(key=lambda e: (e["process"] != "launcher", e["process"]))
    graphs = {}
    for graph in report["dynamo"]["graphs"]:
        rank = rows.get(graph["pid"], {}).get("rank")
        graphs[f"rank {rank}"] = graphs.get(f"rank {rank}", 0) + 1
    requests = sorted({(r["how"], r["target"], r["compiles_nothing"]) for r in report["dynamo"].get("requests", [])})
    return {"command_seconds": round(seconds, 2), "processes": processes,
            "dynamo_graphs": graphs, "breaks": len(report["dynamo"]["breaks"]),
            "requests": [{"how": how, "target": target, "compiles_nothing": nothing} for how, target, nothing in requests],
            "findings": sorted({f["kind"] for f in report["findings"]})}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2, help="ranks per job (torchrun --nproc_per_node)")
    parser.add_argument("--backend", default="inductor", help="the torch.compile backend")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--out", default=str(REPO / "tools" / "bench" / "results" / "torchrun_shares.json"))
    args = parser.parse_args()
    results: dict = {"device": _device(), "python": platform.python_version(), "nproc": args.nproc,
                     "backend": args.backend, "steps": args.steps, "runs": {}}
    import torch

    results["torch"] = torch.__version__
    with tempfile.TemporaryDirectory(prefix="torchrun-shares-") as scratch:
        for config in args.configs:
            cache = Path(scratch) / config / "inductor-cache"
            for caches in ("cold", "warm"):
                print(f"torchrun_shares: {config}, {caches} caches", file=sys.stderr, flush=True)
                result = _run(config, cache, Path(scratch) / config / caches, args.nproc, args.backend, args.steps)
                results["runs"][f"{config}-{caches}"] = result
                for entry in result.get("processes", []):
                    print(f"  {entry['process']:>9}: wall {entry['wall']:8.2f} s, other "
                          f"{100 * (entry['other_fraction'] or 0):5.1f}%", file=sys.stderr)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"torchrun_shares: written to {out}", file=sys.stderr)
    return 0 if all("error" not in r for r in results["runs"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
