"""The TPU view of reports: every XLA graph of a run compiled for a TPU topology after the run.

Figures are checked against reference compiles made without xlabridge (``tests/tpu/_reference``:
libtpu's compile-only client driven directly, kernels counted by walking the optimized
HloModuleProto); findings against graphs known not to fit or to be refused by XLA:TPU.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import requires_xla
from tests.tpu import _hlo_proto, _reference
from tests.tpu.conftest import requires_tpu_compiler
from xlabridge.diagnostics import build_report, render_text
from xlabridge.diagnostics._observe import tpu_pass as _tpu_pass
from xlabridge.diagnostics import diagnose, events, explain
from xlabridge.diagnostics._frames import UNKNOWN
from xlabridge.diagnostics.report import Report
from xlabridge.errors import MissingDependencyError, UnknownTopologyError

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = "v5e:2x2"

pytestmark = [requires_xla, requires_tpu_compiler]


def _mlp_training(device: torch.device, steps: int = 2) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 64).to(device), torch.randint(0, 10, (32,)).to(device)

    def loss_of(x, y):
        return torch.nn.functional.cross_entropy(model(x), y)

    compiled = torch.compile(loss_of, backend="xlabridge")
    import torch_xla

    for _ in range(steps):
        compiled(x, y).backward()
        optimizer.step()
        optimizer.zero_grad()
        torch_xla.sync()


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory):
    import torch_xla

    torch._dynamo.reset()
    log = tmp_path_factory.mktemp("tpu-view") / "events.jsonl"
    with diagnose(tpu=TOPOLOGY, log=log) as report:
        _mlp_training(torch_xla.device())
    return report, log


def test_every_xla_graph_of_a_training_step_is_compiled_for_tpu(mlp_run):
    report, _ = mlp_run
    hashes = {digest for graph in report.xla_graphs for digest in graph.hashes}
    assert [g.role for g in report.xla_graphs] == ["forward", "backward"]
    view = report.tpu
    assert view is not None and view.topology == TOPOLOGY and view.generation == "v5e"
    assert view.libtpu_version and "not run" in view.label and "libtpu" in view.label
    assert {row.hash for row in view.graphs} == hashes and len(view.graphs) == len(hashes)
    for row in view.graphs:
        assert row.compiled and row.fits and not row.error
        assert row.hbm_capacity_bytes == 16 * 2**30
        assert row.filename.endswith("test_tpu_view.py") and row.function == "loss_of"
    assert view.seconds >= view.compile_seconds > 0


def test_tpu_figures_equal_libtpu_s_own_compile_of_the_same_graphs(mlp_run, tmp_path):
    """Kernels and HBM per graph equal a compile of the saved HLO made without xlabridge."""
    report, log = mlp_run
    files = {d: f for g in report.xla_graphs for d, f in zip(g.hashes, g.hlo_files)}
    rows = list(report.tpu.graphs)
    jobs = [{"kind": "proto", "proto": (log.parent / files[row.hash]).read_bytes(), "topology": TOPOLOGY}
            for row in rows]
    for row, expected in zip(rows, _reference.run(jobs, tmp_path)):
        assert collections.Counter(row.kernel_names) == collections.Counter(_hlo_proto.kernels(expected["proto"]))
        assert row.kernels == len(row.kernel_names) > 0
        memory = expected["memory"]
        assert (row.argument_bytes, row.output_bytes, row.alias_bytes, row.temp_bytes, row.code_bytes) == (
            memory["argument_bytes"], memory["output_bytes"], memory["alias_bytes"], memory["temp_bytes"],
            memory["generated_code_bytes"])
        assert row.hbm_bytes == sum(memory.values()) - 2 * memory["alias_bytes"]


def test_the_tpu_view_round_trips_through_the_log_json_and_views(mlp_run):
    report, log = mlp_run
    rebuilt = build_report(events.read_log(log).events)
    assert rebuilt.to_dict() == report.to_dict()
    assert Report.from_dict(json.loads(report.to_json())).to_dict() == report.to_dict()
    text = render_text(report)
    assert f"TPU view ({TOPOLOGY})" in text and "not run" in text
    for row in report.tpu.graphs:
        assert row.hash[:12] in text
        assert row.tpu_hlo_file and (log.parent / row.tpu_hlo_file).read_text().startswith("HloModule")


def test_a_report_of_schema_2_is_still_read():
    data = Report().to_dict()
    data["schema"] = "xlabridge.report/2"
    del data["tpu"]
    assert Report.from_dict(data).tpu is None


def _line_of(fn) -> int:
    return inspect.getsourcelines(fn)[1] + 1


def _complex_graph(x):
    return (x.to(torch.complex128) * (1 + 2j)).abs().float()


def test_a_graph_xla_tpu_refuses_is_a_finding_with_its_line(xla_device):
    x = torch.randn(8, 128, device=xla_device)
    with torch.no_grad():
        report = explain(_complex_graph, tpu=TOPOLOGY)(x)
    (row,) = report.tpu.graphs
    assert not row.compiled and row.fits is None and "C128 is not supported on TPU" in row.error
    (finding,) = [f for f in report.findings if f.kind == "tpu-refused"]
    assert f"test_tpu_view.py:{_line_of(_complex_graph)} (_complex_graph)" in finding.message
    assert finding.graph == 0 and "C128" in finding.message


def _three_8gib_outputs(device: torch.device) -> list[torch.Tensor]:
    """24 GiB of outputs, traced lazily and never run (nothing is allocated here)."""
    a = torch.full((65536, 32768), 1.0, device=device)
    return [a, a * 2, a + 3]


def test_a_graph_too_large_for_the_chip_is_a_finding_and_fits_a_larger_one(xla_device, tmp_path):
    import torch_xla

    proto = torch_xla._XLAC._get_xla_tensors_hlo_proto(_three_8gib_outputs(xla_device))
    (tmp_path / "big.hlo.pb").write_bytes(proto)
    here = events.Frame(__file__, _line_of(_three_8gib_outputs), "_three_8gib_outputs")
    seen = events.XlaGraphSeen(t=0.0, pid=1, graph=None, hash="b16", origin=events.GraphOrigin.LAZY,
                               hlo_file="big.hlo.pb", frames=[here])
    for topology, fits in (("v5e:2x2", False), ("v5p:2x2x1", True)):
        compiled = _tpu_pass.run([seen], target=topology, base=tmp_path)
        report = build_report([seen, *compiled])
        (row,) = report.tpu.graphs
        assert row.origin == "lazy" and row.fits is fits
        findings = [f for f in report.findings if f.kind == "tpu-does-not-fit"]
        if fits:
            assert not findings and row.hbm_bytes >= 24 * 2**30
        else:
            # XLA:TPU either refuses it for HBM or compiles it with more than the chip holds.
            assert ("Ran out of memory in memory space hbm" in (row.out_of_memory or "")
                    or row.hbm_bytes >= 24 * 2**30 > row.hbm_capacity_bytes)
            (finding,) = findings
            assert f"test_tpu_view.py:{here.lineno} (_three_8gib_outputs)" in finding.message
            assert "16 GiB" in finding.message


def test_bad_tpu_arguments_are_refused_before_anything_runs(monkeypatch):
    ran = []
    with pytest.raises(UnknownTopologyError, match=r"tpu='v9:2x2'.*v5e:2x2"):
        explain(lambda: ran.append(1), tpu="v9:2x2")
    with pytest.raises(TypeError, match="'tpu' must be a TPU topology name"):
        with diagnose(tpu=5):  # type: ignore[arg-type]
            ran.append(1)
    from xlabridge.tpu import _compiler as compiler

    monkeypatch.setattr(compiler._optional, "is_available", lambda name: name != "libtpu")
    with pytest.raises(MissingDependencyError, match=r"xlabridge\[tpu-compile\]"):
        with diagnose(tpu=TOPOLOGY):
            ran.append(1)
    assert not ran


def test_cli_refuses_an_unknown_topology_before_running_the_command(tmp_path):
    marker = tmp_path / "ran"
    result = subprocess.run(
        [sys.executable, "-m", "xlabridge.cli", "report", "--tpu", "v7x:1x1", "--",
         sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert result.returncode != 0 and "--tpu='v7x:1x1'" in result.stderr and "v5e:2x2" in result.stderr
    assert not marker.exists()


DONATING_STEPS = """
import torch, torch_xla

device = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 256)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
x, y = torch.randn(64, 128).to(device), torch.randint(0, 256, (64,)).to(device)
for _ in range(3):
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()
    torch_xla.sync()
"""


def _report_cli(tmp_path: Path, name: str, program: str, *, timeout: float):
    """``xlabridge report --tpu`` on ``program`` (written to ``name``): the finished process, the
    event log directory and the JSON report's path."""
    script, logs, out = tmp_path / name, tmp_path / "logs", tmp_path / "report.json"
    script.write_text(program)
    result = subprocess.run(
        [sys.executable, "-m", "xlabridge.cli", "report", "--tpu", TOPOLOGY, "--events", str(logs),
         "--json", str(out), "--", sys.executable, str(script)],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return result, logs, out


def test_cli_tpu_view_aliases_what_a_synced_step_donates(tmp_path):
    """A lazily traced step's graph comes from XLA's dump with torch_xla's buffer donors: its TPU
    row aliases the parameters (first step, which creates the momentum buffers) and then the
    momentum buffers too, as a compile without xlabridge that aliases them through
    input_output_alias does (sizes of tests/tpu/_donating_step.py: XLA:TPU's tiles, no padding)."""
    result, logs, out = _report_cli(tmp_path, "steps.py", DONATING_STEPS, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [row for row in Report.from_dict(json.loads(out.read_text())).tpu.graphs if row.alias_bytes]
    parameters = (128 * 256 + 256 + 256 * 256 + 256) * 4
    assert sorted(row.alias_bytes for row in rows) == [parameters, 2 * parameters]
    suffix = f".{TOPOLOGY.replace(':', '_')}.tpu.txt"
    jobs = [{"kind": "proto", "proto": (logs / row.tpu_hlo_file.removesuffix(suffix)).read_bytes(),
             "topology": TOPOLOGY, "alias": True} for row in rows]
    for row, expected in zip(rows, _reference.run(jobs, tmp_path)):
        assert row.origin == "lazy" and row.compiled and row.fits
        assert (row.argument_bytes, row.output_bytes, row.alias_bytes, row.temp_bytes, row.code_bytes) == (
            expected["memory"]["argument_bytes"], expected["memory"]["output_bytes"],
            expected["memory"]["alias_bytes"], expected["memory"]["temp_bytes"],
            expected["memory"]["generated_code_bytes"])


FIVE_MODELS = """
import torch, torch_xla
from tests import models

device = torch_xla.device()
for name in ("gpt2", "bert", "llama", "t5", "resnet18"):
    torch._dynamo.reset()
    model, inputs = models.build(name, device)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    models.loss_of(torch.compile(model, backend="xlabridge")(**inputs)).backward()
    optimizer.step()  # traced lazily: a graph of its own at the sync
    torch_xla.sync()
    model.eval()
    with torch.no_grad():
        torch.compile(model, backend="xlabridge")(**models.without_labels(model, inputs))
    torch_xla.sync()
"""


@pytest.mark.slow
def test_cli_tpu_view_covers_every_graph_of_five_models_training_and_inference(tmp_path):
    result, logs, out = _report_cli(tmp_path, "five.py", FIVE_MODELS, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "compiling" in result.stderr and "for TPU v5e:2x2" in result.stderr
    report = Report.from_dict(json.loads(out.read_text()))
    roles = collections.Counter(g.role for g in report.xla_graphs)
    assert roles["forward"] >= 10 and roles["backward"] >= 5  # each model: train forward, backward, inference
    rows = {row.hash: row for row in report.tpu.graphs}
    assert set(rows) == _every_graph(report)
    assert all(row.compiled and row.fits and row.kernels > 0 and row.hbm_bytes > 0 for row in rows.values())
    # The user's line: the FX graph's first op, or the sync that cut a lazy graph (the line of the
    # script's torch_xla.sync()); the bridge's own syncs of pending inputs have no user frame.
    synced = {g.hash for g in report.run_graphs if g.origin == "lazy" and g.cause == "sync"}
    syncs = {n for n, line in enumerate(FIVE_MODELS.splitlines(), 1) if line.strip() == "torch_xla.sync()"}
    assert synced
    for digest, row in rows.items():
        if row.xla_graphs:
            assert row.filename != UNKNOWN.filename and row.lineno > 0, row
        elif digest in synced:
            assert row.filename == str(tmp_path / "five.py") and row.lineno in syncs, row
    reread = subprocess.run([sys.executable, "-m", "xlabridge.cli", "report", "--read", str(logs)],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert reread.returncode == 0 and f"TPU view ({TOPOLOGY})" in reread.stdout
    assert dataclasses.asdict(report.tpu) == dataclasses.asdict(
        build_report([e for p in sorted(logs.glob("events-*.jsonl")) for e in events.read_log(p).events]).tpu)


# ``%name = SHAPE opcode(``, SHAPE an array shape or a tuple of them (async starts return tuples).
_OPCODE = re.compile(
    r"= (?:\([^=]*?\)|\S+) (all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute)(?:-start)?\(")


def _count_in_tpu_hlo(text: str) -> dict[str, int]:
    """Collectives in optimized TPU HLO text, counted by opcode in every computation (fused ones
    included: XLA:TPU fuses an all-reduce into its reduce-scatter); the reference, as these graphs
    have no loops."""
    return dict(collections.Counter(match.group(1) for match in _OPCODE.finditer(text)))


def _sharded_report(tmp_path: Path, devices: int, topology: str, *extra: str) -> tuple[Report, Path]:
    logs = tmp_path / f"logs-{devices}-{'-'.join(extra) or 'planted'}"
    out = logs.with_suffix(".json")
    result = subprocess.run(
        [sys.executable, "-m", "xlabridge.cli", "report", "--tpu", topology, "--events", str(logs), "--json", str(out),
         "--", sys.executable, "-m", "xlabridge.examples.sharded_train", "--compile", "--steps", "2",
         "--devices", str(devices), *extra],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
        env={**os.environ, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(devices)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return Report.from_dict(json.loads(out.read_text())), logs


def _every_graph(report: Report) -> set[str]:
    """Hashes of every XLA graph the run executed: the bridge's, and the lazily traced ones that
    torch_xla's debug file lists (``--tpu`` turns that capture on)."""
    lazy = {g.hash for g in report.run_graphs if g.origin == "lazy"}
    assert lazy, "the capture saw no lazily traced graph (the optimizer step is one)"
    return {d for g in report.xla_graphs for d in g.hashes} | lazy


def _check_sharded_rows(report: Report, logs: Path, devices: int) -> dict[str, int]:
    """Every sharded graph compiled over ``devices`` TPU devices, collectives as its TPU HLO has them."""
    rows = report.tpu.graphs
    assert rows and {row.hash for row in rows} == _every_graph(report)
    kinds: collections.Counter = collections.Counter()
    for row in rows:
        assert row.compiled and row.fits and row.num_partitions == devices and row.devices == devices
        reported = {c["kind"]: c["count"] for c in row.collectives}
        assert reported == _count_in_tpu_hlo((logs / row.tpu_hlo_file).read_text())
        kinds.update(reported)
    return dict(kinds)


def test_sharded_graphs_get_their_tpu_collectives_and_the_planted_all_gather_goes_with_the_fix(tmp_path):
    planted, planted_logs = _sharded_report(tmp_path, 4, "v5e:2x2")
    fixed, fixed_logs = _sharded_report(tmp_path, 4, "v5e:2x2", "--fixed")
    planted_kinds = _check_sharded_rows(planted, planted_logs, 4)
    fixed_kinds = _check_sharded_rows(fixed, fixed_logs, 4)
    assert planted_kinds.get("all-gather", 0) > 0 and "all-gather" not in fixed_kinds
    assert fixed_kinds.get("all-reduce", 0) > 0  # the row-parallel blocks' reductions stay
    assert "collectives on TPU" in render_text(planted)


@pytest.mark.slow
@pytest.mark.parametrize(("devices", "topology"), [(8, "v5e:2x4"), (16, "v5e:4x4")])
def test_a_larger_mesh_compiles_for_the_matching_pod_with_per_chip_hbm(tmp_path, devices, topology):
    report, logs = _sharded_report(tmp_path, devices, topology)
    kinds = _check_sharded_rows(report, logs, devices)
    assert kinds.get("all-gather", 0) > 0
    assert all(row.chips == devices and row.hbm_capacity_bytes == 16 * 2**30 for row in report.tpu.graphs)


def test_graphs_of_other_backends_without_torchax_have_no_rows_and_the_report_says_why():
    """Where torchax is missing (this environment: torch_xla 2.9's wheel carries an older copy that
    needs flax, and torch 2.9's AOTAutograd cannot hand over the backward with the forward), a run of
    another backend under the TPU view keeps going, its graphs get no rows, and a warning says why."""
    from xlabridge.diagnostics._observe import fx_programs

    if fx_programs.why_not_available() is None:
        pytest.skip("torchax is installed here: tests/torchtpu/test_any_backend.py checks the rows it gives")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())
    x = torch.randn(4, 8)
    with diagnose(tpu=TOPOLOGY) as report:
        out = torch.compile(model, backend="eager")(x)
    assert torch.equal(out, model(x))
    assert [(g.backend, g.route, g.compiled) for g in report.tpu.graphs] == [("eager", "torchax", False)]
    (warning,) = [w for w in report.warnings if w.startswith("TPU view: Dynamo graphs without a TPU row")]
    assert "needs torchax and jax" in warning and "torchax" in warning and "not installed" in warning
