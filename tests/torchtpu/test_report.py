"""``xlabridge report --tpu`` on programs written for TorchTPU (``backend="tpu"`` or ``"xlabridge"``).

No TPU here: the ``torchtpu`` probe runs each partition TorchTPU would lower on the CPU in its
place, and the report says so. What is checked against outside references: the Dynamo breaks
and their GB codes against ``torch._dynamo.explain``; recompiles against Dynamo's own
compilation metrics; a collective split against the line the program names; every graph's TPU
row against an independent libtpu compile of the same StableHLO (``_reference``); the
``xlabridge`` backend against ``backend="tpu"``: the same programs, bitwise the same results.
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from tests.torchtpu._cli import check_tpu_rows_against_libtpu as _check_tpu_rows_against_libtpu
from tests.torchtpu._cli import report as _report
from tests.torchtpu.conftest import REASON
from xlabridge import _optional

pytest.importorskip("torch_tpu", reason=REASON)
if not _optional.is_available("torchax"):
    pytest.skip(REASON, allow_module_level=True)

import torch

from xlabridge.diagnostics import build_report, diagnose, events

ROOT = Path(__file__).resolve().parents[2]

TRANSFORMER = textwrap.dedent("""
    import sys
    import torch
    from tests import models

    name, backend, out = sys.argv[1], sys.argv[2], sys.argv[3]
    torch.manual_seed(0)
    model, make_inputs = getattr(models, name)()
    inputs = make_inputs(torch.device("cpu"))
    step = torch.compile(model, backend=backend, dynamic=False)
    model.eval()
    with torch.no_grad():
        logits = step(**models.without_labels(model, inputs)).logits    # inference
    model.train()
    loss = models.loss_of(step(**inputs))                               # a training step
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    torch.save({"logits": logits, "loss": loss.detach(), "grads": grads}, out)
""")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_transformer_inference_and_training_step(tmp_path, name):
    """An inference call and a training step of a transformers model, through ``backend="tpu"``:
    a forward graph for each mode and the backward graph, each with its line; the switch to
    training is a recompile with the failed guard; a TPU row per graph equal to libtpu's own."""
    data, logs = _report(tmp_path, name, TRANSFORMER, name, "tpu", str(tmp_path / "out.pt"))
    graphs = data["hlo"]["graphs"]
    assert {g["compiler"] for g in graphs} == {"torchtpu"}
    assert {g["role"] for g in graphs} == {"forward", "backward"}
    assert all(g["calls"] == 1 for g in graphs)
    # the model's own lines: torch, torch_tpu and torchax are framework code, transformers is not
    assert all(f"models/{name}/modeling_{name}.py" in g["filename"] or g["filename"].endswith("loss_utils.py")
               for g in graphs), [(g["filename"], g["lineno"]) for g in graphs]
    forward = {(g["compile_id"], g["role"]): (g["filename"], g["lineno"]) for g in graphs}
    for (compile_id, role), place in forward.items():  # a backward graph is placed at its forward's line
        if role == "backward":
            assert place == forward[(compile_id, "forward")]
    # the switch from no_grad inference to training recompiles, and the report names the failed guard
    (group,) = data["dynamo"]["recompile_groups"]
    assert any("grad_mode" in guard for guard in group["guards"])
    assert any("ran on the CPU in their place" in w for w in data["warnings"])
    assert not [p for p in data["probes"] if p["state"] != "ok"]
    reference = torch.load(tmp_path / "out.pt")
    assert torch.isfinite(reference["loss"]) and reference["grads"]
    _check_tpu_rows_against_libtpu(data, logs, tmp_path)


STEP = textwrap.dedent("""
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    def step(x, w):
        y = torch.tanh(x @ w)
        if y.sum().item() > 0:                                 # a Dynamo graph break
            y = y * 2
        y = funcol.all_reduce(y, "sum", dist.group.WORLD)      # a collective: TorchTPU splits here
        return y + 1
""")

BREAKS = STEP + textwrap.dedent("""
    import sys
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    compiled = torch.compile(step, backend=sys.argv[1], dynamic=False)
    torch.manual_seed(0)
    outs = [compiled(torch.randn(8, 16), torch.randn(16, 16)) for _ in range(4)]
    torch.save(outs, sys.argv[2])
""")


def _line_of(text: str, marker: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), start=1) if marker in line)


