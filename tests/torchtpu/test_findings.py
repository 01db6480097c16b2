"""TPU findings of TorchTPU's graphs (``backend="tpu"``, captured as TorchTPU compiles them) and of an
inductor run's graphs (the FX route: traced after the run, lowered by torchax), on libtpu 0.0.52.

A transpose-heavy f32 attention under TorchTPU: its layout copies and f32 matmuls are checked
against libtpu's own compile of the same StableHLO (``tests/torchtpu/_reference``), read from its
HloModuleProto (``tests/tpu/_hlo_proto``). An f32 language-model head with GPT-2's vocabulary and
a batch of 6 under inductor: the report's findings name both padded dimensions at the user's line,
compiled, not run.
"""

from __future__ import annotations

import inspect

import pytest

from tests.torchtpu.conftest import REASON
from xlabridge import _optional

pytest.importorskip("torch_tpu", reason=REASON)
if not _optional.is_available("torchax"):
    pytest.skip(REASON, allow_module_level=True)

import torch

from tests.torchtpu import _reference
from tests.tpu import _hlo_proto
from xlabridge import torchtpu, tpu
from xlabridge.diagnostics import diagnose

TOPOLOGY = "v5e:2x2"


def _attention(x: torch.Tensor, projection: torch.Tensor) -> torch.Tensor:
    q, k, v = (t.view(2, 128, 4, 64).transpose(1, 2) for t in (x * 0.5, x * 0.25, x))
    scores = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
    return (scores @ v).transpose(1, 2).reshape(2, 128, 256) @ projection


def _head(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(hidden @ weight, dim=-1)


@pytest.fixture(scope="module")
def attention(tmp_path_factory):
    """The attention's TorchTPU graph compiled by xlabridge, and libtpu's own compile of its StableHLO."""
    capture = torchtpu.GraphCapture()
    with torch.no_grad():
        torch.compile(_attention, backend=capture)(torch.randn(2, 128, 256), torch.randn(256, 256))
    (graph,) = capture.graphs
    (row,) = torchtpu.compile_graphs([graph], TOPOLOGY)
    (reference,) = _reference.run([{"topology": TOPOLOGY, "text": row.stablehlo}], tmp_path_factory.mktemp("ref"))
    return row.result, _hlo_proto.instructions(reference["proto"])


def test_torchtpu_attention_copies_and_f32_matmuls_equal_libtpu_s_program(attention):
    result, computations = attention
    copies = _hlo_proto.layout_copies(computations["ENTRY"])
    found = {f.kind: f for f in tpu.findings(result)}
    if copies:
        assert (found[tpu.TpuFindingKind.COPY].count, found[tpu.TpuFindingKind.COPY].bytes) == (len(copies), sum(copies))
    else:
        assert tpu.TpuFindingKind.COPY not in found
    everything = {row["name"]: row for rows in computations.values() for row in rows}
    f32 = [row for row in everything.values() if row["opcode"] in ("convolution", "dot") and _hlo_proto.F32 in (
        row["shape"]["element_type"], *(everything[o]["shape"]["element_type"] for o in row["operands"]))]
    # (libtpu 0.0.52 runs the attention itself as a Mosaic kernel of its own: the projection is left)
    assert found[tpu.TpuFindingKind.PRECISION].count == len(f32) > 0
    assert "compiled for TPU v5e" in result.label and "not run" in result.label


def test_an_inductor_run_s_padded_f32_head_has_its_findings_at_the_user_s_line():
    torch.manual_seed(0)
    hidden, weight = torch.randn(6, 128), torch.randn(128, 50257) / 128
    with diagnose(tpu=TOPOLOGY) as report, torch.no_grad():
        torch.compile(_head, backend="inductor")(hidden, weight)
    (row,) = [g for g in report.tpu.graphs if g.route == "torchax"]
    assert row.backend == "inductor" and row.compiled
    padded = {(f["detail"]["size"], f["detail"]["padded"], f["detail"]["tile"]) for f in row.findings
              if f["kind"] == "tpu-padding"}
    assert {size for size, _, _ in padded} >= {50257, 6}
    assert all(p % tile == 0 and p - tile < size < p for size, p, tile in padded)
    found = [f for f in report.findings if f.compiled_for]
    assert {"tpu-padding", "tpu-f32-matmul"} <= {f.kind for f in found}
    line = inspect.getsourcelines(_head)[1] + 1
    assert all(f.filename == __file__ and f.lineno == line for f in found)
    assert all("not run" in f.compiled_for and f.cost_seconds is None for f in found)
