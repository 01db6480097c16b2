"""What ``xlabridge report`` costs a GPU training loop: the same loop with and without it, alternating.

Runs ``tools/bench/gpu_train_loop.py`` ``--repeats`` times in pairs of processes, one plain and one
under ``xlabridge report`` (in alternating order, so that neither always runs on a warmer machine
or inductor cache), and compares each pair's figures from the loop's own clock: the first step
(Dynamo's and inductor's compiles: the first pair's plain run fills inductor's on-disk cache, so
its first-step ratio is reported apart) and the median of the later steps (each ended by the loop's
``loss.item()``). Prints each pair's ratios and their medians; ``--out`` writes the JSON (default
``tools/bench/results/diagnostics_overhead_gpu.json``).

    PYTHONPATH=. python tools/bench/diagnostics_overhead_gpu.py [--repeats 3] [--steps 40]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOOP = ROOT / "tools" / "bench" / "gpu_train_loop.py"
RESULT = ROOT / "tools" / "bench" / "results" / "diagnostics_overhead_gpu.json"


def _run(observed: bool, steps: int, scratch: Path, index: int) -> dict:
    clock = scratch / f"clock-{index}-{'observed' if observed else 'plain'}.json"
    loop = [sys.executable, str(LOOP), "--steps", str(steps), "--clock", str(clock)]
    command = [sys.executable, "-m", "xlabridge.cli", "report", "--json", str(clock.with_suffix(".report.json")),
               "--", *loop] if observed else loop
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-4000:]}")
    steps_ = json.loads(clock.read_text())["steps"]
    later = sorted(end - begin for begin, _, _, end in steps_[1:])
    return {"first_step_s": steps_[0][3] - steps_[0][0], "median_step_s": later[len(later) // 2],
            "process_s": time.monotonic() - started}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--out", default=str(RESULT))
    args = parser.parse_args(argv)
    import torch

    pairs = []
    with tempfile.TemporaryDirectory(prefix="xlabridge-gpu-bench-") as scratch:
        for index in range(args.repeats):
            order = (False, True) if index % 2 == 0 else (True, False)
            runs = {observed: _run(observed, args.steps, Path(scratch), index) for observed in order}
            pair = {"order": ["observed" if o else "plain" for o in order], "plain": runs[False],
                    "observed": runs[True],
                    "steady_ratio": runs[True]["median_step_s"] / runs[False]["median_step_s"],
                    "first_step_ratio": runs[True]["first_step_s"] / runs[False]["first_step_s"],
                    "process_ratio": runs[True]["process_s"] / runs[False]["process_s"]}
            pairs.append(pair)
            print(f"pair {index + 1} ({' then '.join(pair['order'])}): steady step {pair['steady_ratio']:.3f}x, "
                  f"first step {pair['first_step_ratio']:.3f}x, whole process {pair['process_ratio']:.3f}x")
    warm = pairs[1:] or pairs
    result = {
        "machine": torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or "cpu",
        "torch": torch.__version__, "repeats": args.repeats, "steps": args.steps, "pairs": pairs,
        "steady_overhead": statistics.median(p["steady_ratio"] for p in pairs) - 1,
        "first_step_overhead": statistics.median(p["first_step_ratio"] for p in warm) - 1,
        "process_overhead": statistics.median(p["process_ratio"] for p in warm) - 1,
    }
    print(f"median over pairs: steady step {result['steady_overhead']:+.1%}, first step {result['first_step_overhead']:+.1%} "
          f"(pairs after the first), whole process {result['process_overhead']:+.1%}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