def test_breaks_splits_and_xlabridge_backend(tmp_path):
    """A graph break (its GB code as ``torch._dynamo.explain`` gives it) and a collective that
    TorchTPU compiles on its own, with the user's lines; ``backend="xlabridge"`` reaches TorchTPU
    with the same programs and the same results, bit for bit."""
    tpu, _ = _report(tmp_path, "breaks_tpu", BREAKS, "tpu", str(tmp_path / "tpu.pt"))
    ours, _ = _report(tmp_path, "breaks_ours", BREAKS, "xlabridge", str(tmp_path / "ours.pt"))

    break_line, collective_line = _line_of(BREAKS, "graph break"), _line_of(BREAKS, "TorchTPU splits")
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    namespace: dict = {}
    exec(compile(STEP, "step", "exec"), namespace)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    try:
        torch._dynamo.reset()
        explained = torch._dynamo.explain(namespace["step"])(torch.randn(8, 16), torch.randn(16, 16))
    finally:
        dist.destroy_process_group()
    for data in (tpu, ours):
        breaks = data["dynamo"]["breaks"]
        assert len(breaks) == len(explained.break_reasons) == 1
        assert breaks[0]["lineno"] == break_line
        code = next(f["code"] for f in data["findings"] if f["kind"] == "dynamo-break")
        assert code and code.lower() in explained.break_reasons[0].reason.lower()
        splits = [b for b in data["hlo"]["breaks"] if b["category"] == "collective-split"]
        # one split per compiled graph that holds the collective (Dynamo compiles the code after the
        # break once per branch taken), each at the collective's line
        assert {(b["op"], b["lineno"]) for b in splits} == {("_c10d_functional::all_reduce", collective_line)}
        assert all(g["compiler"] == "torchtpu" for g in data["hlo"]["graphs"])
        segments = [s["kind"] for g in data["hlo"]["graphs"] for s in g["segments"]]
        assert segments.count("collective") == len(splits) > 0
    assert [g["backend"] for g in ours["dynamo"]["graphs"]] == ["xlabridge"] * len(ours["dynamo"]["graphs"])
    assert [g["hashes"] for g in ours["hlo"]["graphs"]] == [g["hashes"] for g in tpu["hlo"]["graphs"]]
    for a, b in zip(torch.load(tmp_path / "tpu.pt"), torch.load(tmp_path / "ours.pt")):
        assert torch.equal(a, b)


def test_probe_that_stops_seeing_is_reported(monkeypatch):
    """If TorchTPU stopped calling ``TpuBackend._compile_graph_module`` (the seam the probe wraps),
    the graphs Dynamo handed to ``backend="tpu"`` would reach no observed compiler: the report says
    the probe is silent instead of showing no graphs."""
    from xlabridge.diagnostics._observe.probes import torchtpu as probe

    monkeypatch.setattr(probe, "_wrap_compile_graph_module", lambda original: original)
    torch._dynamo.reset()
    with diagnose() as report:
        torch.compile(lambda x: torch.sin(x) + 1, backend="tpu", dynamic=False)(torch.randn(4))
    (status,) = [p for p in report.probes if p.name == probe.INFO.name]
    assert status.state == "silent" and "went to TorchTPU's backend" in status.reason


def test_observed_run_equals_capture(tmp_path):
    """``diagnose()`` in-process: the rows and the events round-trip, and the programs it records are
    the ones ``GraphCapture`` captures for the same model (the two share the probe's seam)."""
    from xlabridge import torchtpu

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    torch._dynamo.reset()
    log = tmp_path / "events.jsonl"
    with diagnose(log=log, capture_hlo=True) as report:
        torch.compile(model, backend="tpu", dynamic=False)(x).sum().backward()
    graphs = report.xla_graphs
    assert [(g.compiler, g.role, g.xla_graphs) for g in graphs] == [("torchtpu", "forward", 1),
                                                                    ("torchtpu", "backward", 1)]
    assert dataclasses.asdict(build_report(events.read_log(log).events).xla_graphs[0]) == dataclasses.asdict(graphs[0])
    torch._dynamo.reset()
    capture = torchtpu.GraphCapture()
    torch.compile(model, backend=capture, dynamic=False)(x).sum().backward()
    codes = [g.graph_module.code for g in capture.graphs]
    saved = [e for e in events.read_log(log).events if isinstance(e, events.XlaGraphSeen)]
    assert len(saved) == len(codes) == 2 and all(e.hlo_file and e.hlo_format == events.HloFormat.STABLEHLO
                                                 for e in saved)


def test_selftest_fires_the_probe_and_fails_without_it(monkeypatch):
    """The probe self-test's program (run in a child process at the start of an observation) sees
    TorchTPU's forward and backward graphs, partitions and calls; with the seam gone it says what is
    missing, and the report would mark the probe silent."""
    from xlabridge.diagnostics._observe.probes import selftest_child
    from xlabridge.diagnostics._observe.probes import torchtpu as probe

    torch._dynamo.reset()
    assert selftest_child._program()["torchtpu.compiler"] == ""
    monkeypatch.setattr(probe, "_wrap_compile_graph_module", lambda original: original)
    torch._dynamo.reset()
    missing = selftest_child._program()["torchtpu.compiler"]
    assert "no TorchTPU forward graph" in missing and "no summed later calls" in missing


def test_a_failure_in_the_probe_warns_and_the_model_runs(monkeypatch):
    """A bug (or an upstream change) inside the probe's bookkeeping: one DiagnosticsWarning, the
    probe marked failed in the report, and the program's results those of a run without diagnostics."""
    from xlabridge.diagnostics._observe.probes import torchtpu as probe
    from xlabridge.torchtpu import _seam as torchtpu_seam
    from xlabridge.errors import DiagnosticsWarning

    def broken(inputs):
        raise RuntimeError("simulated bookkeeping bug")

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh())
    x = torch.randn(4, 8)
    torch._dynamo.reset()
    with diagnose():
        expected = torch.compile(model, backend="tpu", dynamic=False)(x)
    monkeypatch.setattr(torchtpu_seam, "input_specs", broken)
    torch._dynamo.reset()
    with pytest.warns(DiagnosticsWarning, match="simulated bookkeeping bug"), diagnose() as report:
        out = torch.compile(model, backend="tpu", dynamic=False)(x)
    assert torch.equal(out, expected)
    (status,) = [p for p in report.probes if p.name == probe.INFO.name]
    assert status.state == "failed"
