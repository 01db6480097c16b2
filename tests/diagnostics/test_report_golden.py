"""The report built from a kept run of the bundled demo equals the JSON xlabridge made of the same
event logs before the diagnostics were reorganised: a reorganisation changes no behaviour.

``data/demo_run`` holds the event logs of ``xlabridge report --tpu v5e:2x2 --events DIR -- python
-m xlabridge.examples.demo`` (the process's log and the TPU view's), and the JSON report that
``xlabridge report --read DIR`` wrote from them before the change (the file is named after the
commit that wrote it). A report is a function of its events, so the two must be equal field for
field, times included, apart from what was added on purpose since: schema /4 adds fields, findings
and shares of the time split, so the old report must be contained in the new one: every old field
equal, every old finding still there, and the old "other" share split into the new shares.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from xlabridge import cli

DATA = Path(__file__).parent / "data" / "demo_run"


def _unpacked(tmp_path: Path) -> Path:
    logs = tmp_path / "events"
    logs.mkdir()
    for packed in DATA.glob("events-*.jsonl.gz"):
        with gzip.open(packed, "rb") as source, open(logs / packed.name[: -len(".gz")], "wb") as target:
            shutil.copyfileobj(source, target)
    return logs


def test_demo_report_unchanged(tmp_path, capsys):
    out = tmp_path / "report.json"
    assert cli.main(["report", "--read", str(_unpacked(tmp_path)), "--json", str(out)]) == 0
    assert "Dynamo: 6 graphs, 1 break, 4 recompiles" in capsys.readouterr().out
    with gzip.open(DATA / "report-ebefcba.json.gz", "rt", encoding="utf-8") as before:
        expected = json.load(before)
    report = json.loads(out.read_text(encoding="utf-8"))
    assert expected["schema"] == "xlabridge.report/3" and report["schema"] == "xlabridge.report/4"
    for key in expected.keys() - {"schema", "findings", "time"}:
        assert _projected(report[key], expected[key]) == expected[key], key
    old_findings = {(f["kind"], f["message"]) for f in expected["findings"]}
    assert old_findings <= {(f["kind"], f["message"]) for f in report["findings"]}
    (old,), (new,) = expected["time"], report["time"]
    for share in ("pid", "wall", "tracing", "xla_compile", "execution", "cpu_fallback"):
        assert new[share] == pytest.approx(old[share], abs=1e-9), share
    assert new["other"] + new["imports"] + new["lazy"] + new["transfers"] == pytest.approx(old["other"], abs=1e-9)


_PLACE = ("filename", "lineno", "function")


def _projected(new, old):
    """``new`` cut down to the keys ``old`` has (recursively): what the old report knew of it. A row
    the old report could not place (``<unknown>``) may have a line now (schema /4 places them)."""
    if isinstance(old, dict) and isinstance(new, dict):
        projected = {key: _projected(new.get(key), value) for key, value in old.items()}
        # a place found since, or none written as empty rather than as a placeholder
        if old.get("filename") == "<unknown>" and (new.get("lineno", 0) > 0 or new.get("filename") == ""):
            projected.update({key: old[key] for key in _PLACE})
        return projected
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [_projected(n, o) for n, o in zip(new, old)]
    return new


TPU_RUN = Path(__file__).parent / "data" / "demo_tpu_run"
"""``xlabridge report --tpu v5e:2x2 --events DIR -- python -m xlabridge.examples.demo`` with the TPU
findings in its ``tpu_compiled`` events, and ``report-6169626.json.gz``: the JSON the xlabridge before
them wrote from the same logs."""


def test_demo_report_gains_the_tpu_findings_its_model_carries(tmp_path, capsys):
    logs = tmp_path / "events"
    logs.mkdir()
    for packed in TPU_RUN.glob("events-*.jsonl.gz"):
        with gzip.open(packed, "rb") as source, open(logs / packed.name[: -len(".gz")], "wb") as target:
            shutil.copyfileobj(source, target)
    out = tmp_path / "report.json"
    assert cli.main(["report", "--read", str(logs), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    with gzip.open(TPU_RUN / "report-6169626.json.gz", "rt", encoding="utf-8") as before:
        expected = json.load(before)
    report = json.loads(out.read_text(encoding="utf-8"))
    for key in expected.keys() - {"findings"}:
        assert _projected(report[key], expected[key]) == expected[key], key
    old = [(f["kind"], f["message"]) for f in expected["findings"]]
    new = [(f["kind"], f["message"]) for f in report["findings"]]
    assert new[: len(old)] == old  # what was measured first, as before
    added = report["findings"][len(old):]
    # the demo's model: width 64 and 31 tokens (padded by the tiles), f32 matmuls, int64 token ids
    assert {"tpu-padding", "tpu-f32-matmul", "tpu-copy", "tpu-uncosted"} <= {f["kind"] for f in added}
    assert all("not run" in f["compiled_for"] and f["cost_seconds"] is None for f in added)
    assert all(f["filename"].endswith("xlabridge/examples/demo.py") and f["lineno"] > 0 for f in added)
    sizes = {f["detail"]["size"] for row in report["tpu"]["graphs"] for f in row["findings"] if f["kind"] == "tpu-padding"}
    assert 64 in sizes
    assert text.index("Fix first:") < text.index("Fix first on TPU:") < text.index("Time:")
    assert "a dimension of 64 pads to 128" in text and "float32 matmul" in text
