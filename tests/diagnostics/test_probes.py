"""Each probe fires where it must (checked against torch's and torch_xla's own records), a probe
whose upstream surface vanished gives one clear warning and a report that says what it could
not see while the model runs as with openxla, and the self-test and cross-checks name a probe
that stopped firing."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

import xlabridge.diagnostics as xd
from tests.conftest import requires_xla
from xlabridge import _optional
from xlabridge.diagnostics._observe import pod as _pod, recorder as _recorder
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe.probes import selftest, xla_bridge
from xlabridge.errors import DiagnosticsWarning


def _step(x: torch.Tensor) -> torch.Tensor:
    y = torch.exp2((x * 3).sin())
    print(end="")  # a Dynamo graph break
    return y.cos()


def _train(device: torch.device, backend: str, sizes=(16, 16, 16, 16, 16, 32)) -> list[torch.Tensor]:
    """Training calls of ``_step``: a break, a CPU fallback on XLA, a recompile, a deferred backward."""
    compiled = torch.compile(_step, backend=backend, dynamic=False)
    outputs = []
    for size in sizes:
        x = torch.arange(size, dtype=torch.float32, device=device).div(size).requires_grad_()
        out = compiled(x)
        out.sum().backward()
        if device.type == "xla":
            import torch_xla

            torch_xla.sync()
        outputs.append(out.detach().cpu())
    return outputs


# Dynamo's side is observed the same way whatever the backend: checked on XLA with openxla, and
# on the CPU with aot_eager (what runs on a machine without torch_xla, e.g. the newest torch).
DYNAMO_SIDE = [
    pytest.param("xla", "openxla", marks=requires_xla, id="xla-openxla"),
    pytest.param("cpu", "aot_eager", id="cpu-aot_eager"),
]


@pytest.fixture
def device_of():
    def make(kind: str) -> torch.device:
        if kind == "xla":
            import torch_xla

            return torch_xla.device()
        return torch.device(kind)

    return make


def _events(log: Path) -> list[ev.Event]:
    return ev.read_log(log).events


def _of(events: list[ev.Event], kind: type) -> list:
    return [e for e in events if isinstance(e, kind)]


@pytest.mark.parametrize(("kind", "backend"), DYNAMO_SIDE)
def test_dynamo_compiles_probe_times_every_compilation_dynamo_records(kind, backend, device_of, tmp_path) -> None:
    from torch._dynamo.utils import get_compilation_metrics

    def key(record):
        return str(record.compile_id), record.is_forward, record.start_time_us

    before = {key(r) for r in get_compilation_metrics()}  # Dynamo keeps its last 64 records
    with xd.diagnose(log=tmp_path / "e.jsonl"):
        _train(device_of(kind), backend)
    records = [r for r in get_compilation_metrics() if key(r) not in before]
    events = _events(tmp_path / "e.jsonl")
    compiles = _of(events, ev.DynamoCompile)
    forward = {str(m.compile_id): m for m in records if m.is_forward is not False}
    assert sorted(c.compile_id for c in compiles if c.trigger == "dynamo") == sorted(forward)
    assert {c.compile_id for c in compiles if c.trigger == "lazy_backward"} == set(forward)
    for event in compiles:
        if event.trigger == "dynamo":
            assert 0 < event.t - event.start <= forward[event.compile_id].entire_frame_compile_time_s * 1.05
    recompiles = {r.compile_id: r.reason for r in _of(events, ev.Recompile)}
    assert recompiles == {cid: m.recompile_reason for cid, m in forward.items() if m.recompile_reason}
    assert len(recompiles) == 2


@pytest.mark.parametrize(("kind", "backend"), [
    *DYNAMO_SIDE,
    pytest.param("xla", "xlabridge", marks=requires_xla, id="xla-xlabridge"),
    pytest.param("cpu", "xlabridge", marks=pytest.mark.skipif(
        _optional.is_available("torch_xla"), reason="with torch_xla, CPU graphs take openxla's way"), id="cpu-xlabridge"),
])
def test_dynamo_graphs_probe_sees_what_explain_sees_once_per_graph(kind, backend, device_of) -> None:
    x = torch.randn(16, device=device_of(kind))
    expected = torch._dynamo.explain(_step)(x)
    torch._dynamo.reset()
    with xd.diagnose() as report:
        torch.compile(_step, backend=backend)(x)
    assert [g.op_count for g in report.dynamo_graphs] == [len(ops) for ops in expected.ops_per_graph]
    assert {g.backend for g in report.dynamo_graphs} == {backend}
    assert [b.reason for b in report.dynamo_breaks] == [r.reason.splitlines()[0] for r in expected.break_reasons]


@requires_xla
def test_xla_helper_and_bridge_probes_see_every_extraction(xla_device, monkeypatch, tmp_path: Path) -> None:
    """The test counts the bridge's extractions itself, through its own wrapper (installed
    before observation, so the probe wraps the test's wrapper in turn)."""
    import torch_xla.core.dynamo_bridge as core_bridge
    import torch_xla.debug.metrics as met

    extractions = []
    original = core_bridge.extract_compiled_graph

    def counting(model, args):
        extractions.append(len([n for n in model.graph.nodes if n.op == "placeholder"]))
        return original(model, args)

    monkeypatch.setattr(core_bridge, "extract_compiled_graph", counting)
    with xd.diagnose(log=tmp_path / "e.jsonl") as report:
        _train(xla_device, "openxla")
        compiled = torch.compile(_step, backend="openxla")
        x = torch.randn(16, device=xla_device)
        compiled(x)  # a recompile (x does not require grad): extractions clear torch_xla's counters
        met.clear_all()
        compiled(x)
        fallback_ops = met.executed_fallback_ops()
    events = _events(tmp_path / "e.jsonl")
    # two shapes with grad (forward and backward of both graphs of the break), then a
    # recompile for an input that does not require grad (forward only)
    assert len(_of(events, ev.Partitioned)) == len(extractions) == len(report.xla_graphs) == 10
    assert sorted(g.role for g in report.xla_graphs) == ["backward"] * 4 + ["forward"] * 6
    cpu_nodes = [s.node for p in _of(events, ev.Partitioned) for s in p.segments if s.node is not None]
    assert [list(n.fallback_ops) for n in cpu_nodes] == [fallback_ops] * 3 == [["aten::exp2"]] * 3
    for graph in report.xla_graphs:
        assert len(graph.hashes) == graph.xla_graphs == graph.executions_per_call
        assert len(set(graph.hashes)) == len(graph.hashes)


