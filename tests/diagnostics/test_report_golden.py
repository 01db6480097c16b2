"""The report built from a kept run of the bundled demo equals the JSON xlabridge made of the same
event logs before the diagnostics were reorganised (issue 21: no behaviour change).

``data/demo_run`` holds the event logs of ``xlabridge report --tpu v5e:2x2 --events DIR -- python
-m xlabridge.examples.demo`` (the process's log and the TPU view's), and the JSON report that
``xlabridge report --read DIR`` wrote from them at commit ebefcba, before the change. A report
is a function of its events, so the two must be equal field for field, times included.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

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
    assert json.loads(out.read_text(encoding="utf-8")) == expected
