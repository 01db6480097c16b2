"""The TPU view of any ``torch.compile`` run (inductor, eager, Hugging Face's Trainer), and its time split.

Each Dynamo graph of a run compiled by a backend that is not an XLA front end is traced after the
run (forward and backward as AOTAutograd gives them), lowered by torchax and compiled by libtpu.
Checked against outside references: every row's kernels and HBM against an independent libtpu
compile of the same StableHLO (``_reference``); the script's results against the same script run
without xlabridge (bitwise, same backend); an op without a TPU lowering against the line the
script names; the slice answer against direct compiles at that size and the next smaller one; the
time shares against the script's own clock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.torchtpu import _reference
from tests.torchtpu.conftest import REASON
from tests.tpu import _hlo_proto
from xlabridge import _optional

pytest.importorskip("torch_tpu", reason=REASON)
if not _optional.is_available("torchax"):
    pytest.skip(REASON, allow_module_level=True)

import torch

from xlabridge.diagnostics import diagnose, events

ROOT = Path(__file__).resolve().parents[2]

TRANSFORMERS = textwrap.dedent("""
    import sys
    import torch
    from tests import models

    out, names = sys.argv[1], sys.argv[2:]
    results = {}
    for name in names:
        torch.manual_seed(0)
        model, make_inputs = getattr(models, name)()
        inputs = make_inputs(torch.device("cpu"))
        step = torch.compile(model, backend="inductor", dynamic=False)
        model.eval()
        with torch.no_grad():
            logits = step(**models.without_labels(model, inputs)).logits      # inference
        model.train()
        loss = models.loss_of(step(**inputs))                                 # a training step
        loss.backward()
        results[name] = {"logits": logits, "loss": loss.detach(),
                         "grads": [p.grad for p in model.parameters() if p.grad is not None]}
    torch.save(results, out)