@pytest.mark.parametrize(("kind", "backend"), DYNAMO_SIDE)
def test_a_vanished_compile_callback_api_gives_one_warning_and_the_model_runs_as_before(
    kind, backend, device_of, monkeypatch
):
    device = device_of(kind)
    expected = _train(device, backend)
    torch._dynamo.reset()
    from torch._dynamo.callback import CompilationCallbackHandler

    monkeypatch.delattr(CompilationCallbackHandler, "register_start_callback")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with xd.diagnose() as report:
            actual = _train(device, backend)
    messages = [str(w.message) for w in caught if issubclass(w.category, DiagnosticsWarning)]
    assert len(messages) == 1 and "'dynamo.compiles'" in messages[0] and "unavailable" in messages[0]
    assert all(torch.equal(a, e) for a, e in zip(actual, expected))
    (probe,) = [p for p in report.probes if p.state != "ok"]
    assert (probe.name, probe.state) == ("dynamo.compiles", "unavailable")
    assert "register_start_callback" in probe.reason
    assert any(f.kind == "probe" and "Dynamo compile seconds" in f.message for f in report.findings)
    assert report.graph_count == 4 and report.break_count == 2  # the other probes still see
    assert all(g.tracing_seconds is None for g in report.dynamo_graphs)


@requires_xla
def test_a_renamed_bridge_internal_gives_one_warning_and_the_model_runs_as_openxla(xla_device, monkeypatch):
    expected = _train(xla_device, "openxla")
    torch._dynamo.reset()

    def renamed(installation, extraction):
        raise AttributeError("module 'torch_xla._dynamo.dynamo_bridge' has no attribute 'extract_internal'")

    monkeypatch.setattr(xla_bridge, "_install_window", renamed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with xd.diagnose() as report:
            actual = _train(xla_device, "openxla")
    messages = [str(w.message) for w in caught if issubclass(w.category, DiagnosticsWarning)]
    assert len(messages) == 1 and "'xla.bridge'" in messages[0] and "extract_internal" in messages[0]
    assert all(torch.equal(a, e) for a, e in zip(actual, expected))
    assert [(p.name, p.state) for p in report.probes if p.state != "ok"] == [("xla.bridge", "unavailable")]
    assert report.hlo_breaks == [] and all(g.segments == [] for g in report.xla_graphs)
    assert all(g.calls for g in report.xla_graphs)


def test_self_test_expectations_name_the_probe_that_did_not_fire() -> None:
    stamp = {"t": 1.0, "pid": 1}
    events = [
        ev.DynamoCompile(**stamp, compile_id="0/0", start=0.5),
        ev.DynamoCompile(**stamp, compile_id="0/0", trigger="lazy_backward", start=0.5),
        ev.Recompile(**stamp, compile_id="0/1", reason="0/0: x"),
        ev.GraphCaptured(**stamp, compile_id="0/0", backend="openxla", op_count=1),
    ]
    missing = selftest.expectations(events, with_xla=False)
    assert missing == {"dynamo.compiles": "", "dynamo.graphs": "no graph break",
                       "dynamo.breaks": "no graph break as torch records it",
                       "backend.calls": "no call of an aot_eager graph; no backward of an aot_eager graph",
                       "dynamo.requests": "no torch.compile request"}
    assert selftest.expectations(events, with_xla=True)["xla.bridge"] == (
        "no CPU node with fallback ops; no XLA graph hash"
    )


def test_the_self_test_fires_every_probe_in_a_child_and_is_cached(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    run = selftest.Run()
    result = run.wait()
    assert result is not None, run.error
    assert result == {name: "" for name in result} and "dynamo.graphs" in result
    assert run.path.is_file() and run.path.is_relative_to(tmp_path)
    again = selftest.Run()
    assert again.result == result and again._child is None


@requires_xla
def test_the_self_test_names_the_eager_probe_when_its_metric_stops_moving() -> None:
    """The self-test's program, with torch_xla's eager execution metric under a name it never
    samples (as if a release renamed it): ``xla.eager`` alone is named, the others fire."""
    import json
    import os
    import subprocess
    import sys

    program = ("from xlabridge.diagnostics._observe.probes import selftest_child, xla_eager\n"
               "xla_eager.EXECUTE_TIME = 'EagerOpExecuteTimeRenamed'\n"
               "selftest_child.main()\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PJRT_DEVICE": "CPU"})
    assert done.returncode == 0, done.stderr[-2000:]
    missing = json.loads(done.stdout.strip().splitlines()[-1])
    assert missing.pop("xla.eager") == "no eager-mode op execution timed"
    assert missing == {name: "" for name in missing} and "xla.sync" in missing


def test_a_self_test_verdict_marks_the_probe_silent_with_one_warning(monkeypatch) -> None:
    class Verdict:
        path = Path("probes.json")

        def wait(self):
            return {"xla.bridge": "no CPU node with fallback ops", "dynamo.graphs": ""}

    from xlabridge.diagnostics._observe import session as _session

    monkeypatch.setattr(_session, "_selftest", Verdict())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with xd.diagnose() as report:
            pass
    messages = [str(w.message) for w in caught if issubclass(w.category, DiagnosticsWarning)]
    assert len(messages) == 1 and "'xla.bridge'" in messages[0] and "no CPU node with fallback ops" in messages[0]
    assert [(p.name, p.state) for p in report.probes if p.state != "ok"] == [("xla.bridge", "silent")]


def test_a_cross_check_names_a_probe_that_saw_nothing_where_another_saw_a_graph() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with xd.diagnose() as report:
            _recorder.emit(ev.BridgeGraph(**_recorder.stamp(), graph=99, compile_id="9/9", role="forward", fx_ops=1))
    messages = [str(w.message) for w in caught if issubclass(w.category, DiagnosticsWarning)]
    assert len(messages) == 1 and "'dynamo.graphs'" in messages[0] and "9/9" in messages[0]
    assert ("dynamo.graphs", "silent") in [(p.name, p.state) for p in report.probes]


@requires_xla
@pytest.mark.skipif(_pod.unsupported() is None, reason="this torch_xla's capture is read (tests/diagnostics/test_pod_report.py)")
def test_a_pod_capture_this_torch_xla_cannot_give_is_said_in_the_report(tmp_path: Path) -> None:
    """On torch_xla 2.8 ``--pod`` captures nothing and the report names the probe and why."""
    import json
    import subprocess
    import sys

    script = tmp_path / "lazy.py"
    script.write_text("import torch, torch_xla\nx = torch.ones(4, device=torch_xla.device()) * 2\ntorch_xla.sync()\n")
    out = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "xlabridge.cli", "report", "--pod", "--json", str(out), "--", sys.executable, str(script)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    (probe,) = [p for p in report["probes"] if p["name"] == "xla.capture"]
    assert probe["state"] == "unavailable" and "cannot be joined" in probe["reason"]
    assert any("xla.capture" in warning for warning in report["warnings"])
