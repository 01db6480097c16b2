"""The xlabridge backend: discovery, equivalence with openxla, the native fallback, errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib import metadata

import pytest
import torch

import xlabridge
from tests import models
from tests.conftest import requires_cuda, requires_xla
from xlabridge.backend import _forward_only
from xlabridge import _optional
from xlabridge.backend._path import PathKind
from xlabridge.diagnostics import diagnose
from xlabridge.errors import DeviceMismatchError

REAL_MODELS = ["gpt2", "bert", "llama", "t5", "resnet18"]


def _run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600
    )


def _assert_bitwise_equal(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    actual, expected = actual.detach().cpu(), expected.detach().cpu()
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    assert torch.equal(actual.reshape(-1).view(torch.uint8), expected.reshape(-1).view(torch.uint8)), f"{what} differs bitwise"


def test_registered_through_the_torch_dynamo_backends_entry_point():
    names = {ep.name for ep in metadata.entry_points(group="torch_dynamo_backends")}
    assert "xlabridge" in names
    assert "xlabridge" in torch._dynamo.list_backends(exclude_tags=())


def test_torch_compile_finds_the_backend_without_importing_xlabridge():
    result = _run_python(
        """
        import sys, torch
        assert "xlabridge" not in sys.modules
        fn = torch.compile(lambda x: torch.sin(x) * 2, backend="xlabridge")
        x = torch.randn(8)
        torch.testing.assert_close(fn(x), torch.sin(x) * 2)
        print("loaded:", "xlabridge" in sys.modules)
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "loaded: True" in result.stdout


def _infer(name: str, backend: str, device: torch.device) -> tuple[torch.Tensor, list[str]]:
    """The logits of one inference call, and the hashes of the XLA graphs it compiled."""
    torch._dynamo.reset()
    model, inputs = models.build(name, device)
    model.eval()
    with torch.no_grad(), diagnose() as report:
        output = torch.compile(model, backend=backend)(**models.without_labels(model, inputs))
    hashes = [digest for graph in report.xla_graphs for digest in graph.hashes]
    return (output if isinstance(output, torch.Tensor) else output.logits), hashes


@requires_xla
@pytest.mark.slow
@pytest.mark.parametrize("name", REAL_MODELS)
def test_inference_is_bitwise_equal_to_openxla(name, xla_device):
    """Same logits, and the same XLA graphs: torch_xla's hash of each graph's HLO is openxla's."""
    expected, expected_hashes = _infer(name, "openxla", xla_device)
    actual, hashes = _infer(name, "xlabridge", xla_device)
    _assert_bitwise_equal(actual, expected, f"{name} logits")
    assert hashes and hashes == expected_hashes

    model, inputs = models.build(name, xla_device)
    model.eval()
    with torch.no_grad():
        eager = model(**models.without_labels(model, inputs))
    eager = eager if isinstance(eager, torch.Tensor) else eager.logits
    torch.testing.assert_close(actual.cpu(), eager.cpu(), rtol=1e-4, atol=1e-4)


