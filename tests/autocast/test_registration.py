"""Registration decisions, the einsum default, the Python fallback, and the build fallback."""

from __future__ import annotations

import warnings

import pytest
import torch

from tests.autocast._cases import FP32, LOWER, PROMOTE, make_inputs
from tests.conftest import requires_xla
from xlabridge.autocast import _probe, _registration
from xlabridge.autocast._ops import DEFAULT_SPECS, SPECS_BY_NAME, TORCH_RELEASE, CastPolicy, OpSpec, Policy

EINSUM = DEFAULT_SPECS[0]


class FakeDispatcher:
    """A dispatcher state given as the set of ops that have an AutocastXLA kernel."""

    def __init__(self, present: set[str]) -> None:
        self.present = set(present)
        self.queries: list[str] = []

    def has_kernel(self, op: str) -> bool:
        self.queries.append(op)
        return op in self.present


def test_plan_registers_einsum_where_torch_xla_lacks_it() -> None:
    old_torch_xla = FakeDispatcher({"aten::mm", "aten::matmul", "aten::bmm"})
    assert _registration.plan(DEFAULT_SPECS, old_torch_xla.has_kernel) == [EINSUM]
    assert old_torch_xla.queries == ["aten::einsum"]


def test_plan_registers_nothing_where_einsum_is_present() -> None:
    new_torch_xla = FakeDispatcher({"aten::mm", "aten::einsum"})
    assert _registration.plan(DEFAULT_SPECS, new_torch_xla.has_kernel) == []


def test_plan_keeps_order_and_drops_duplicates() -> None:
    mv = SPECS_BY_NAME["aten::mv"]
    state = FakeDispatcher({"aten::exp"})
    specs = [mv, SPECS_BY_NAME["aten::exp"], EINSUM, mv]
    assert _registration.plan(specs, state.has_kernel) == [mv, EINSUM]


def test_backend_name_is_validated(monkeypatch) -> None:
    with pytest.raises(ValueError, match="'backend' must be one of"):
        _registration.registrar("gpu")
    monkeypatch.setenv(_registration.BACKEND_ENV, "fast")
    with pytest.raises(ValueError, match="XLABRIDGE_AUTOCAST_BACKEND must be one of"):
        _registration.requested_backend()


def test_build_failure_warns_once_and_falls_back_to_python(monkeypatch) -> None:
    from xlabridge.autocast import _build

    monkeypatch.setattr(_registration, "_registrars", {})

    def no_compiler() -> str:
        raise RuntimeError("Error building extension: g++: not found")

    monkeypatch.setattr(_build, "load_extension", no_compiler)
    with pytest.warns(_registration.AutocastBuildWarning, match="g\\+\\+: not found.*pure-Python"):
        first = _registration.registrar("auto")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = _registration.registrar("auto")
    assert first is second
    assert first.backend == "python"


@requires_xla
def test_einsum_already_present_in_torch_xla_is_left_alone(xla_device) -> None:
    """torch_xla 2.8 and 2.9 both register einsum for AutocastXLA themselves (checked on 2.8.1, 2.9.0)."""
    debug_before = torch._C._dispatch_dump("aten::einsum")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _registration.ensure_einsum() == []
    assert "AutocastXLA: registered at torch_xla/csrc/autocast_mode.cpp" in debug_before
    assert torch._C._dispatch_dump("aten::einsum") == debug_before
    assert "aten::einsum" not in _registration.registered_by_xlabridge()


