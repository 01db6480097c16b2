"""The decode-kernel configurations a sweep (``mx4_decode_sweep.py``) found worth timing in the
tuning: per shape and token count of each sweep file, the ``top`` fastest of the asked family
(``--family``: ``split``, configurations with ``k_spans``; ``chains``, with two accumulator sets;
``all``, any ``fp4_decode`` one) among those
within the error bound and without spills, gathered per key of ``fp4_matmul.DECODE`` (token tiles 1, 2, 4, 8) without
repeats. Written as ``mx4_linear.py --candidates`` reads it, so that one device call can sweep, pick
and run the benchmark with the picks timed by the tuning as table entries would be.

    PYTHONPATH=. python3 tools/bench/mx4_pick.py sweep16.json sweep3264.json --out picked.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

sys.path.insert(0, os.getcwd())
from xlabridge.mx._cuda import fp4_decode  # noqa: E402
from xlabridge.mx._triton import fp4_matmul  # noqa: E402

FIELDS = tuple(f.name for f in dataclasses.fields(fp4_decode.Config))
FAMILIES = {"split": lambda c: bool(c.get("k_spans")), "chains": lambda c: c.get("acc_sets", 1) == 2,
            "all": lambda c: True}
"""The sweep families ``--family`` names: which result entries belong to each."""


def pick(rows: list[dict], family: str = "split", top: int = 2) -> dict[str, list[dict]]:
    """``{key: [Config fields]}`` from sweep rows (see the module's docstring)."""
    if family not in FAMILIES:
        raise ValueError(f"mx4_pick: family must be one of {sorted(FAMILIES)}, got {family!r}")
    picked: dict[str, list[dict]] = {}
    for row in rows:
        ok = sorted((c for c in row["configs"] if c.get("kernel") == "fp4_decode" and c.get("within_bound")
                     and "ms" in c and not c.get("spill_bytes") and FAMILIES[family](c)), key=lambda c: c["ms"])
        chosen = picked.setdefault(str(fp4_matmul.decode_tiles(row["tokens"])), [])
        for entry in ok[:top]:
            fields = {name: entry[name] for name in FIELDS if name in entry}
            if fields not in chosen:
                chosen.append(fields)
    return {key: configs for key, configs in picked.items() if configs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweeps", nargs="+", help="mx4_decode_sweep.py result files (missing ones skipped)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--family", default="split", choices=sorted(FAMILIES))
    parser.add_argument("--top", type=int, default=2, help="configurations per shape and token count")
    args = parser.parse_args()
    rows = []
    for path in args.sweeps:
        if os.path.exists(path):
            with open(path) as f:
                rows += json.load(f)["rows"]
        else:
            print(f"mx4_pick: no {path}; skipped", file=sys.stderr)
    picked = pick(rows, args.family, args.top)
    with open(args.out, "w") as f:
        json.dump(picked, f, indent=1)
    print(json.dumps({key: len(configs) for key, configs in picked.items()}))


if __name__ == "__main__":
    main()