""")


def _env(tmp_path: Path) -> dict[str, str]:
    # one inductor cache per test, shared by its two runs: the run without xlabridge reuses the code
    # the observed run compiled (the same kernels), and nothing depends on the machine's cache
    # TPU_SKIP_MDS_QUERY: without a TPU, torch_tpu's first backward() waits minutes on the GCE metadata
    # server (docs/guides/torchtpu.md); both runs skip it alike
    # OMP_NUM_THREADS=1: inductor's CPU kernels for an embedding's backward add into the gradient with
    # atomic adds from several threads, so two runs of the same script without xlabridge can differ in
    # the last bits of a gradient; on one thread each run is reproducible, and the comparison bitwise
    return dict(os.environ, PYTHONPATH=str(ROOT), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor-cache"),
                TPU_SKIP_MDS_QUERY="1", OMP_NUM_THREADS="1")


def _report(tmp_path: Path, script: str, *args: str, tpu: str = "v6e:2x2") -> tuple[dict, Path, str]:
    """The report's JSON data, the event logs and the report's text; the run must succeed."""
    path, out, logs = tmp_path / "script.py", tmp_path / "report.json", tmp_path / "events"
    path.write_text(script)
    done = subprocess.run(
        [sys.executable, "-m", "xlabridge.cli", "report", "--tpu", tpu, "--json", str(out), "--events", str(logs),
         "--", sys.executable, str(path), *args],
        env=_env(tmp_path), capture_output=True, text=True, timeout=900, check=False, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return json.loads(out.read_text()), logs, done.stdout


def _plain(tmp_path: Path, *args: str) -> str:
    """The same script run without xlabridge; its stdout."""
    done = subprocess.run([sys.executable, str(tmp_path / "script.py"), *args], env=_env(tmp_path),
                          capture_output=True, text=True, timeout=900, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-5000:]
    return done.stdout


def _programs(logs: Path) -> list[events.FxProgram]:
    return [e for path in sorted(logs.glob("events-*.jsonl")) for e in events.read_log(path).events
            if isinstance(e, events.FxProgram)]


def _check_rows(data: dict, logs: Path, tmp_path: Path, backend: str) -> list[dict]:
    """Every Dynamo graph has TPU rows: an inference program, or a forward and a backward; each
    equal to libtpu's own compile of the StableHLO saved for it; placed at the model's lines."""
    rows = [r for r in data["tpu"]["graphs"] if r["route"] == "torchax"]
    graphs = {g["compile_id"] for g in data["dynamo"]["graphs"]}
    assert {g["backend"] for g in data["dynamo"]["graphs"]} == {backend}
    by_graph: dict[str, set[str]] = {}
    for row in rows:
        by_graph.setdefault(row["compile_id"], set()).add(row["role"])
    assert set(by_graph) == graphs, (by_graph, graphs)
    assert all(roles in ({"inference"}, {"forward", "backward"}) for roles in by_graph.values()), by_graph
    files = {p.hash: logs / p.hlo_file for p in _programs(logs) if p.hlo_file and p.role != "training-step"}
    order = [r["hash"] for r in rows]
    assert set(order) <= set(files)
    reference = _reference.run([{"topology": data["tpu"]["topology"], "text": files[h].read_text()} for h in order],
                               tmp_path)
    for row, ref in zip(rows, reference):
        assert row["compiled"] and row["fits"], row
        assert row["kernels"] == len(_hlo_proto.kernels(ref["proto"])) > 0
        memory = ref["memory"]
        assert (row["argument_bytes"], row["output_bytes"], row["alias_bytes"], row["temp_bytes"],
                row["code_bytes"]) == (memory["argument_bytes"], memory["output_bytes"], memory["alias_bytes"],
                                       memory["temp_bytes"], memory["generated_code_bytes"])
        assert row["filename"] != "<unknown>" and row["lineno"] > 0
    return rows


def _main(data: dict) -> dict:
    """The script's process's time split (torch and its helpers start short ``python -c`` processes too)."""
    return max(data["time"], key=lambda split: split["wall"])


def _same_results(a: Path, b: Path) -> None:
    first, second = torch.load(a), torch.load(b)
    flat_a, flat_b = torch.utils._pytree.tree_leaves(first), torch.utils._pytree.tree_leaves(second)
    assert len(flat_a) == len(flat_b) > 0
    for x, y in zip(flat_a, flat_b):
        assert torch.equal(x, y)


@pytest.mark.parametrize("names", [
    pytest.param(["gpt2"], id="gpt2"),
    pytest.param(["llama", "bert"], id="llama-bert", marks=pytest.mark.slow),
])
def test_inductor_transformers_get_tpu_rows_and_unchanged_results(tmp_path, names):
    """Inference and a training step under backend="inductor": a TPU row per program of every
    Dynamo graph, equal to libtpu's own compile; the results bitwise those of the run without xlabridge."""
    data, logs, text = _report(tmp_path, TRANSFORMERS, str(tmp_path / "observed.pt"), *names)
    rows = _check_rows(data, logs, tmp_path, "inductor")
    assert any(r["role"] == "inference" for r in rows) and any(r["role"] == "backward" for r in rows)
    assert any(f"models/{names[0]}/modeling_{names[0]}.py" in r["filename"] for r in rows)
    assert "TPU view (v6e:2x2)" in text and "inductor" in text
    split = _main(data)
    assert split["backend_compile"] > 0 and split["execution"] > 0
    assert {s["kind"] for s in data["timeline"]} >= {"backend-compile", "execute"}
    _plain(tmp_path, str(tmp_path / "plain.pt"), *names)
    _same_results(tmp_path / "observed.pt", tmp_path / "plain.pt")


TRAINER = textwrap.dedent("""
    import json, sys, time
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    class Tokens(torch.utils.data.Dataset):
        def __init__(self, n=32, seq=16, vocab=128):
            self.ids = torch.randint(0, vocab, (n, seq), generator=torch.Generator().manual_seed(0))
        def __len__(self):
            return len(self.ids)
        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    out = sys.argv[1]
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=128, n_positions=64, n_embd=64, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(output_dir=out, per_device_train_batch_size=4, max_steps=6, torch_compile=True,
                             report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True, seed=0,
                             dataloader_num_workers=0, disable_tqdm=True)
    started = time.monotonic()
    Trainer(model=model, args=args, train_dataset=Tokens()).train()
    print(json.dumps({"train": time.monotonic() - started}))
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, out + "/weights.pt")
""")


