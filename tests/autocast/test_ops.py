"""The op list (``_ops.py``) against the dispatcher and torch's own autocast header."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from xlabridge.autocast import _build, _probe
from xlabridge.autocast._ops import (
    _CUDA_LIKE,
    ALL_SPECS,
    DEFAULT_SPECS,
    NOT_APPLICABLE,
    PARITY_SPECS,
    TPU_EXCEPTIONS,
    CastPolicy,
    OpSpec,
    Policy,
    torch_release,
)

CUDA_REGISTERED = sorted(_probe.registered_ops("AutocastCUDA"))


@pytest.mark.parametrize("spec", _CUDA_LIKE, ids=lambda s: s.name)
def test_declared_policy_is_the_one_autocast_cuda_applies(spec: OpSpec) -> None:
    assert _probe.probe(spec.name, "AutocastCUDA").policy is spec.cast.policy


def test_every_cuda_op_is_declared_or_excluded_with_a_reason() -> None:
    declared = {spec.name for spec in _CUDA_LIKE} | set(NOT_APPLICABLE)
    assert sorted(set(CUDA_REGISTERED) - declared) == []
    assert sorted(declared - set(CUDA_REGISTERED)) == []


def test_exceptions_are_kept_out_of_the_parity_list() -> None:
    names = {spec.name for spec in PARITY_SPECS}
    assert not names & set(TPU_EXCEPTIONS)
    assert not names & set(NOT_APPLICABLE)
    assert set(TPU_EXCEPTIONS) <= {spec.name for spec in _CUDA_LIKE}
    assert all(reason.strip() for reason in {**TPU_EXCEPTIONS, **NOT_APPLICABLE}.values())


def test_default_is_einsum_lower_precision_and_compiled() -> None:
    assert DEFAULT_SPECS == (OpSpec("aten::einsum", CastPolicy.lower_precision_fp),)
    assert set(DEFAULT_SPECS) <= set(ALL_SPECS)


def test_append_dtype_specs_name_an_overload_that_takes_dtype() -> None:
    for spec in ALL_SPECS:
        if spec.cast is CastPolicy.fp32_append_dtype:
            name, _, overload = spec.redispatch[len("aten::") :].partition(".")
            schema = getattr(getattr(torch.ops.aten, name), overload)._schema
            assert "dtype" in [a.name for a in schema.arguments], spec


def test_generated_header_lists_every_spec_once_with_existing_headers() -> None:
    header = _build.generate_header()
    lines = [line for line in header.splitlines() if "XB_OP(\"" in line]
    assert len(lines) == len(ALL_SPECS)
    assert '  XB_OP("aten::pow.Scalar", pow_Scalar, pow_Scalar, fp32) \\' in lines
    assert '  XB_OP("aten::norm.Scalar", norm_Scalar, norm_ScalarOpt_dtype, fp32_append_dtype) \\' in lines
    include_root = Path(torch.__file__).parent / "include"
    for line in header.splitlines():
        if line.startswith("#include"):
            assert (include_root / line.split("<")[1].rstrip(">")).is_file(), line


def test_build_key_changes_with_sources() -> None:
    assert _build.build_key("a", "h") != _build.build_key("b", "h")
    assert _build.build_key("a", "h") != _build.build_key("a", "h2")
    assert _build.build_key("a", "h") == _build.build_key("a", "h")


def test_torch_release_reads_major_and_minor() -> None:
    assert torch_release("2.9.0+cu128") == (2, 9)
    assert torch_release("2.10.0a0+git1234abc") == (2, 10)
    assert torch_release(torch.__version__) == tuple(int(p) for p in torch.__version__.split(".")[:2])


def test_op_spec_rejects_names_outside_aten() -> None:
    with pytest.raises(ValueError, match="'name'.*aten op"):
        OpSpec("mv", CastPolicy.lower_precision_fp)


def test_probe_rejects_unknown_keys() -> None:
    with pytest.raises(ValueError, match="'key' must be one of"):
        _probe.probe("aten::mm", "AutocastTPU")


@pytest.mark.parametrize(
    ("op", "call"),
    [
        ("aten::mm", lambda a, b: a @ b),
        ("aten::conv1d", lambda a, b: torch.nn.functional.conv1d(a.view(1, 4, 4), b.view(2, 4, 2))),
        ("aten::mse_loss", lambda a, b: torch.nn.functional.mse_loss(a, b)),
        ("aten::cat", lambda a, b: torch.cat([a, b])),
        ("aten::exp", lambda a: torch.exp(a)),
        ("aten::log_softmax.int", lambda a: torch.log_softmax(a, 1)),
    ],
)
def test_probe_agrees_with_running_the_op_under_cpu_autocast(op, call) -> None:
    """Real CPU autocast is the independent reference for what the probe reads off AutocastCPU."""
    inputs = [torch.randn(4, 4) for _ in range(call.__code__.co_argcount)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        full = call(*inputs).dtype
        low = call(*[t.bfloat16() for t in inputs]).dtype
        mixed = call(inputs[0], *[t.bfloat16() for t in inputs[1:]]).dtype if len(inputs) > 1 else None
    if full == torch.bfloat16:
        observed = Policy.LOWER_PRECISION
    elif low == torch.float32:
        observed = Policy.FP32
    elif mixed == torch.float32:
        observed = Policy.PROMOTE
    else:
        observed = Policy.NONE
    assert _probe.probe(op, "AutocastCPU").policy is observed


def test_extension_is_built_once_from_the_python_op_list() -> None:
    pytest.importorskip("ninja")
    path = Path(_build.load_extension())
    assert _build.load_extension() == str(path)
    assert path.parent.parent == _build.cache_root()
    assert (path.parent / _build.HEADER_NAME).read_text() == _build.generate_header()
    assert list(torch.ops.xlabridge_autocast.compiled_ops()) == [spec.name for spec in ALL_SPECS]
