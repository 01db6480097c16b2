"""The TPU view of a job ``torchrun`` launches: each rank's Dynamo graphs (a DDP job, gloo on the CPU,
aot_eager) lowered by torchax and compiled for a TPU slice by libtpu, as for one process; a program the
ranks compiled alike shares one row that names every rank. Each row is checked against libtpu's own
compile of the StableHLO saved for it (``_reference``), and each rank's graphs against its own log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.torchtpu import _reference
from tests.torchtpu.conftest import REASON
from tests.tpu import _hlo_proto
from xlabridge import _optional
from xlabridge.diagnostics import events

pytest.importorskip("torch_tpu", reason=REASON)
if not _optional.is_available("torchax"):  # the FX route lowers each rank's graphs with torchax
    pytest.skip(REASON, allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "xlabridge" / "examples" / "torchrun_train.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")

pytestmark = pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed beside this Python")


def test_each_rank_gets_its_tpu_rows(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLABRIDGE_")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PJRT_DEVICE="CPU")
    logs, out = tmp_path / "events", tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "xlabridge.cli", "report", "--tpu", "v5e:2x2", "--events", str(logs),
                           "--json", str(out), "--", str(TORCHRUN), "--standalone", "--nproc_per_node=2", str(SCRIPT),
                           "--backend", "aot_eager", "--steps", "3"],
                          env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    data = json.loads(out.read_text())
    ranks = {p["pid"]: p["rank"] for p in data["processes"] if p["role"] == "rank"}
    programs: dict[str, set[int]] = {}
    files: dict[str, Path] = {}
    for path in sorted(logs.glob("events-*.jsonl")):
        for event in events.read_log(path).events:
            if isinstance(event, events.FxProgram) and event.hash and event.role != "training-step":
                programs.setdefault(event.hash, set()).add(event.pid)
                files[event.hash] = logs / event.hlo_file
    # every rank lowered its graphs: the forward and backward of each, the same programs on both ranks
    assert {ranks[p] for pids in programs.values() for p in pids} == {0, 1}
    rows = [r for r in data["tpu"]["graphs"] if r["route"] == "torchax"]
    assert {r["hash"] for r in rows} == set(programs)
    for row in rows:
        assert set(row["pids"]) == programs[row["hash"]]
    reference = _reference.run([{"topology": "v5e:2x2", "text": files[r["hash"]].read_text()} for r in rows], tmp_path)
    for row, ref in zip(rows, reference):
        assert row["compiled"] and row["kernels"] == len(_hlo_proto.kernels(ref["proto"])) > 0
        assert row["temp_bytes"] == ref["memory"]["temp_bytes"]
    assert "ranks that compiled the same program share its row" in done.stdout