def test_hugging_face_trainer(tmp_path):
    """Hugging Face's Trainer with torch_compile=True (inductor, its default): the graphs of its
    training step get TPU rows and a slice answer; the time split leaves at most 10% as "other";
    the trained weights are bitwise those of the same run without xlabridge."""
    (tmp_path / "observed").mkdir()
    (tmp_path / "plain").mkdir()
    data, logs, _ = _report(tmp_path, TRAINER, str(tmp_path / "observed"), tpu="v5e:2x2")
    rows = _check_rows(data, logs, tmp_path, "inductor")
    assert {r["role"] for r in rows} == {"forward", "backward"}
    assert data["tpu"]["slices"] and all(s["chips"] == 1 for s in data["tpu"]["slices"])
    split = _main(data)
    assert split["other"] <= 0.10 * split["wall"], split
    assert split["backend_compile"] > 0.2 * split["wall"]  # inductor's C++ compile dominates a tiny CPU run
    _plain(tmp_path, str(tmp_path / "plain"))
    _same_results(tmp_path / "observed" / "weights.pt", tmp_path / "plain" / "weights.pt")


LOOP = textwrap.dedent("""
    import json, sys, time
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    step = torch.compile(model, backend="inductor")
    x = torch.randn(64, 256)
    clock = []
    for i in range(int(sys.argv[1])):
        started = time.monotonic()
        loss = step(x).square().mean()
        forward = time.monotonic()
        loss.backward()
        backward = time.monotonic()
        optimizer.step()
        optimizer.zero_grad()
        clock.append([started, forward, backward])
    open(sys.argv[2], "w").write(json.dumps(clock))
""")


def test_shares_against_the_scripts_clock(tmp_path):
    """A training loop under inductor times its own steps: the first holds the compiles (forward in
    the first call, backward in the first backward()); the report's tracing + backend compile + the
    first step's execution make up that step, and the later steps' forward and backward calls are
    the execution share."""
    data, _, _ = _report(tmp_path, LOOP, "40", str(tmp_path / "clock.json"))
    clock = json.loads((tmp_path / "clock.json").read_text())
    split = _main(data)
    first = clock[0][2] - clock[0][0]
    steady = sum(b - s for s, _, b in clock[1:])
    assert split["tracing"] + split["backend_compile"] <= first
    assert split["tracing"] + split["backend_compile"] >= 0.7 * first
    # the steady steps' forward and backward are calls of the compiled graphs (the loss's square and
    # mean run eagerly between them: a few percent), plus the first step's own calls
    assert 0.6 * steady <= split["execution"] <= steady + first
    assert split["other"] <= 0.10 * split["wall"]


