"""Long runs: the event log grows with distinct graphs, recompiles and findings, not with steps.

Runs one training script under ``xlabridge report --events DIR`` for ``--short`` and ``--long``
steps (100 and 10,000 by default): a small MLP compiled with ``openxla`` with a graph break
inside (two forward graphs, two backward graphs through AOTAutograd), an SGD step traced lazily,
``torch_xla.sync()`` at the end of each step. For each length it measures the bytes and lines of
the run's logs (the logs, plus any running sums left beside them) and the time ``read_run`` takes
to build the report from them (the median of ``--repeats`` builds in this process, after one to
warm the imports), and checks that the report counts every step. Targets: the long run's log at
most twice the short run's; its report built in seconds. Ratios are against the short run measured
in the same invocation. Writes tools/bench/results/long_runs.json.

  PJRT_DEVICE=CPU python tools/bench/long_runs.py [--short 100] [--long 10000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "tools" / "bench" / "results" / "long_runs.json"

SCRIPT = textwrap.dedent(
    """
    import sys, torch, torch_xla

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(32, 64), torch.nn.Linear(64, 8)

        def forward(self, x):
            h = torch.relu(self.a(x))
            print("a graph break", end="\\r")
            return self.b(h).pow(2).mean()

    device = torch_xla.device()
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    compiled = torch.compile(model, backend="openxla")
    x = torch.randn(16, 32, device=device)
    for _ in range(int(sys.argv[1])):
        loss = compiled(x)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch_xla.sync()
    """
)


def measure(steps: int, repeats: int, work: Path) -> dict:
    """One run of ``steps`` steps under ``xlabridge report``: its logs' size and the report's build time."""
    from xlabridge.diagnostics import read_run

    script = work / "train.py"
    script.write_text(SCRIPT)
    events = work / f"events-{steps}"
    env = dict(os.environ, PJRT_DEVICE=os.environ.get("PJRT_DEVICE", "CPU"),
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "xlabridge.cli", "report", "--events", str(events), "--",
                           sys.executable, str(script), str(steps)], env=env, capture_output=True, text=True)
    run_seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"the {steps}-step run failed:\n{done.stderr[-3000:]}")
    files = sorted(p for p in events.iterdir() if p.name.startswith("events-"))
    size = sum(p.stat().st_size for p in files)
    lines = sum(p.read_bytes().count(b"\n") for p in files)
    read_run(events)  # imports warmed
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        report = read_run(events)
        times.append(time.perf_counter() - start)
    calls = sorted({g.calls for g in report.xla_graphs})
    if calls != [steps]:
        raise SystemExit(f"the {steps}-step report counts {calls} calls per graph, not {steps}")
    return {"steps": steps, "log_bytes": size, "log_lines": lines, "log_files": [p.name for p in files],
            "report_seconds": statistics.median(times), "report_seconds_runs": times, "run_seconds": run_seconds,
            "graphs": len(report.xla_graphs), "calls_per_graph": steps, "steps_counted": report.processes[0].steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", type=int, default=100)
    parser.add_argument("--long", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", type=Path, default=RESULT)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="xlabridge-long-runs-") as scratch:
        short = measure(args.short, args.repeats, Path(scratch))
        long = measure(args.long, args.repeats, Path(scratch))
    ratio = long["log_bytes"] / short["log_bytes"]
    report_ratio = long["report_seconds"] / short["report_seconds"]
    print(f"log: {short['log_bytes']} bytes ({short['log_lines']} lines) at {args.short} steps, {long['log_bytes']} "
          f"bytes ({long['log_lines']} lines) at {args.long} steps: x{ratio:.2f} (target <= 2)")
    print(f"report build: {short['report_seconds']:.3f} s at {args.short} steps, {long['report_seconds']:.3f} s at "
          f"{args.long} steps (median of {args.repeats}): x{report_ratio:.2f}")
    load = os.getloadavg()
    payload = {
        "benchmark": "long_runs",
        "machine": f"{os.cpu_count()} CPUs, PJRT_DEVICE={os.environ.get('PJRT_DEVICE', 'CPU')}",
        "load_average_after": [round(x, 2) for x in load],
        "log_ratio": ratio,
        "report_time_ratio": report_ratio,
        "short": short,
        "long": long,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"written {args.output}")


if __name__ == "__main__":
    main()
