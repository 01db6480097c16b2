"""What observing costs: ``backend="xlabridge"`` under ``xlabridge.diagnose(log=...)`` vs plain ``openxla``.

Observed as ``xlabridge report`` observes a process: each event appended to the log as it comes, the
running sums rewritten beside it and the stall watchdog (``--stall-after``) checked by the observer's
thread a few times a second.

For each model, in one run, each configuration runs in fresh processes (so neither profits
from the other's in-memory XLA compilation cache), alternating, ``--repeats`` times:
  * first call: the first training step (Dynamo, AOTAutograd, bridge partitioning, XLA compile);
  * steady state: the median of ``--steps`` later training steps, each ended by
    ``torch_xla.sync()`` and a wait for the device.
Prints ratios against openxla measured in the same run; targets: steady-state overhead at most
2%, first call at most 10% more. Steady step times of small models on a shared 2-core machine
vary from process to process by more than those targets, so the steady-state ratio that counts is measured
*paired*: one process trains two identical copies of the model, one compiled with openxla
outside any observation and one with xlabridge inside ``diagnose()``, alternating their steps,
and the ratio of their medians is taken; an A/A control (two plain openxla copies, paired the
same way) shows how large a difference the pairing itself measures. The observed processes also time the bookkeeping
the observer adds to each compiled-graph call after the fully measured first calls (two
counter reads and one record), reported as a share of the step time, and the time spent writing the
log's lines up to the end of the first call (JSON and the write), as a share of openxla's first call:
first calls of fresh processes vary by more than 10% from run to run here, that share does not.
Writes JSON to tools/bench/results/diagnostics_overhead.json.

  PJRT_DEVICE=CPU python tools/bench/diagnostics_overhead.py [--models gpt2 bert] [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "tools" / "bench" / "results" / "diagnostics_overhead.json"
CONFIGS = ("openxla", "xlabridge+diagnose")


def _trainer(model_name: str, backend: str):
    """A timed training step (forward, backward, SGD update, sync, wait) of a fresh model copy."""
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm

    sys.path.insert(0, str(ROOT))
    from tests import models

    model, inputs = models.build(model_name, torch_xla.device())
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    compiled = torch.compile(model, backend=backend)

    def train_step() -> float:
        start = time.perf_counter()
        loss = models.loss_of(compiled(**inputs))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch_xla.sync()
        xm.wait_device_ops()
        return time.perf_counter() - start

    return train_step


def _observing(scratch: str) -> contextlib.AbstractContextManager:
    """Observation as under ``xlabridge report --stall-after``: a log written as events come, the heartbeat."""
    import xlabridge.diagnostics as xd

    return xd.diagnose(log=Path(scratch) / "events.jsonl", stall_after=600.0)


def _timing_log_writes() -> list[float]:
    """Time every event line the log writer appends (JSON and the write), in this process: the part of
    an observed first call that writing the log as events come costs, free of the run-to-run noise."""
    from xlabridge.diagnostics import events as ev

    spent = [0.0]
    original = ev.LogWriter.write

    def write(self, event):
        start = time.perf_counter()
        try:
            return original(self, event)
        finally:
            spent[0] += time.perf_counter() - start

    ev.LogWriter.write = write
    return spent


def worker(model_name: str, config: str, steps: int) -> dict:
    """First call and steady median of one configuration, alone in this process."""
    scratch = tempfile.mkdtemp(prefix="xlabridge-overhead-")
    observing = _observing(scratch) if config != "openxla" else contextlib.nullcontext()
    writing = _timing_log_writes()
    with observing as report:
        train_step = _trainer(model_name, "openxla" if config == "openxla" else "xlabridge")
        first = train_step()
        first_writes = writing[0]
        for _ in range(3):
            train_step()
        times = [train_step() for _ in range(steps)]
    # after the observation: the probe's bookkeeping timed on a graph of its own, not counted in the report
    bookkeeping_us = None if report is None else _bookkeeping_us_per_call()
    graph_calls = None if report is None else sum(g.calls for g in report.xla_graphs) / (steps + 4)
    return {
        "first_call_s": first,
        "log_writes_s_to_first_call": None if report is None else first_writes,
        "steady_median_ms": statistics.median(times) * 1e3,
        "report_graphs": None if report is None else report.graph_count,
        "graph_calls_per_step": graph_calls,
        "bookkeeping_us_per_graph_call": bookkeeping_us,
    }


def paired_worker(model_name: str, steps: int, *, observe: bool = True) -> dict:
    """Steady state of openxla and xlabridge+diagnose in one process, steps alternating.

    With ``observe=False`` the second copy is plain openxla too: the control, which shows
    what the pairing itself (a second model in the process) measures as a difference.
    """
    plain = _trainer(model_name, "openxla")
    for _ in range(4):
        plain()
    with _observing(tempfile.mkdtemp(prefix="xlabridge-overhead-")) if observe else contextlib.nullcontext():
        observed = _trainer(model_name, "xlabridge" if observe else "openxla")
        for _ in range(4):
            observed()
        plain_times, observed_times = [], []
        for i in range(steps):
            if i % 2:
                plain_times.append(plain())
                observed_times.append(observed())
            else:
                observed_times.append(observed())
                plain_times.append(plain())
    plain_ms = statistics.median(plain_times) * 1e3
    observed_ms = statistics.median(observed_times) * 1e3
    return {"openxla_ms": plain_ms, "observed_ms": observed_ms, "ratio": observed_ms / plain_ms}


def _bookkeeping_us_per_call(calls: int = 20000) -> float:
    """What the xla.helper probe adds to a steady compiled-graph call (past the fully measured
    ones: a clock, the compilation counter, a sum), timed around a graph that does nothing."""
    from xlabridge.diagnostics._observe import recorder as _recorder
    from xlabridge.diagnostics._observe.probes import xla_helper

    def nothing(*args):
        return None

    recorder = _recorder.Recorder()
    _recorder.attach(recorder)
    try:
        graph = xla_helper.ObservedGraph(nothing, None, ())
        graph.calls = xla_helper.FULLY_MEASURED_CALLS
        observed = graph.callable()
        start = time.perf_counter()
        for _ in range(calls):
            observed()
        observed_s = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(calls):
            nothing()
        plain_s = time.perf_counter() - start
    finally:
        _recorder.detach(recorder)
    return (observed_s - plain_s) / calls * 1e6


def run_worker(model_name: str, config: str, steps: int) -> dict:
    env = dict(os.environ, PJRT_DEVICE=os.environ.get("PJRT_DEVICE", "CPU"))
    out = subprocess.run(
        [sys.executable, __file__, "--worker", model_name, config, str(steps * (3 if config.startswith("paired") else 1))],
        capture_output=True, text=True, env=env, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["gpt2", "bert"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--output", type=Path, default=RESULT, help="where to write the JSON")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        name, config, steps = args.worker
        if config.startswith("paired"):
            result = paired_worker(name, int(steps), observe=config == "paired")
        else:
            result = worker(name, config, int(steps))
        print(json.dumps(result))
        return

    load_before = os.getloadavg()
    results = {}
    for name in args.models:
        runs = {config: [] for config in CONFIGS}
        paired, control = [], []
        for _ in range(args.repeats):
            for config in CONFIGS:
                runs[config].append(run_worker(name, config, args.steps))
            paired.append(run_worker(name, "paired", args.steps))
            control.append(run_worker(name, "paired-control", args.steps))
        summary = {
            config: {
                "first_call_s": statistics.median(r["first_call_s"] for r in rs),
                "steady_median_ms": statistics.median(r["steady_median_ms"] for r in rs),
                "runs": rs,
            }
            for config, rs in runs.items()
        }
        base, observed = summary["openxla"], summary["xlabridge+diagnose"]
        summary["steady_overhead_unpaired"] = observed["steady_median_ms"] / base["steady_median_ms"] - 1
        summary["paired_runs"] = paired
        summary["steady_overhead"] = statistics.median(p["ratio"] for p in paired) - 1
        summary["control_runs"] = control
        summary["control_difference"] = statistics.median(p["ratio"] for p in control) - 1
        summary["first_call_overhead"] = observed["first_call_s"] / base["first_call_s"] - 1
        bookkeeping_us = statistics.median(r["bookkeeping_us_per_graph_call"] for r in runs["xlabridge+diagnose"])
        graph_calls = statistics.median(r["graph_calls_per_step"] for r in runs["xlabridge+diagnose"])
        summary["bookkeeping_share_of_step"] = bookkeeping_us * graph_calls / (base["steady_median_ms"] * 1e3)
        writes = statistics.median(r["log_writes_s_to_first_call"] for r in runs["xlabridge+diagnose"])
        summary["log_writes_share_of_first_call"] = writes / base["first_call_s"]
        results[name] = summary
        print(
            f"{name:10s} steady (paired, same process): {summary['steady_overhead']:+.1%} (target <= +2%; "
            f"A/A control {summary['control_difference']:+.1%}; "
            f"unpaired medians {base['steady_median_ms']:.2f} vs {observed['steady_median_ms']:.2f} ms, "
            f"{summary['steady_overhead_unpaired']:+.1%})  "
            f"first call: openxla {base['first_call_s']:.2f} s, observed {observed['first_call_s']:.2f} s "
            f"({summary['first_call_overhead']:+.1%}, target <= +10%)  observer bookkeeping: "
            f"{bookkeeping_us:.1f} us x {graph_calls:.1f} graph calls = {summary['bookkeeping_share_of_step']:.2%} of a step; "
            f"writing the log as events came, to the end of the first call: {writes * 1e3:.0f} ms "
            f"({summary['log_writes_share_of_first_call']:.2%} of openxla's first call)",
            flush=True,
        )
    import torch

    payload = {
        "benchmark": "diagnostics_overhead",
        "machine": f"{os.cpu_count()} CPUs, PJRT_DEVICE={os.environ.get('PJRT_DEVICE', 'CPU')}",
        "observed": "diagnose(log=..., stall_after=600): the log written as events come, the heartbeat",
        "load_average_before_after": [[round(x, 2) for x in load_before], [round(x, 2) for x in os.getloadavg()]],
        "torch": torch.__version__,
        "repeats": args.repeats,
        "steps": args.steps,
        "models": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"written {args.output}")


if __name__ == "__main__":
    main()