class _Pooled(torch.nn.Module):
    """A small CNN whose adaptive max pool has no TPU lowering (torchax has none, torch no decomposition)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.pool = torch.nn.AdaptiveMaxPool2d(2)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = self.pool(self.conv(x).relu())  # the op without a TPU lowering
        return self.head(pooled.flatten(1))


def test_op_without_tpu_lowering_is_named_with_its_line_and_the_other_graphs_get_rows():
    import inspect

    torch.manual_seed(0)
    net, x = _Pooled(), torch.randn(2, 3, 8, 8)
    w = torch.randn(10, 16)

    def scores(logits: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(logits @ w).sum(-1)

    with diagnose(tpu="v5e:2x2") as report:
        with torch.no_grad():
            logits = torch.compile(net, backend="eager")(x)
        torch.compile(scores, backend="aot_eager")(logits.requires_grad_()).sum().backward()
    lines, first = inspect.getsourcelines(_Pooled.forward)
    pool_line = first + next(i for i, line in enumerate(lines) if "self.pool(" in line)
    (found,) = [b for b in report.tpu.breaks if b.op == "aten::adaptive_max_pool2d"]
    assert (found.filename, found.lineno, found.role, found.backend) == (__file__, pool_line, "inference", "eager")
    assert found.category == "no-tpu-lowering" and "max_pool2d" in found.suggestion
    assert any(f.kind == "tpu-lowering-break" and f.lineno == pool_line for f in report.findings)
    pooled_rows = [g for g in report.tpu.graphs if g.compile_id == found.compile_id]
    assert [(g.compiled, g.error) for g in pooled_rows] == [(False, "no TPU lowering for aten::adaptive_max_pool2d")]
    others = [g for g in report.tpu.graphs if g.compile_id != found.compile_id]
    assert {g.role for g in others} == {"forward", "backward"} and all(g.compiled and g.fits for g in others)


@pytest.mark.slow
def test_slice_for_a_gpt2_training_step_on_v5e(tmp_path):
    """A GPT-2 training step too large for one v5e chip (vocabulary 50257, batch 32 of 1024 tokens;
    on the meta device: nothing is allocated): the slice it names fits, and the next smaller one does
    not, by libtpu's own compile of the step's StableHLO at both sizes."""
    import re

    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_embd=256, n_layer=1, n_head=4, vocab_size=50257, n_positions=1024)
    with torch.device("meta"):
        model = GPT2LMHeadModel(config)
        ids = torch.randint(0, config.vocab_size, (32, 1024))
    log = tmp_path / "events.jsonl"
    with diagnose(tpu="v5e:2x2", log=log) as report:
        torch.compile(model, backend="eager")(input_ids=ids, labels=ids).loss.backward()
    steps = {p.compile_id: p for p in events.read_log(log).events
             if isinstance(p, events.FxProgram) and p.role == "training-step"}
    needing_more = [s for s in report.tpu.slices if s.chips and s.chips > 1]
    assert needing_more, [(s.compile_id, s.chips, s.tried) for s in report.tpu.slices]
    chosen = needing_more[0]
    assert chosen.batch == 32 and chosen.mesh == {"data": chosen.chips}
    text = (tmp_path / steps[chosen.compile_id].hlo_file).read_text()

    def over(devices: int) -> str:  # the mesh size set by hand, not by xlabridge's rewrite
        text_n = re.sub(r'(sdy\.mesh @\w+ = <\["data"=)\d+', rf"\g<1>{devices}", text)
        text_n = re.sub(r'(name = "data", size = )\d+', rf"\g<1>{devices}", text_n)
        return re.sub(r"(mhlo\.num_partitions = )\d+", rf"\g<1>{devices}", text_n)

    fits, smaller = _reference.run([
        {"topology": chosen.topology, "text": over(chosen.chips), "partitions": chosen.chips},
        {"topology": chosen.topology, "text": over(chosen.chips // 2), "partitions": chosen.chips // 2},
    ], tmp_path)
    assert "error" not in fits
    memory = fits["memory"]
    used = (memory["argument_bytes"] + memory["output_bytes"] - memory["alias_bytes"] + memory["temp_bytes"]
            + memory["generated_code_bytes"])
    assert used == chosen.hbm_bytes <= chosen.capacity_bytes == 16 * 2**30
    assert "error" in smaller and "memory" in smaller["error"].lower()


def test_a_cnn_training_step_lowers_and_computes_what_torch_computes():
    """Convolutions' backward (which torchax does not lower; xlabridge lowers it as the VJP of
    torchax's convolution) and the rest of a CNN's training step: every program lowers, and run on
    the CPU by JAX it computes what the ATen graph computes in torch."""
    import numpy as np

    from xlabridge.tpu import _aot, _fx

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, stride=2), torch.nn.ReLU(),
                              torch.nn.Conv2d(8, 4, 3, groups=2, bias=False))
    x = torch.randn(2, 3, 9, 9)
    inputs = [_aot.TensorMeta.of(t) for t in (*net.parameters(), x)]
    gm = torch.fx.symbolic_trace(lambda w0, b0, w1, x: (torch.nn.functional.conv2d(
        torch.relu(torch.nn.functional.conv2d(x, w0, b0, stride=2, padding=1)), w1, groups=2),))
    programs = _aot.trace_programs(gm, inputs, training=True)
    assert [p.role for p in programs] == ["forward", "backward"]
    assert "aten::convolution_backward" in {_fx.op_name(n.target) for n in programs[1].graph_module.graph.nodes
                                            if n.op == "call_function"}
    rng = np.random.default_rng(0)
    for program in programs:
        assert _fx.missing_lowerings(program.graph_module) == []
        arrays = [rng.standard_normal(shape).astype(np.float32) for shape, _ in program.input_specs]
        expected = [t for t in program.graph_module(*[torch.from_numpy(a) for a in arrays]) if t is not None]
        got = _fx.export_fx(program.graph_module, program.input_specs, ("cpu",)).call(*arrays)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(np.asarray(g), e.detach().numpy(), rtol=1e-4, atol=1e-4)
