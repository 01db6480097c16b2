"""What each way of capturing a sharded run costs per training step (``xlabridge.pod._capture``).

torch_xla's and XLA's debug switches are read once, when the process starts, so each
configuration runs in fresh processes: a lazily traced training loop of a tensor-parallel MLP
(the example's ``ShardedMLP``, wider) on a ``(data, model)`` mesh of ``--devices`` PJRT CPU
devices, one ``torch_xla.sync()`` and a wait for the device per step. Per process: the first
step (tracing and XLA compilation) and the median of the later steps. Configurations alternate
within each of ``--repeats`` rounds; each ratio is against the plain run of the same round,
and an A/A control (a second plain run) shows the spread the machine itself gives. Writes
``tools/bench/results/pod_capture_overhead.json``.

  PJRT_DEVICE=CPU python tools/bench/pod_capture_overhead.py [--repeats 3] [--steps 30]
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

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "tools" / "bench" / "results" / "pod_capture_overhead.json"


def _configs():
    from xlabridge.pod import CaptureWay

    return {
        "plain": None,
        "plain (A/A control)": None,
        "source lines (XLA_HLO_DEBUG)": CaptureWay.SOURCE_LINES,
        "debug file (PT_XLA_DEBUG_LEVEL=2)": CaptureWay.DEBUG_FILE,
        "XLA dump (text + proto)": CaptureWay.HLO_DUMP,
        "default (the three above)": CaptureWay.DEBUG_FILE | CaptureWay.HLO_DUMP | CaptureWay.SOURCE_LINES,
        "saved graphs (XLA_SAVE_TENSORS_FILE)": CaptureWay.SAVED_GRAPHS,
        "saved partitioned (+ XLA_DUMP_POST_OPTIMIZATIONS)": CaptureWay.SAVED_GRAPHS | CaptureWay.SAVED_PARTITIONED,
    }


def _worker(steps: int) -> None:
    """Train, timing each step; print the first step's and the later steps' median seconds."""
    import torch
    import torch_xla
    import torch_xla.runtime as xr

    sys.path.insert(0, str(ROOT))
    from xlabridge.examples import sharded_train

    xr.use_spmd()
    mesh = sharded_train.make_mesh(xr.global_runtime_device_count())
    device = torch_xla.device()
    torch.manual_seed(0)
    model = sharded_train.ShardedMLP(width=256, hidden=1024, depth=4).to(device)
    sharded_train.shard(model, mesh, fixed=True)
    inputs, targets = sharded_train.batch(device, mesh, size=64, width=256)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        torch_xla.sync()
        torch_xla._XLAC._xla_wait_device_ops([])
        times.append(time.perf_counter() - start)
    print(json.dumps({"first": times[0], "steady": statistics.median(times[1:])}))


def _run(ways, devices: int, steps: int) -> dict:
    from xlabridge.pod import capture_environment

    with tempfile.TemporaryDirectory(prefix="xlabridge-capture-") as directory:
        env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(devices))
        if ways is not None:
            env.update(capture_environment(directory, ways, xla_flags=os.environ.get("XLA_FLAGS", "")))
        done = subprocess.run([sys.executable, __file__, "--worker", "--steps", str(steps)],
                              env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-3000:])
        return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args.steps)
        return
    configs = _configs()
    rounds = []
    for repeat in range(args.repeats):
        measured = {name: _run(ways, args.devices, args.steps) for name, ways in configs.items()}
        rounds.append(measured)
        print(f"round {repeat + 1}: " + ", ".join(f"{n} {m['steady'] * 1e3:.1f} ms" for n, m in measured.items()), flush=True)
    summary = {}
    for name in configs:
        steady = [r[name]["steady"] / r["plain"]["steady"] for r in rounds]
        first = [r[name]["first"] / r["plain"]["first"] for r in rounds]
        summary[name] = {
            "steady_ms": statistics.median(r[name]["steady"] * 1e3 for r in rounds),
            "steady_ratio": statistics.median(steady),
            "first_step_s": statistics.median(r[name]["first"] for r in rounds),
            "first_ratio": statistics.median(first),
        }
    print(f"\n{'configuration':52} {'steady ms':>10} {'x plain':>8} {'first s':>8} {'x plain':>8}")
    for name, row in summary.items():
        print(f"{name:52} {row['steady_ms']:10.2f} {row['steady_ratio']:8.2f} {row['first_step_s']:8.2f} {row['first_ratio']:8.2f}")
    RESULT.write_text(json.dumps({
        "machine": "PJRT CPU, 2 shared cores (other jobs running)",
        "devices": args.devices, "steps": args.steps, "repeats": args.repeats,
        "model": "ShardedMLP(width=256, hidden=1024, depth=4), batch 64, (data, model) mesh",
        "configurations": summary, "rounds": rounds,
    }, indent=1) + "\n")


if __name__ == "__main__":
    main()
