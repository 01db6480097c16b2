"""The TPU view of TorchTPU graphs: captured as backend="tpu" would compile them, lowered by
torchax + jax.export, compiled by libtpu compile-only; checked against torch eager (numerics of
the lowering) and against an independent libtpu compile of the same StableHLO (kernels, HBM)."""

import dataclasses

import numpy as np
import pytest
import torch

from tests.torchtpu.conftest import REASON
from xlabridge import _optional

pytest.importorskip("torch_tpu", reason=REASON)
if not _optional.is_available("torchax"):  # not imported here: xlabridge.torchtpu imports it its own way
    pytest.skip(REASON, allow_module_level=True)

from tests.torchtpu import _reference
from tests.tpu import _hlo_proto
from xlabridge import torchtpu
from xlabridge.torchtpu._lower import export_graph

TARGETS = {"v5e:2x2": "v5e:2x2", "v6e:2x2": "v6e:2x2", "v7:2x2x1": "tpu7x:2x2x1"}


def _mlp_graphs():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10))
    capture = torchtpu.GraphCapture()
    x = torch.randn(32, 64)
    torch.compile(model, backend=capture)(x).sum().backward()
    return capture.graphs


@pytest.fixture(scope="module")
def mlp_graphs():
    return _mlp_graphs()


@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    from xlabridge import tpu

    with tpu.TpuCompiler("v6e:2x2", graph_dir=tmp_path_factory.mktemp("tpu-graphs")) as session:
        yield session


def test_capture_forward_and_backward_as_torchtpu_compiles_them(mlp_graphs):
    assert [(g.kind, g.partition) for g in mlp_graphs] == [("forward", 0), ("backward", 0)]
    forward = mlp_graphs[0]
    assert forward.module_name == "graph0_split0_fwd_submod_0"  # TorchTPU's name for its MLIR module
    # AOTAutograd lifts the 4 parameters as inputs beside x
    assert len(forward.input_specs) == 5 and ((32, 64), torch.float32) in forward.input_specs
    assert forward.collective_splits == []  # no collectives: one partition
    assert sum(forward.op_counts.values()) > 0


def _layer_norm_attention_graphs():
    """LayerNorm (its backward lowered through torch's decomposition) and attention (math form)."""
    torch.manual_seed(0)
    norm, proj = torch.nn.LayerNorm(32), torch.nn.Linear(32, 96)

    def block(x):
        q, k, v = proj(norm(x)).view(2, 8, 3, 4, 8).permute(2, 0, 3, 1, 4)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    capture = torchtpu.GraphCapture()
    torch.compile(block, backend=capture)(torch.randn(2, 8, 32)).sum().backward()
    return capture.graphs


@pytest.mark.parametrize("build", [_mlp_graphs, _layer_norm_attention_graphs], ids=["mlp", "layernorm-attention"])
def test_lowering_matches_torch_eager(build):
    """The torchax lowering, run on CPU by JAX, computes what the ATen graph computes in torch."""
    rng = np.random.default_rng(0)
    graphs = build()
    assert [g.kind for g in graphs] == ["forward", "backward"]
    for graph in graphs:
        inputs = [rng.standard_normal(shape).astype(np.float32) for shape, _ in graph.input_specs]
        expected = [t for t in graph.graph_module(*[torch.from_numpy(a) for a in inputs]) if t is not None]
        got = export_graph(graph, ("cpu",)).call(*inputs)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(np.asarray(g), e.detach().numpy(), rtol=1e-4, atol=1e-4)  # f32 sums in another order


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_tpu_view_equals_independent_libtpu_compile(mlp_graphs, compiler, tmp_path, target):
    rows = torchtpu.compile_graphs(mlp_graphs, target, compiler=compiler)
    assert [r.error for r in rows] == [None, None]
    reference = _reference.run([{"topology": TARGETS[target], "text": r.stablehlo} for r in rows], tmp_path)
    for row, ref in zip(rows, reference):
        result = row.result
        assert result.kernel_count == len(_hlo_proto.kernels(ref["proto"])) > 0
        assert dataclasses.asdict(result.memory) | {"capacity_bytes": 0} == ref["memory"] | {"capacity_bytes": 0}
        assert result.device_kind == ref["device_kind"] and result.fits
        assert result.compile_seconds > 0 and "not run" in result.label
    if target == "v7:2x2x1":  # one device per TensorCore, two per chip: half a chip's 192 GiB each
        assert rows[0].result.memory.capacity_bytes == 96 * 2**30


def test_graph_too_large_does_not_fit(compiler):
    """Two 9 GiB f32 matrices and their 9 GiB product on a 16 GiB v5e chip: XLA's own out-of-memory
    verdict (captured on meta tensors: nothing is allocated)."""
    capture = torchtpu.GraphCapture()

    def f(a, b):
        return a @ b

    with torch.device("meta"):
        a, b = torch.empty(49152, 49152), torch.empty(49152, 49152)  # 9 GiB each, f32
    torch.compile(f, backend=capture)(a, b)
    (row,) = torchtpu.compile_graphs(capture.graphs, "v5e:2x2", compiler=compiler)
    assert row.error is None and row.result is not None
    assert not row.result.fits and "memory" in (row.result.out_of_memory or "").lower()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "llama"])
@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_transformers_equal_independent_libtpu_compile(compiler, tmp_path, name, training):
    """Every graph of an inference or training step (forward and backward graphs) compiles for
    v6e, with the kernels and HBM of an independent compile; its ops carry transformers' lines."""
    from tests import models

    model, make_inputs = getattr(models, name)()
    inputs = make_inputs(torch.device("cpu"))
    capture = torchtpu.GraphCapture()
    if training:
        models.loss_of(torch.compile(model, backend=capture)(**inputs)).backward()
    else:
        model.eval()
        with torch.no_grad():
            torch.compile(model, backend=capture)(**models.without_labels(model, inputs))
    kinds = {g.kind for g in capture.graphs}
    assert kinds == ({"forward", "backward"} if training else {"forward"})
    rows = torchtpu.compile_graphs(capture.graphs, "v6e:2x2", compiler=compiler)
    assert [r.error for r in rows] == [None] * len(rows)
    reference = _reference.run([{"topology": "v6e:2x2", "text": r.stablehlo} for r in rows], tmp_path)
    for row, ref in zip(rows, reference):
        assert row.result.kernel_count == len(_hlo_proto.kernels(ref["proto"])) > 0
        assert dataclasses.asdict(row.result.memory) | {"capacity_bytes": 0} == ref["memory"] | {"capacity_bytes": 0}
        assert row.result.fits
    lines = [line for g in capture.graphs for line in g.user_lines.values()]
    assert any(f"transformers/models/{name}/modeling_{name}.py" in line for line in lines)
