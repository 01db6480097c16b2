"""TorchTPU's split compiler, run without a TPU: a collective gets a partition of its own."""

import pytest
import torch

from tests.torchtpu.conftest import REASON
from xlabridge import _optional

pytest.importorskip("torch_tpu", reason=REASON)
if not _optional.is_available("torchax"):
    pytest.skip(REASON, allow_module_level=True)

from xlabridge import torchtpu


@pytest.fixture
def fake_world():
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    yield dist.group.WORLD
    dist.destroy_process_group()


def test_split_at_all_reduce_with_user_line(fake_world):
    import torch.distributed._functional_collectives as funcol

    def step(x):
        y = torch.tanh(x) * 2
        y = funcol.all_reduce(y, "sum", fake_world)  # the line the split names
        return y + 1

    line = f"{__file__}:{step.__code__.co_firstlineno + 2}"
    capture = torchtpu.GraphCapture()
    torch.compile(step, backend=capture)(torch.randn(8, 8))
    graphs = capture.graphs
    assert [g.module_name for g in graphs] == [f"graph0_split0_fwd_submod_{i}" for i in range(3)]
    assert [bool(g.collective_splits) for g in graphs] == [False, True, False]
    (split,) = graphs[1].collective_splits
    assert split.op == "_c10d_functional.all_reduce" and split.user_line == line
    rows = torchtpu.compile_graphs(graphs, "v6e:2x2")
    # the partitions around it compile; the lone collective has no mesh to lower onto here
    assert rows[0].result.kernel_count > 0 and rows[2].result.kernel_count > 0
    assert rows[1].result is None and "lowering failed" in rows[1].error


def test_backend_tpu_captured_in_unchanged_program():
    """A program written for TorchTPU (backend="tpu") runs here inside capture_tpu_backend, with the
    results of eager CPU; outside it, "tpu" is TorchTPU's backend again."""
    from torch._dynamo.backends import registry
    from torch_tpu._internal.compile._backend import TpuBackend

    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
    x = torch.randn(4, 16)
    with torchtpu.capture_tpu_backend() as capture:
        out = torch.compile(model, backend="tpu")(x)
    torch.testing.assert_close(out, model(x))
    assert [g.name for g in capture.graphs] == ["graph0_forward_0"]
    assert capture.graphs[0].compile_id == "0/0"  # Dynamo's: first frame, first compilation
    assert isinstance(registry.lookup_backend("tpu"), TpuBackend)
