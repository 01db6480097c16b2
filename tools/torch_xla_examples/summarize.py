"""Summarize ``xlabridge report --json`` reports of torch_xla's examples into the recorded figures
(``tools/bench/results/torch_xla_examples.json``).

Each example is run twice through ``run.py`` under ``xlabridge report --tpu v5e:2x2 --json``:
shrunk (its time split, rows and findings) and ``--compile-only`` (its graphs at the example's
own sizes, compiled for TPU, not run). Give each pair as ``EXAMPLE=SHRUNK.json,REAL.json``:

    python tools/torch_xla_examples/summarize.py --commit abc1234 --out RESULT.json \\
        train_resnet_base.py=resnet-shrunk.json,resnet-real.json ...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

UNKNOWN = ("", "<unknown>", None)


def _rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every row that should name a user line: the bridge's graphs, the graphs the process ran,
    their collectives, the TPU view's graphs."""
    pod = report.get("pod") or {}
    tpu = report.get("tpu") or {}
    return [*report["hlo"]["graphs"], *pod.get("graphs", []), *pod.get("collectives", []), *tpu.get("graphs", [])]


def _tpu_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"kernels": g["kernels"], "hbm_bytes": g["hbm_bytes"], "hbm_gib": round(g["hbm_bytes"] / 2**30, 2),
         "fits": g["fits"], "compile_seconds": round(g["compile_seconds"], 2), "flops": g.get("flops"),
         "line": f"{Path(g['filename']).name}:{g['lineno']}"}
        for g in (report.get("tpu") or {}).get("graphs", []) if g.get("compiled")
    ]


def summarize(shrunk: dict[str, Any], real: dict[str, Any]) -> dict[str, Any]:
    (split,) = shrunk["time"]  # one process per example
    rows, real_rows = _rows(shrunk), _rows(real)
    (real_split,) = real["time"]
    return {
        "wall_seconds": round(split["wall"], 2),
        "shares": {name: round(split[name] / split["wall"], 3) for name in split if name not in ("pid", "wall")},
        "rows": len(rows),
        "rows_without_a_line": sum(r.get("filename") in UNKNOWN for r in rows),
        "findings": [f["kind"] for f in shrunk["findings"]],
        "tpu_shrunk": _tpu_rows(shrunk),
        "real_size": {
            "wall_seconds": round(real_split["wall"], 2),
            "xla_cpu_compile_seconds": round(real_split["xla_compile"], 2),
            "rows": len(real_rows),
            "rows_without_a_line": sum(r.get("filename") in UNKNOWN for r in real_rows),
            "tpu_view_seconds": round((real.get("tpu") or {}).get("seconds", 0.0), 1),
            "tpu": _tpu_rows(real),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pairs", nargs="+", help="EXAMPLE=SHRUNK.json,REAL.json")
    parser.add_argument("--commit", required=True, help="the xlabridge commit the reports were made with")
    parser.add_argument("--what", default="", help="how they were run, in words")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    examples = {}
    for pair in args.pairs:
        name, _, paths = pair.partition("=")
        shrunk, real = (json.loads(Path(p).read_text(encoding="utf-8")) for p in paths.split(","))
        examples[name] = summarize(shrunk, real)
    result = {"what": args.what, "xlabridge": args.commit, "examples": examples}
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
