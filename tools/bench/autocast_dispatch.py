"""Per-op dispatch cost of AutocastXLA kernels while tracing LazyTensor graphs.

For each op, one traced call under ``torch.autocast("xla", bfloat16)`` is timed with
whichever AutocastXLA kernel is in place:

  torch_xla  torch_xla's own C++ kernel (for ops it registers, e.g. mm)
  none       no AutocastXLA kernel (ops torch_xla lacks, e.g. mv: the fallthrough)
  cpp        xlabridge's C++ kernel (csrc/autocast), registered over the above
  python     xlabridge's pure-Python fallback kernel, registered over the above

Rows whose baseline is torch_xla compare like with like (same op, same casts): that ratio
is the C++ path's overhead against torch_xla's kernels. Rows whose baseline is "none" also
count the casts the kernel adds to the graph (mv: two input casts), so they show what the
new policy costs per call, not dispatch overhead alone.

Only tracing is timed (building the lazy IR, no execution). Variants are interleaved over
the repeats, in rotating order, so machine drift and warm-up hit all alike. Ratios use the
fastest repeat of each variant (least disturbed by other load on a shared machine); the
medians are written too.
Registering over torch_xla's kernel makes the dispatcher print an "Overriding" warning;
removing ours afterwards restores torch_xla's.

Usage: PJRT_DEVICE=CPU python tools/bench/autocast_dispatch.py [--calls N] [--repeats R] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
import warnings
from pathlib import Path

import torch

OPS = {
    "aten::mm": (lambda a, b: torch.mm(a, b), [(8, 8), (8, 8)]),
    "aten::prod": (lambda a: torch.prod(a), [(8, 8)]),
    "aten::mv": (lambda a, b: torch.mv(a, b), [(8, 8), (8,)]),
    "aten::exp": (lambda a: torch.exp(a), [(8, 8)]),
}


def _time_calls(call, inputs, calls: int) -> float:
    """Seconds per call, tracing only (outputs are dropped, nothing executes)."""
    with torch.autocast("xla", dtype=torch.bfloat16):
        for _ in range(50):
            call(*inputs)
        start = time.perf_counter()
        for _ in range(calls):
            call(*inputs)
        return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="traced calls per timing (default 2000)")
    parser.add_argument("--repeats", type=int, default=15, help="interleaved repeats (default 15)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "autocast_dispatch.json")
    args = parser.parse_args()
    if args.calls < 1 or args.repeats < 1:
        parser.error("--calls and --repeats must be positive")

    import torch_xla

    from xlabridge.autocast import _probe, _registration
    from xlabridge.autocast._ops import SPECS_BY_NAME

    device = torch_xla.device()
    cpp = _registration.registrar("cpp")
    python = _registration.registrar("python")
    results = {}
    for op, (call, shapes) in OPS.items():
        inputs = [torch.randn(shape).to(device) for shape in shapes]
        spec = SPECS_BY_NAME[op]
        baseline = "torch_xla" if _probe.has_kernel(op, "AutocastXLA") else "none"
        samples: dict[str, list[float]] = {baseline: [], "cpp": [], "python": []}
        variants = [(baseline, None), ("cpp", cpp), ("python", python)]
        for repeat in range(args.repeats):
            shift = repeat % len(variants)
            for name, registrar in variants[shift:] + variants[:shift]:
                if registrar is None:
                    samples[name].append(_time_calls(call, inputs, args.calls))
                    continue
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    registrar.register([spec])
                try:
                    samples[name].append(_time_calls(call, inputs, args.calls))
                finally:
                    registrar.unregister([op])
        best_us = {name: min(values) * 1e6 for name, values in samples.items()}
        median_us = {name: statistics.median(values) * 1e6 for name, values in samples.items()}
        results[op] = {
            "policy": spec.cast.value,
            "baseline": baseline,
            "like_for_like": baseline == "torch_xla",
            "us_per_call_min": {name: round(value, 3) for name, value in best_us.items()},
            "us_per_call_median": {name: round(value, 3) for name, value in median_us.items()},
            "cpp_over_baseline": round(best_us["cpp"] / best_us[baseline], 3),
            "python_over_cpp": round(best_us["python"] / best_us["cpp"], 3),
            "cpp_over_baseline_median": round(median_us["cpp"] / median_us[baseline], 3),
        }
    report = {
        "what": "microseconds per traced op call under autocast('xla', bfloat16), LazyTensor mode",
        "calls": args.calls,
        "repeats": args.repeats,
        "torch": torch.__version__,
        "torch_xla": torch_xla.__version__,
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, PJRT_DEVICE=CPU",
        "ops": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'op':<10} {'baseline':<10} {'base us':>8} {'cpp us':>8} {'py us':>8} {'cpp/base':>9} {'py/cpp':>7}")
    for op, row in results.items():
        us = row["us_per_call_min"]
        print(
            f"{op:<10} {row['baseline']:<10} {us[row['baseline']]:>8.2f} {us['cpp']:>8.2f} {us['python']:>8.2f} "
            f"{row['cpp_over_baseline']:>9.3f} {row['python_over_cpp']:>7.3f}"
        )
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
