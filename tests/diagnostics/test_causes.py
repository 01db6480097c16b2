"""The cause table: Dynamo's own break texts and aten op names land in the right rows."""

import pytest

from xlabridge.diagnostics._build.causes import (
    DYNAMO_CAUSES,
    HLO_CAUSES,
    RECOMPILE_CAUSES,
    classify_dynamo_break,
    classify_hlo_break,
    classify_recompile,
)


@pytest.mark.parametrize(
    ("reason", "category"),
    [
        ("generic_jump TensorVariable()", "data-dependent-branch"),
        ("Data-dependent branching\n  Explanation: ...", "data-dependent-branch"),
        ("Unsupported Tensor.item() call with capture_scalar_outputs=False", "tensor-item"),
        ("Failed to trace builtin operator\n  Explanation: ... builtin operator `print` with ...", "print-or-logging"),
        ("copy.deepcopy()\n  Explanation: Dynamo does not support copy.deepcopy()", "deepcopy"),
        ("Dynamic shape operator\n  Explanation: Operator `aten.nonzero.default`'s output shape", "dynamic-shape-op"),
        ("Failed to trace builtin operator\n  builtin operator `open`", "unsupported-builtin"),
        ("something Dynamo never said before", "other"),
    ],
)
def test_dynamo_reasons_are_classified(reason, category):
    assert classify_dynamo_break(reason).category == category


@pytest.mark.parametrize(
    ("op", "fell_back", "category", "hint"),
    [
        ("aten::exp2", True, "cpu-fallback", "torch.pow(2.0, x)"),
        ("aten::nonzero", True, "cpu-fallback", "nonzero_static"),
        ("aten::_local_scalar_dense", True, "host-transfer", "torch_xla.sync()"),
        ("aten::some_new_op", True, "cpu-fallback", "no XLA lowering"),
        ("aten::mul", False, "host-tensor", "not on the XLA device"),
    ],
)
def test_hlo_ops_are_classified(op, fell_back, category, hint):
    cause = classify_hlo_break(op, fell_back=fell_back)
    assert cause.category == category
    assert hint in cause.suggestion


@pytest.mark.parametrize(
    ("reason", "category"),
    [
        ("0/0: ", "another-backend"),
        ("3/1:", "another-backend"),
        ("0/0: BACKEND_MATCH failure: torch.compile detected different backend callables.", "another-backend"),
        ("0/0: tensor 'x' size mismatch at index 0. expected 4, actual 8", "shape-change"),
        ("1/0: ___stack0 == 4.240228176116943", "value-specialisation"),
        ("0/0: tensor 'x' requires_grad mismatch. expected requires_grad=1", "tensor-property"),
        ("0/0: GLOBAL_STATE changed: grad_mode ", "global-state"),
        ("Unable to find recompilation reasons", "other"),
    ],
)
def test_recompile_reasons_are_classified(reason, category):
    assert classify_recompile(reason).category == category


@pytest.mark.parametrize("table", [DYNAMO_CAUSES, HLO_CAUSES, RECOMPILE_CAUSES])
def test_every_table_ends_in_a_catch_all_and_every_row_has_a_fix(table):
    assert table[-1].pattern == "."
    assert all(cause.suggestion.strip() and cause.category for cause in table)
