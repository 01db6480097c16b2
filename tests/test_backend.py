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
from xlabridge.errors import DeviceMismatchError, MissingDependencyError

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


def _infer(name: str, backend: str, device: torch.device) -> torch.Tensor:
    torch._dynamo.reset()
    model, inputs = models.build(name, device)
    model.eval()
    with torch.no_grad():
        output = torch.compile(model, backend=backend)(**models.without_labels(model, inputs))
    return output if isinstance(output, torch.Tensor) else output.logits


@requires_xla
@pytest.mark.slow
@pytest.mark.parametrize("name", REAL_MODELS)
def test_inference_is_bitwise_equal_to_openxla(name, xla_device):
    expected = _infer(name, "openxla", xla_device)
    actual = _infer(name, "xlabridge", xla_device)
    _assert_bitwise_equal(actual, expected, f"{name} logits")

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


def test_cpu_graphs_go_to_inductor():
    from torch._dynamo.utils import counters

    counters.clear()

    def fn(x, y):
        return torch.relu(x @ y) + 1

    x, y = torch.randn(16, 8), torch.randn(8, 4)
    torch.testing.assert_close(xlabridge.compile(fn)(x, y), fn(x, y))
    assert counters["inductor"], "inductor did not compile the CPU graph"


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
