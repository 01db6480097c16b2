"""Check ``xlabridge report`` on a GPU training loop against the loop's own clock.

Runs ``tools/bench/gpu_train_loop.py`` under ``xlabridge report --json`` and checks:
  * "other" is at most 10% of the process's wall time;
  * tracing + backend compile (Dynamo, AOTAutograd, inductor's forward and backward compiles) fit
    inside the loop's first step, and make up most of it (the first step is those compiles and one
    step's work);
  * execution (the compiled graphs' calls, host time and, on CUDA, their GPU spans: the loop's own
    ``loss.item()`` waits on them) is at least half the later steps' time and at most all steps' time
    (the eager optimizer step and the loss's host read are not compiled graphs);
  * the backend is named ``inductor`` and the timeline has backend-compile, execute (and on CUDA,
    device) spans.
Prints the shares beside the clock, exits 1 if a check fails; ``--json`` also writes those rows and
the verdict, with the card and versions they ran on (``tools/bench/results/gpu_report_check.json``
keeps the latest run's).

    PYTHONPATH=. python tools/bench/check_gpu_report.py [--steps 30] [--out report.json] \
        [--json tools/bench/results/gpu_report_check.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOOP = ROOT / "tools" / "bench" / "gpu_train_loop.py"


def rows(report: dict, clock: dict) -> list[tuple[str, float]]:
    """The report's shares of the loop's process beside the loop's own clock, in seconds."""
    split = max(report["time"], key=lambda t: t["wall"])  # the loop's process (helpers start short ones)
    steps = clock["steps"]
    first = steps[0][3] - steps[0][0]
    later = sum(end - begin for begin, _, _, end in steps[1:])
    return [("wall", split["wall"]), ("tracing", split["tracing"]), ("backend compile", split["backend_compile"]),
            ("execution", split["execution"]), ("imports", split["imports"]), ("other", split["other"]),
            ("loop: first step", first), ("loop: later steps", later)]


def check(report: dict, clock: dict) -> list[str]:
    """What fails (empty: everything holds)."""
    failures = []
    split = max(report["time"], key=lambda t: t["wall"])
    table = dict(rows(report, clock))
    first, later = table["loop: first step"], table["loop: later steps"]
    compiled = split["tracing"] + split["backend_compile"]
    for name, value in table.items():
        print(f"  {name:18} {value:9.2f} s")
    if split["other"] > 0.10 * split["wall"]:
        failures.append(f"other is {split['other'] / split['wall']:.1%} of the wall time (at most 10%)")
    if not 0.6 * first <= compiled <= first:
        failures.append(f"tracing + backend compile {compiled:.2f} s is not within [60%, 100%] of the first step {first:.2f} s")
    if not 0.5 * later <= split["execution"] <= later + first:
        failures.append(f"execution {split['execution']:.2f} s is not within [50% of the later steps {later:.2f} s, "
                        f"all steps {later + first:.2f} s]")
    backends = {g["backend"] for g in report["dynamo"]["graphs"]}
    if backends != {"inductor"}:
        failures.append(f"backends named {sorted(backends)}, expected ['inductor']")
    kinds = {s["kind"] for s in report["timeline"]}
    wanted = {"backend-compile", "execute"} | ({"device"} if clock["device"].startswith("cuda") else set())
    if not wanted <= kinds:
        failures.append(f"timeline lacks {sorted(wanted - kinds)}")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--out", help="also keep the report's JSON here")
    parser.add_argument("--json", help="write the rows and the verdict here, with the card and versions")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="xlabridge-gpu-check-") as scratch:
        clock_path, report_path = Path(scratch) / "clock.json", Path(args.out or Path(scratch) / "report.json")
        done = subprocess.run(
            [sys.executable, "-m", "xlabridge.cli", "report", "--json", str(report_path), "--",
             sys.executable, str(LOOP), "--steps", str(args.steps), "--clock", str(clock_path)],
            cwd=ROOT, capture_output=True, text=True, check=False)
        print(done.stdout[-6000:])
        if done.returncode:
            print(done.stderr[-4000:], file=sys.stderr)
            return done.returncode
        report, clock = json.loads(report_path.read_text()), json.loads(clock_path.read_text())
        failures = check(report, clock)
    for failure in failures:
        print(f"FAILED: {failure}")
    print("check: " + ("failed" if failures else "passed"))
    if args.json:
        Path(args.json).write_text(json.dumps(results(report, clock, failures, args.steps), indent=2) + "\n")
    return 1 if failures else 0


def results(report: dict, clock: dict, failures: list[str], steps: int) -> dict:
    """What ``--json`` writes: the rows (seconds), the verdict and what the loop ran on."""
    import torch

    machine = torch.cuda.get_device_name() if clock["device"].startswith("cuda") else clock["device"]
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {"machine": machine, "torch": torch.__version__, "triton": triton_version, "steps": steps,
            "rows": [[name, value] for name, value in rows(report, clock)],
            "verdict": "failed" if failures else "passed", "failures": failures}


if __name__ == "__main__":
    sys.exit(main())
