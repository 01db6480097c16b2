"""torch's structured trace on the newest torch TorchTPU runs with (2.15): Hugging Face's Trainer
read from its trace as tlparse reads it, with every break torch logs (the checks are
``tests/diagnostics/test_torch_trace.py``'s, run there on every real script on the pinned torch); a
TorchTPU program's trace, written under xlabridge, read back with its partitions; and a trace
holding TorchTPU's StableHLO record, read with ``--tpu``, its TPU row equal to an independent libtpu
compile of that StableHLO."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.diagnostics import _tlparse
from tests.diagnostics.test_torch_trace import REAL, check_real_script
from tests.torchtpu.conftest import REASON
from xlabridge import _optional

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
def test_the_trainer_reads_from_its_trace(tmp_path: Path):
    """GPT-2 under Hugging Face's Trainer, traced without xlabridge (its loss function's logger call
    breaks the graph): torch 2.15's side of what the pinned suite checks on torch 2.9 for every script
    of ``REAL`` (the others log no break on either torch)."""
    (trainer,) = [args for script, args in REAL if script == "trainer.py"]
    check_real_script(tmp_path, "trainer.py", trainer)


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


LOWERED = """
import torch
from torch._logging import trace_structured

from xlabridge import torchtpu

capture = torchtpu.GraphCapture()


def backend(graph_module, example_inputs):
    before = len(capture.graphs)
    compiled = capture(graph_module, example_inputs)
    for graph in capture.graphs[before:]:
        text = torchtpu.lower_to_stablehlo(graph)
        # StaticCompiler._compile's own call once fx_to_mlir has lowered a partition
        # (torch_tpu/_internal/compile/compiler.py), inside the compilation of its graph
        trace_structured("artifact", metadata_fn=lambda: {"name": "torchtpu_stablehlo_graph", "encoding": "string"},
                         payload_fn=lambda: text, expect_trace_id=True)
    return compiled


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
with torch.no_grad():
    torch.compile(model, backend=backend)(torch.randn(8, 16))
"""


def test_torchtpu_s_stablehlo_in_a_trace_compiles_as_libtpu_compiles_it(tmp_path: Path):
    """TorchTPU writes ``torchtpu_stablehlo_graph`` only where it lowers, on a TPU. The trace read here
    is made so: TorchTPU's own backend (``GraphCapture``: its split compiler writes the partition's
    ``torchtpu_fx_graph``) in a process with ``TORCH_TRACE`` set, and the partition's StableHLO, lowered
    here by torchax and jax.export, written through torch's ``trace_structured`` with the arguments
    TorchTPU's ``StaticCompiler._compile`` passes, inside the graph's compilation: the record TorchTPU
    writes (name, encoding, compile id, payload), but for the source line in its prefix. Read with
    ``xlabridge report --trace-dir --tpu``, its TPU row has the kernels and HBM of libtpu's own compile of
    the StableHLO as tlparse extracts it from the trace."""
    import json
    import os

    from tests.torchtpu import _reference
    from tests.tpu import _hlo_proto

    if not _optional.is_available("torchax"):
        pytest.skip(REASON)
    root = Path(__file__).resolve().parents[2]
    (tmp_path / "lowered.py").write_text(LOWERED)
    env = {**os.environ, "TORCH_TRACE": str(tmp_path / "trace"), "TPU_SKIP_MDS_QUERY": "1", "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, str(tmp_path / "lowered.py")], capture_output=True, text=True, timeout=600,
                          env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    (log,) = torch_trace.logs(tmp_path / "trace")
    parsed = _tlparse.parse_log(log, tmp_path / "tl")
    ((compile_id, stablehlo),) = parsed.named("torchtpu_stablehlo_graph")
    assert parsed.compile_ids("torchtpu_fx_graph") == [compile_id] and "stablehlo." in stablehlo
    done = subprocess.run([sys.executable, "-m", "xlabridge.cli", "report", "--trace-dir", str(tmp_path / "trace"),
                           "--tpu", "v5e:2x2", "--json", str(tmp_path / "r.json")],
                          capture_output=True, text=True, timeout=600, cwd=root,
                          env={k: v for k, v in env.items() if k != "TORCH_TRACE"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "the StableHLO TorchTPU wrote into its trace" in done.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    (graph,) = data["hlo"]["graphs"]
    assert (graph["compiler"], graph["role"], graph["compile_id"]) == ("torchtpu", "forward", compile_id)
    (row,) = data["tpu"]["graphs"]
    assert graph["hashes"] == [row["hash"]] and row["compiled"] and row["fits"], row
    (reference,) = _reference.run([{"topology": data["tpu"]["topology"], "text": stablehlo}], tmp_path)
    assert row["kernels"] == len(_hlo_proto.kernels(reference["proto"])) > 0
    memory = reference["memory"]
    assert (row["argument_bytes"], row["output_bytes"], row["alias_bytes"], row["temp_bytes"], row["code_bytes"]) == (
        memory["argument_bytes"], memory["output_bytes"], memory["alias_bytes"], memory["temp_bytes"],
        memory["generated_code_bytes"])
