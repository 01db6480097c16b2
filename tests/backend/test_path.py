"""The forward-only / AOTAutograd decision: each rule, checked bitwise against ``openxla``.

Every case runs the same function twice on fresh copies of the same inputs, once with
``backend="openxla"`` and once with ``backend="xlabridge"``, and compares the outputs and the
inputs afterwards (so mutations written back, or not, show), bit for bit. The path xlabridge
took and its reason are read from the diagnostics report, as a user would read them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from tests import models
from tests.conftest import requires_xla
from xlabridge.backend import _path as _compile_path
from xlabridge.diagnostics import diagnose

pytestmark = requires_xla

FORWARD, AOT = _compile_path.PathKind.FORWARD_ONLY, _compile_path.PathKind.AOT_AUTOGRAD


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)


def _assert_bitwise_equal(actual: object, expected: object, what: str) -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor) and actual.shape == expected.shape and actual.dtype == expected.dtype, what
        assert torch.equal(_bits(actual), _bits(expected)), f"{what} differs bitwise"
    else:
        assert len(actual) == len(expected), what
        for index, (a, e) in enumerate(zip(actual, expected)):
            _assert_bitwise_equal(a, e, f"{what}[{index}]")


def _run(fn: Callable, make_inputs: Callable[[], list], backend: str, grad: bool) -> tuple[object, list, object]:
    import torch_xla.core.xla_model as xm

    torch._dynamo.reset()
    inputs = make_inputs()
    xm.set_rng_state(7)
    context = contextlib.nullcontext() if grad else torch.no_grad()
    with diagnose() as report, context:
        output = torch.compile(fn, backend=backend)(*inputs)
    return output, inputs, report


def _check(fn: Callable, make_inputs: Callable[[], list], *, grad: bool, path: str, reason: str) -> None:
    expected, expected_inputs, _ = _run(fn, make_inputs, "openxla", grad)
    actual, actual_inputs, report = _run(fn, make_inputs, "xlabridge", grad)
    _assert_bitwise_equal(actual, expected, "output")
    _assert_bitwise_equal(actual_inputs, expected_inputs, "inputs after the call")
    chosen = [(g.path, g.path_reason) for g in report.dynamo_graphs]
    assert len(chosen) == 1, chosen
    assert chosen[0][0] == path and reason in chosen[0][1], chosen


def _tensors(device: torch.device, *shapes: tuple[int, ...], grad: tuple[bool, ...] = ()) -> Callable[[], list]:
    def make() -> list:
        generator = torch.Generator().manual_seed(0)
        made = [torch.randn(*s, generator=generator).to(device) for s in shapes]
        for tensor, requires in zip(made, grad):
            tensor.requires_grad_(requires)
        return made

    return make


def _mutate_input(x, w):
    x.add_(1)
    return x @ w


def _mutate_view_of_input(x, w):
    x[0].mul_(2)
    return (x @ w).sum(0)


def _mutate_intermediate(x, w):
    y = x @ w
    y.add_(1).relu_()
    return y * 2


def _mutate_intermediate_used(x, w):
    y = x @ w
    z = F.relu(y, inplace=True)
    z = z.mul_(3)
    return z * 2 + y


def _masks(x, w):
    y = x @ w
    return torch.where((y > 0) & (y < 1) | (y < -1), y, -y)


def _set_item(x, w):
    y = x @ w
    y[0] = 0.5
    return y


def _alias_input(x, w):
    return x.view(-1), x @ w


def _outputs_share_storage(x, w):
    y = x @ w
    return y, y.t()


def _dropout(x, w):
    return F.dropout(x @ w, 0.5, training=True)


def _dropout_off(x, w):
    return F.dropout(x @ w, 0.5, training=False)


def _rand(x, w):
    return x @ w + torch.rand(w.shape[1], device=x.device)


def _enables_grad(x, w):
    with torch.enable_grad():
        y = x @ w
    return y.relu()


def _plain(x, w):
    return torch.tanh(x @ w).softmax(-1)


CASES = [
    # fn, grad mode, requires_grad (x, w), expected path, reason fragment
    (_plain, False, (False, True), FORWARD, "no grad mode"),
    (_plain, True, (False, False), FORWARD, "no input requires grad"),
    (_plain, True, (False, True), AOT, "requires grad"),
    (_mutate_input, False, (), AOT, "mutates input"),
    (_mutate_view_of_input, False, (), AOT, "mutates input"),
    (_mutate_intermediate, False, (), AOT, "result of in-place op relu_ unused"),
    (_mutate_intermediate_used, False, (), FORWARD, "no grad mode"),
    (_set_item, False, (), AOT, "in-place op setitem unused"),
    (_masks, False, (), FORWARD, "no grad mode"),
    (_alias_input, False, (), AOT, "aliases input"),
    (_outputs_share_storage, False, (), AOT, "share storage"),
    (_dropout, False, (), AOT, "random op dropout"),
    (_dropout_off, False, (), FORWARD, "no grad mode"),
    (_rand, False, (), AOT, "random op rand"),
    (_enables_grad, False, (), AOT, "switches grad mode"),
]


@pytest.mark.parametrize(("fn", "grad", "requires", "path", "reason"), CASES, ids=[c[0].__name__ + ("-grad" if c[1] else "") + ("-w_requires_grad" if any(c[2]) else "") for c in CASES])
def test_path_and_results_match_openxla(fn, grad, requires, path, reason, xla_device):
    _check(fn, _tensors(xla_device, (4, 6), (6, 3), grad=requires), grad=grad, path=path, reason=reason)


def test_functional_batch_norm_in_training_updates_running_stats_like_openxla(xla_device):
    """Fake tensors do not count this mutation; the explicit rule must catch it."""

    def make() -> list:
        generator = torch.Generator().manual_seed(0)
        x, mean, var = torch.randn(4, 6, generator=generator), torch.randn(6, generator=generator), torch.rand(6, generator=generator) + 0.5
        return [x.to(xla_device), mean.to(xla_device), var.to(xla_device)]

    def fn(x, running_mean, running_var):
        return F.batch_norm(x, running_mean, running_var, training=True, momentum=0.3) * 2

    _check(fn, make, grad=False, path=AOT, reason="batch_norm updates running statistics")


@pytest.mark.parametrize(("train", "path", "reason"), [(True, AOT, "mutates input"), (False, FORWARD, "no grad mode")])
def test_batchnorm_buffers_match_openxla(train, path, reason, xla_device):
    def make() -> list:
        torch.manual_seed(0)
        module = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5)).to(xla_device).train(train)
        return [module, torch.randn(8, 6).to(xla_device)]

    def call(module, x):
        return module(x)

    expected, (expected_module, _), _ = _run(call, make, "openxla", False)
    actual, (actual_module, _), report = _run(call, make, "xlabridge", False)
    _assert_bitwise_equal(actual, expected, "output")
    for (name, a), (_, e) in zip(actual_module.state_dict().items(), expected_module.state_dict().items()):
        _assert_bitwise_equal(a, e, name)
    assert [(g.path, reason in g.path_reason) for g in report.dynamo_graphs] == [(path, True)]


@pytest.mark.slow
def test_resnet18_in_train_mode_under_no_grad_takes_aot_and_matches_openxla(xla_device):
    def make() -> list:
        model, inputs = models.build("resnet18", xla_device)
        return [model.train(), inputs["x"]]

    def call(model, x):
        return model(x)

    expected, (expected_model, _), _ = _run(call, make, "openxla", False)
    actual, (actual_model, _), report = _run(call, make, "xlabridge", False)
    _assert_bitwise_equal(actual, expected, "logits")
    for (name, a), (_, e) in zip(actual_model.state_dict().items(), expected_model.state_dict().items()):
        _assert_bitwise_equal(a, e, name)
    assert report.dynamo_graphs and all(g.path == AOT for g in report.dynamo_graphs)
    assert "mutates input" in report.dynamo_graphs[0].path_reason and "buffers" in report.dynamo_graphs[0].path_reason


@pytest.mark.slow
def test_gpt2_inference_is_forward_only_and_matches_openxla(xla_device):
    def make() -> list:
        model, inputs = models.build("gpt2", xla_device)
        return [model.eval(), inputs["input_ids"]]

    def call(model, ids):
        return model(input_ids=ids).logits

    expected, _, _ = _run(call, make, "openxla", False)
    actual, _, report = _run(call, make, "xlabridge", False)
    _assert_bitwise_equal(actual, expected, "logits")
    # torch 2.8 breaks GPT-2 (transformers' cache set-up) into three graphs, one of which returns
    # input_ids itself: that graph takes AOTAutograd by the alias rule; torch 2.9 captures one graph
    assert report.dynamo_graphs and all(
        g.path == FORWARD or (g.path == AOT and "aliases input" in g.path_reason) for g in report.dynamo_graphs
    ), report.dynamo_graphs
    assert max(g.op_count for g in report.dynamo_graphs if g.path == FORWARD) > 50  # the transformer itself


def test_cpu_only_graphs_take_openxla_s_way_and_are_a_finding(xla_device):
    """On a machine with torch_xla, a graph with every tensor on the CPU compiles as openxla
    would (usually a model not moved to the device), and the report says so."""
    x = torch.randn(4)
    expected = torch.compile(lambda t: t.sin() + 1, backend="openxla")(x)
    torch._dynamo.reset()
    with diagnose() as report:
        actual = torch.compile(lambda t: t.sin() + 1, backend="xlabridge")(x)
    _assert_bitwise_equal(actual, expected, "output")
    assert actual.device.type == "cpu"
    ((path, reason),) = [(g.path, g.path_reason) for g in report.dynamo_graphs]
    assert path in (FORWARD, AOT)
    (finding,) = [f for f in report.findings if f.kind == "cpu-only-graph"]
    assert "not on the XLA device" in finding.message
