"""``xlabridge report --tpu`` run on a script, and its TPU rows checked against libtpu's own compile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.torchtpu import _reference
from tests.tpu import _hlo_proto
from xlabridge.diagnostics import events

ROOT = Path(__file__).resolve().parents[2]


def report(tmp_path: Path, name: str, script: str, *args: str, tpu: str = "v6e:2x2") -> tuple[dict, Path]:
    """The report's JSON data and the event log directory; the run must succeed."""
    path, out, logs = tmp_path / f"{name}.py", tmp_path / f"{name}.json", tmp_path / f"{name}-events"
    path.write_text(script)
    env = {k: v for k, v in os.environ.items() if k != "TPU_SKIP_MDS_QUERY"} | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "xlabridge.cli", "report", "--tpu", tpu, "--json", str(out), "--events", str(logs),
         "--", sys.executable, str(path), *args],
        env=env, capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return json.loads(out.read_text()), logs


def check_tpu_rows_against_libtpu(data: dict, logs: Path, tmp_path: Path) -> None:
    """A compiled TPU row for every program of every graph, equal to libtpu's own compile of its StableHLO."""
    tpu = {row["hash"]: row for row in data["tpu"]["graphs"]}
    hashes = [h for g in data["hlo"]["graphs"] for h in g["hashes"]]
    assert hashes and set(hashes) <= set(tpu)
    seen = [e for path in sorted(logs.glob("events-*.jsonl")) for e in events.read_log(path).events
            if isinstance(e, events.XlaGraphSeen)]
    files = {e.hash: logs / e.hlo_file for e in seen if e.hlo_file}
    assert set(files) == set(hashes)
    order = sorted(files)
    reference = _reference.run([{"topology": data["tpu"]["topology"], "text": files[h].read_text()} for h in order],
                               tmp_path)
    for digest, ref in zip(order, reference):
        row = tpu[digest]
        assert row["compiled"] and row["fits"], row
        assert row["kernels"] == len(_hlo_proto.kernels(ref["proto"])) > 0
        memory = ref["memory"]
        assert (row["argument_bytes"], row["output_bytes"], row["alias_bytes"], row["temp_bytes"],
                row["code_bytes"]) == (memory["argument_bytes"], memory["output_bytes"], memory["alias_bytes"],
                                       memory["temp_bytes"], memory["generated_code_bytes"])
        assert row["filename"] != "<unknown>" and row["lineno"] > 0