def _train_step(name: str, backend: str, device: torch.device) -> dict[str, torch.Tensor]:
    torch._dynamo.reset()
    model, inputs = models.build(name, device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    compiled = torch.compile(model, backend=backend)
    loss = models.loss_of(compiled(**inputs))
    loss.backward()
    grads = {f"grad {n}": p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    optimizer.step()
    params = {f"param {n}": p for n, p in model.named_parameters()}
    buffers = {f"buffer {n}": b for n, b in model.named_buffers()}
    return {"loss": loss, **grads, **params, **buffers}


@requires_xla
@pytest.mark.slow
@pytest.mark.parametrize("name", REAL_MODELS)
def test_training_step_is_bitwise_equal_to_openxla(name, xla_device):
    expected = _train_step(name, "openxla", xla_device)
    actual = _train_step(name, "xlabridge", xla_device)
    assert actual.keys() == expected.keys()
    assert sum(k.startswith("grad ") for k in actual) > 0
    for key in expected:
        _assert_bitwise_equal(actual[key], expected[key], f"{name} {key}")


@pytest.mark.skipif(_optional.is_available("torch_xla"), reason="with torch_xla, CPU-only graphs take openxla's way")
def test_cpu_graphs_go_to_inductor_without_torch_xla():
    from torch._dynamo.utils import counters

    counters.clear()

    def fn(x, y):
        return torch.relu(x @ y) + 1

    x, y = torch.randn(16, 8), torch.randn(8, 4)
    torch.testing.assert_close(xlabridge.compile(fn)(x, y), fn(x, y))
    assert counters["inductor"], "inductor did not compile the CPU graph"


@requires_xla
def test_cpu_graphs_compile_like_openxla_where_torch_xla_is_installed():
    from torch._dynamo.utils import counters

    def fn(x, y):
        return torch.relu(x @ y) + 1

    x, y = torch.randn(16, 8), torch.randn(8, 4)
    expected = torch.compile(fn, backend="openxla")(x, y)
    torch._dynamo.reset()
    counters.clear()
    actual = xlabridge.compile(fn)(x, y)
    _assert_bitwise_equal(actual, expected, "output")
    assert not counters["inductor"], "a CPU graph went to inductor on a machine with torch_xla"


@requires_cuda
def test_cuda_graphs_go_to_inductor_and_match_eager():
    from torch._dynamo.utils import counters

    counters.clear()
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).cuda()
    x = torch.randn(32, 64, device="cuda")
    torch.testing.assert_close(xlabridge.compile(model)(x), model(x), rtol=1e-4, atol=1e-4)
    assert counters["inductor"], "inductor did not compile the CUDA graph"


def test_without_torch_xla_import_works_and_cpu_models_run_through_inductor():
    result = _run_python(
        """
        import importlib.abc, sys

        class HideTorchXla(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "torch_xla" or name.startswith("torch_xla."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, HideTorchXla())
        import torch
        import xlabridge
        from torch._dynamo.utils import counters

        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
        x = torch.randn(4, 8)
        out = torch.compile(model, backend="xlabridge")(x)
        torch.testing.assert_close(out, model(x))
        assert counters["inductor"], "inductor was not used"
        try:
            xlabridge.compile(model, device="xla")
        except xlabridge.MissingDependencyError as error:
            print("missing:", error)
        assert "torch_xla" not in sys.modules
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "missing: xlabridge.compile(device='xla') needs torch_xla" in result.stdout
    assert "pip install" in result.stdout


@requires_xla
def test_model_on_xla_called_with_cpu_input_names_the_argument(xla_device):
    model = torch.nn.Linear(8, 4).to(xla_device)
    with pytest.raises(DeviceMismatchError, match=r"argument 'input' is on cpu.*torch_xla\.device\(\)"):
        xlabridge.compile(model)(torch.randn(2, 8))


@requires_xla
def test_device_xla_with_cpu_tensors_names_the_inputs():
    model = torch.nn.Linear(3, 3)
    with pytest.raises(DeviceMismatchError, match=r"device='xla' was requested.*model\['weight'\] is on cpu"):
        xlabridge.compile(model, device="xla")(torch.randn(2, 3))


@requires_xla
def test_cpu_tensor_beside_xla_tensor_runs_like_openxla(xla_device):
    def fn(x, y):
        return x * 2, y + 1

    x, y = torch.randn(4, device=xla_device), torch.randn(3)
    expected = torch.compile(fn, backend="openxla")(x, y)
    torch._dynamo.reset()
    actual = torch.compile(fn, backend="xlabridge")(x, y)
    for a, e in zip(actual, expected):
        assert a.device == e.device
        _assert_bitwise_equal(a, e, "output")


@pytest.mark.parametrize(
    ("options", "error", "pattern"),
    [
        ({"device": "tpu"}, ValueError, r"option 'device' must be one of \('auto', 'xla'\), got 'tpu'"),
        ({"speed": "max"}, ValueError, r"unknown option\(s\) \['speed'\]"),
    ],
)
def test_bad_backend_options_are_named(options, error, pattern):
    fn = torch.compile(lambda x: x + 1, backend="xlabridge", options=options)
    with pytest.raises(Exception, match=pattern):
        fn(torch.randn(2))


def test_compile_rejects_a_non_callable_and_another_backend():
    with pytest.raises(TypeError, match="'model' must be an nn.Module or a function, got int"):
        xlabridge.compile(3)
    with pytest.raises(TypeError, match="'backend' is always 'xlabridge'"):
        xlabridge.compile(torch.nn.Linear(2, 2), backend="inductor")


# The forward-only path gives openxla's transfers, executions and RNG stream, not only its
# outputs (graphs whose CPU constructors torch_xla moves to the device only in aten graphs),
# each measured with torch_xla's own metrics for both backends.


def _adds_arange(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + torch.arange(x.shape[-1]).to(x.device)


def _steady_call(backend: str, device: torch.device) -> tuple[torch.Tensor, dict[str, int]]:
    """Metric deltas of one steady no-grad call (after three warm calls)."""
    import torch_xla
    import torch_xla.debug.metrics as met

    torch._dynamo.reset()
    fn = torch.compile(_adds_arange, backend=backend)
    x = torch.linspace(-1, 1, 32, device=device).reshape(4, 8)
    torch_xla.sync()
    with torch.no_grad():
        for _ in range(3):
            fn(x)
            torch_xla.sync()
        met.clear_all()
        out = fn(x)
        torch_xla.sync()
    counts = {
        name: (met.metric_data(name) or (0,))[0]
        for name in ("TransferToDeviceTime", "TransferFromDeviceTime", "RunCachedGraphOutputData")
    }
    return out.cpu(), counts


@requires_xla
def test_a_cpu_constructor_costs_no_transfer_per_call_as_with_openxla(xla_device) -> None:
    expected, expected_counts = _steady_call("openxla", xla_device)
    with diagnose() as report:
        actual, actual_counts = _steady_call("xlabridge", xla_device)
    assert [g.path for g in report.dynamo_graphs] == [PathKind.FORWARD_ONLY]
    assert torch.equal(actual, expected)
    assert actual_counts == expected_counts
    assert expected_counts == {"TransferToDeviceTime": 0, "TransferFromDeviceTime": 0, "RunCachedGraphOutputData": 1}


@requires_xla
def test_the_rng_stream_after_a_compiled_call_is_openxla_s(xla_device) -> None:
    import torch_xla

    def draw(backend: str) -> torch.Tensor:
        torch._dynamo.reset()
        torch_xla.manual_seed(123)
        with torch.no_grad():
            moved = torch.compile(lambda d: torch.arange(5, device="cpu").to(d), backend=backend)(xla_device)
        return torch.cat([moved.float(), torch.rand(3, device=xla_device)]).cpu()

    assert torch.equal(draw("xlabridge"), draw("openxla"))


def test_the_aten_graph_keeps_each_node_s_source_line() -> None:
    import inspect

    traced = []

    def backend(gm, example_inputs):
        traced.append(_forward_only.aten_graph(gm, example_inputs))
        return gm.forward

    torch.compile(_adds_arange, backend=backend)(torch.randn(4, 8))
    ops = [n for n in traced[0].graph.nodes if n.op == "call_function"]
    assert ops and all(str(n.target).startswith("aten.") for n in ops), [n.target for n in ops]
    assert all("val" in n.meta for n in ops)
    line = inspect.getsourcelines(_adds_arange)[1] + 1
    assert all(f'{__file__}", line {line}' in n.meta.get("stack_trace", "") for n in ops)


@requires_xla
@pytest.mark.parametrize("shape", [(4, 8), (2, 3, 5)])
def test_outputs_match_eager_on_fake_traced_graphs(shape, xla_device) -> None:
    x = torch.randn(*shape, device=xla_device)
    with torch.no_grad():
        out = torch.compile(_adds_arange, backend="xlabridge")(x)
    torch.testing.assert_close(out.cpu(), _adds_arange(x.cpu()))

