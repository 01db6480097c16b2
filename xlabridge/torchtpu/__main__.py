"""``python -m xlabridge.torchtpu [--tpu v6e:2x2] [--json OUT] script.py [args...]``.

Runs a program written for TorchTPU (``torch.compile(..., backend="tpu")``), unchanged, on this
machine (its tensors on CPU), with every graph TorchTPU would compile captured
(``capture_tpu_backend``); then compiles each for the TPU topology with libtpu compile-only and
prints one row per graph: kernels, HBM per device, fit, compile seconds, the collectives it was
split at, or why it did not lower. ``--json``: the rows as ``TorchTpuGraphResult.to_dict()``.
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
from collections.abc import Sequence

from xlabridge.torchtpu._capture import capture_tpu_backend, skip_tpu_metadata_query
from xlabridge.torchtpu._view import TorchTpuGraphResult, compile_graphs


def _row(row: TorchTpuGraphResult) -> str:
    graph = row.graph
    head = f"{graph.name:<22} {graph.module_name or '-':<32}"
    splits = "".join(f"  [split at {s.op}, {s.user_line or 'line unknown'}]" for s in graph.collective_splits)
    if row.result is None:
        return f"{head} not compiled: {(row.error or '').splitlines()[0]}{splits}"
    result = row.result
    if result.memory is None:
        return f"{head} {result.kernel_count:>5} kernels, does not fit: {(result.out_of_memory or '').splitlines()[0]}"
    return (
        f"{head} {result.kernel_count:>5} kernels, HBM {result.memory.total_bytes / 2**20:8.1f} MiB of "
        f"{result.memory.capacity_bytes / 2**30:.0f} GiB, {'fits' if result.fits else 'DOES NOT FIT'}, "
        f"compile {result.compile_seconds:.2f} s{splits}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xlabridge.torchtpu", description=__doc__.splitlines()[0])
    parser.add_argument("--tpu", default="v6e:2x2", help="TPU topology to compile for (default v6e:2x2)")
    parser.add_argument("--json", metavar="OUT", help="write the rows as JSON to this file")
    parser.add_argument("script", help="the Python program to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    options = parser.parse_args(argv)
    skip_tpu_metadata_query()  # before the program's first backward(), not at GraphCapture's creation
    saved_argv = sys.argv
    sys.argv = [options.script, *options.args]
    try:
        with capture_tpu_backend() as capture:
            runpy.run_path(options.script, run_name="__main__")
    finally:
        sys.argv = saved_argv
    rows = compile_graphs(capture.graphs, options.tpu)
    label = next((r.result.label for r in rows if r.result is not None), f"compiled for TPU {options.tpu}, not run")
    print(f"TorchTPU graphs: {len(rows)}, lowered by torchax + jax.export, {label}")
    for row in rows:
        print(_row(row))
    if options.json:
        with open(options.json, "w") as out:
            json.dump([row.to_dict() for row in rows], out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
