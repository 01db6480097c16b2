"""Graphs with dynamic shapes through TorchTPU (its ``DynamicCompiler``), without a TPU.

After a shape change Dynamo recompiles with the changed dimension symbolic; TorchTPU then
compiles the graph once per bucket of the symbol's values, each program at the bucket's bound
with its dynamic inputs padded in the graph (``tpu._pad_real_to_static``). Checked against
outside references: the program of a bucket, lowered for the CPU and run on an input padded
with garbage, against NumPy on the real rows; the stand-in's results against eager PyTorch; each
bucket program's TPU row against libtpu's own compile of the same StableHLO.
"""

from __future__ import annotations

import re
import textwrap

import numpy as np
import pytest

from tests.torchtpu.conftest import REASON
from xlabridge import _optional

pytest.importorskip("torch_tpu", reason=REASON)
if not _optional.is_available("torchax"):
    pytest.skip(REASON, allow_module_level=True)

import torch

from tests.torchtpu._cli import check_tpu_rows_against_libtpu, report
from xlabridge.torchtpu import GraphCapture
from xlabridge.torchtpu._lower import export_graph


def _reduce_over_rows(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w).sum(0)  # padded rows would each add up to +-1 per column: a leak shows


def test_a_bucket_program_computes_the_real_rows_of_a_padded_input(tmp_path):
    """The bucket program TorchTPU compiles for a dynamic batch, lowered here (torchax, for the
    CPU), run on the real rows followed by garbage up to the bound, equals NumPy on the real rows;
    the stand-in's results equal eager PyTorch's."""
    torch.manual_seed(0)
    w = torch.randn(64, 32)
    capture = GraphCapture()
    compiled = torch.compile(_reduce_over_rows, backend=capture)
    for n in (8, 16, 24):  # 8 compiles static; 16 recompiles with the batch dynamic; 24 reuses it
        x = torch.randn(n, 64)
        torch.testing.assert_close(compiled(x, w), _reduce_over_rows(x, w), rtol=0, atol=0)
    static, dynamic = [g for g in capture.graphs if not g.bounds], [g for g in capture.graphs if g.bounds]
    assert len(static) == 1 and len(dynamic) == 1, [g.bounds for g in capture.graphs]
    (graph,) = dynamic
    low, high = map(int, re.fullmatch(r"\w+ in \[(\d+), (\d+)\]", graph.bounds).groups())
    assert low <= 16 <= high
    assert any(n.op == "call_function" and "_pad_real_to_static" in str(n.target) for n in graph.graph_module.graph.nodes)
    # the program's inputs, told apart by spec: the symbol's value (a constant of the program),
    # the real size (a 0-d int32 tensor), x at the bound, w
    specs = [s for s in graph.input_specs if not isinstance(s, int)]
    assert [s for s in graph.input_specs if isinstance(s, int)] == [high]
    assert sorted(specs, key=repr) == sorted([((), torch.int32), ((high, 64), torch.float32),
                                              ((64, 32), torch.float32)], key=repr)
    exported = export_graph(graph, ("cpu",))
    rng = np.random.default_rng(1)
    for n in (5, 16, high):
        x = rng.standard_normal((n, 64), dtype=np.float32)
        padded = np.concatenate([x, 1e3 * rng.standard_normal((high - n, 64), dtype=np.float32)])
        values = {((), torch.int32): np.array(n, np.int32), ((high, 64), torch.float32): padded,
                  ((64, 32), torch.float32): w.numpy()}
        (out,) = exported.call(*[values[s] for s in specs])
        np.testing.assert_allclose(np.asarray(out), np.tanh(x @ w.numpy()).sum(0), rtol=1e-5, atol=1e-4)


DYNAMIC_STEPS = textwrap.dedent("""
    import torch
    import torch_tpu  # noqa: F401

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))
    step = torch.compile(model, backend="tpu")
    with torch.no_grad():
        for n in (8, 16, 24):  # the second shape recompiles with the batch dynamic
            x = torch.randn(n, 64)
            torch.testing.assert_close(step(x), model(x), rtol=0, atol=0)
    for n in (20, 40):  # training: a dynamic forward and backward graph
        x = torch.randn(n, 64)
        step(x).square().mean().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        model(x).square().mean().backward()
        for got, p in zip(grads, model.parameters()):
            torch.testing.assert_close(got, p.grad)
        model.zero_grad()
""")


def test_report_has_the_dynamic_graphs_their_buckets_and_tpu_rows(tmp_path):
    """Inference and training with a varying batch through ``backend="tpu"``: the dynamic forward
    and backward graphs are rows with their buckets and calls, and each bucket program has a TPU
    row equal to libtpu's own compile; the script's results equal eager PyTorch's (it checks)."""
    data, logs = report(tmp_path, "dynamic", DYNAMIC_STEPS)
    graphs = data["hlo"]["graphs"]
    dynamic = [g for g in graphs if g["buckets"]]
    assert sorted(g["role"] for g in dynamic) == ["backward", "forward", "forward"]
    assert [g["calls"] for g in graphs if not g["buckets"]] == [1]  # the first, static call
    assert all(g["calls"] == 2 and g["executions_per_call"] == 1 for g in dynamic)
    assert all(re.fullmatch(r"\w+ in \[\d+, \d+\]", b) for g in dynamic for b in g["buckets"])
    assert not [p for p in data["probes"] if p["state"] != "ok"]
    assert not [w for w in data["warnings"] if "torchtpu.compiler" in w]
    check_tpu_rows_against_libtpu(data, logs, tmp_path)


TWO_BUCKETS = textwrap.dedent("""
    import torch
    import torch_tpu  # noqa: F401

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))
    step = torch.compile(model, backend="tpu", options={"num_dynamic_buckets": 2})
    with torch.no_grad():
        for n in (8, 16, 200):  # 16 recompiles with the batch dynamic; 200 lies past the first bucket
            x = torch.randn(n, 64)
            torch.testing.assert_close(step(x), model(x), rtol=0, atol=0)
""")


def test_each_bucket_is_a_program_of_its_own(tmp_path):
    """``num_dynamic_buckets=2``: the dynamic graph names both buckets (consecutive bounds), a call
    runs one program, and each bucket's program has its own TPU row equal to libtpu's compile."""
    data, logs = report(tmp_path, "buckets", TWO_BUCKETS)
    (graph,) = [g for g in data["hlo"]["graphs"] if g["buckets"]]
    bounds = [tuple(map(int, re.fullmatch(r"\w+ in \[(\d+), (\d+)\]", b).groups())) for b in graph["buckets"]]
    assert len(bounds) == 2 and bounds[0][1] < bounds[1][1] and bounds[0][0] <= 16 <= bounds[0][1]
    assert graph["executions_per_call"] == 1 and graph["calls"] == 2 and len(graph["hashes"]) == 2
    check_tpu_rows_against_libtpu(data, logs, tmp_path)
