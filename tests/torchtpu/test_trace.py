"""torch's structured trace on the newest torch TorchTPU runs with (2.15): real scripts, Hugging
Face's Trainer among them, read from their trace as tlparse reads it, with every break torch logs
(``tests/diagnostics/test_torch_trace.py`` holds the checks); and a TorchTPU program's trace, written
under xlabridge, read back with its partitions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.diagnostics import _tlparse
from tests.diagnostics.test_torch_trace import REAL, check_real_script
from tests.torchtpu.conftest import REASON

pytest.importorskip("torch_tpu", reason=REASON)

import xlabridge.diagnostics as xd
from xlabridge.diagnostics._observe import torch_trace

TRAIN = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
step = torch.compile(lambda x: model(x).sum(), backend="tpu")
for batch in (8, 8):
    step(torch.randn(batch, 16)).backward()
"""


@pytest.mark.slow
@pytest.mark.parametrize(("script", "args"), REAL, ids=[" ".join((s, *a)) for s, a in REAL])
def test_real_scripts_read_from_their_trace(tmp_path: Path, script: str, args: tuple[str, ...]):
    check_real_script(tmp_path, script, args)


def test_a_torchtpu_trace_reads_with_its_partitions(tmp_path: Path):
    import os

    (tmp_path / "train.py").write_text(TRAIN)
    env = {**os.environ, "TORCH_TRACE": str(tmp_path / "trace"), "TPU_SKIP_MDS_QUERY": "1"}
    done = subprocess.run([sys.executable, "-m", "xlabridge.cli", "report", "--", sys.executable, str(tmp_path / "train.py")],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    logs = [p for p in torch_trace.logs(tmp_path / "trace")
            if any(r.name == "torchtpu_fx_graph" for r in torch_trace.records(p)[0])]
    (log,) = logs
    parsed = _tlparse.parse_log(log, tmp_path / "tl")
    report = xd.read_trace(tmp_path / "trace")
    # TorchTPU's own partitions (its torchtpu_fx_graph artifacts, as tlparse lists them): a forward and a backward
    assert sum(len(g.segments) for g in report.xla_graphs) == parsed.count("torchtpu_fx_graph") == 2
    assert sorted(g.role for g in report.xla_graphs) == ["backward", "forward"]
    assert all(g.compiler == "torchtpu" for g in report.xla_graphs)
    assert sorted(g.compile_id for g in report.dynamo_graphs) == parsed.compile_ids("dynamo_output_graph")
    # no TPU here: TorchTPU wrote no StableHLO (it lowers on a TPU only), which the report would compile with --tpu
    assert parsed.count("torchtpu_stablehlo_graph") == 0
    assert parsed.count("xlabridge_hlo_lowering") == 1
