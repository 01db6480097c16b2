"""``python -m xlabridge.torchtpu``: a program written for TorchTPU, unchanged, run here."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.torchtpu.conftest import REASON
from xlabridge import _optional

pytest.importorskip("torch_tpu", reason=REASON)
if not _optional.is_available("torchax"):
    pytest.skip(REASON, allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = textwrap.dedent("""
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = torch.compile(model, backend="tpu")
    for _ in range(2):
        loss = step(torch.randn(32, 64)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    print("loss", float(loss))
""")


def test_program_for_torchtpu_runs_and_gets_tpu_rows(tmp_path):
    """Without TPU_SKIP_MDS_QUERY in its environment (the command sets it: else the first backward
    waits minutes on the GCE metadata server), two training steps run and both graphs compile."""
    script, out = tmp_path / "train.py", tmp_path / "rows.json"
    script.write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items() if k != "TPU_SKIP_MDS_QUERY"} | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "xlabridge.torchtpu", "--tpu", "v5e:2x2", "--json", str(out), str(script)],
        env=env, capture_output=True, text=True, timeout=240, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "loss" in done.stdout and "TorchTPU graphs: 2" in done.stdout
    rows = json.loads(out.read_text())
    assert [r["graph"]["name"] for r in rows] == ["graph0_forward_0", "graph0_backward_0"]
    for row in rows:
        assert row["error"] is None and row["route"] == "torchax+jax.export"
        assert row["tpu"]["kernel_count"] > 0 and row["tpu"]["topology"] == "v5e:2x2"
    assert "libtpu 0.0.52, not run" in done.stdout