@requires_xla
@pytest.mark.parametrize("backend", ["cpp", "python"])
def test_default_path_registers_a_missing_op_and_it_computes_in_bf16(backend, monkeypatch, xla_device) -> None:
    """The einsum path, run for real on an op this torch_xla lacks (mv), through both backends."""
    mv = SPECS_BY_NAME["aten::mv"]
    monkeypatch.setattr(_registration, "DEFAULT_SPECS", (mv,))
    assert not _probe.has_kernel("aten::mv", "AutocastXLA")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert _registration.ensure_einsum(backend) == ["aten::mv"]
            assert _registration.ensure_einsum(backend) == []
        assert _registration.registered_by_xlabridge() == {"aten::mv": backend}
        where = torch._C._dispatch_dump("aten::mv").split("AutocastXLA: registered at ")[1].split("\n")[0]
        if backend == "cpp":
            assert "autocast_xla.cpp" in where, where
        else:
            # A Python kernel: boxed only, no C++ signature. torch 2.8 records Python registrations
            # at "/dev/null:<line>" rather than the registering file (seen on torch 2.8.0).
            assert where.endswith(":: (none) [ boxed ]"), where
            if TORCH_RELEASE >= (2, 9):
                assert "_pyfallback.py" in where, where
        call, specs = LOWER["aten::mv"]
        with torch.autocast("xla", dtype=torch.bfloat16):
            out = call(*[t.to(xla_device) for t in make_inputs(specs)])
        assert out.dtype == torch.bfloat16
    finally:
        _registration.unregister(["aten::mv"])
    assert not _probe.has_kernel("aten::mv", "AutocastXLA")


ONE_PER_POLICY = ["aten::mv", "aten::exp", "aten::sum.dim_IntList", "aten::norm.ScalarOpt_dim", "aten::tensordot"]


@requires_xla
@pytest.mark.parametrize("op", ONE_PER_POLICY)
def test_python_kernels_match_cpp_kernels(op, xla_device) -> None:
    """Same op, same inputs: the Python fallback and the C++ kernel give the same dtype and values."""
    spec = SPECS_BY_NAME[op]
    call, specs = {**LOWER, **FP32, **PROMOTE}[op]
    inputs = make_inputs(specs)
    if spec.cast is CastPolicy.promote:
        inputs = [inputs[0]] + [t.bfloat16() for t in inputs[1:]]
    elif spec.cast is not CastPolicy.lower_precision_fp:
        inputs = [t.bfloat16() for t in inputs]
    results = {}
    for backend in ("cpp", "python"):
        assert _registration.register([spec], backend) == [op]
        try:
            assert _probe.probe(op, "AutocastXLA").policy is spec.cast.policy
            with torch.autocast("xla", dtype=torch.bfloat16):
                results[backend] = call(*[t.to(xla_device) for t in inputs]).cpu()
        finally:
            _registration.unregister([op])
    assert results["cpp"].dtype == results["python"].dtype
    torch.testing.assert_close(results["cpp"], results["python"], rtol=0, atol=0)


@requires_xla
def test_parity_is_opt_in_idempotent_and_reversible(xla_device) -> None:
    from xlabridge.autocast import disable_parity, enable_parity

    assert not _probe.has_kernel("aten::mv", "AutocastXLA")
    first = enable_parity()
    try:
        second = enable_parity()
        assert first.backend == "cpp" and second.backend == "none"
        assert second.registered == ()
        assert set(first.registered) <= set(second.present)
        assert _probe.probe("aten::layer_norm", "AutocastXLA").policy is Policy.FP32
        assert "aten::binary_cross_entropy" in first.skipped
        assert '"registered"' in first.to_json() and "registered" in str(first)
    finally:
        removed = disable_parity()
    assert sorted(removed) == sorted(first.registered)
    assert not _probe.has_kernel("aten::mv", "AutocastXLA")
    assert _probe.has_kernel("aten::mm", "AutocastXLA"), "torch_xla's own kernels must survive"


def test_op_spec_for_unknown_op_is_rejected_by_the_cpp_table() -> None:
    pytest.importorskip("ninja")
    cpp = _registration.registrar("cpp")
    with pytest.raises(RuntimeError, match="no compiled AutocastXLA kernel for 'aten::relu'"):
        cpp.register([OpSpec("aten::relu", CastPolicy.lower_precision_fp)])
