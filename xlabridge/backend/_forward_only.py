"""The forward-only path: Dynamo's graph traced to aten ops, without AOTAutograd.

torch_xla's bridge moves tensor constructors that build CPU tensors onto the XLA device
(``XLAConstructorMoverPass``), but only in graphs of aten ops whose nodes carry
``meta["val"]``: graphs from AOTAutograd. Handed Dynamo's own graph (``torch.arange`` then
``Tensor.to``), it leaves the constructor on the CPU and the graph pays a host-to-device
transfer per call and extracts fewer XLA graphs, which also draws the RNG seed a different
number of times than ``openxla`` does. So the forward-only path traces Dynamo's graph to
aten ops with ``make_fx`` under Dynamo's fake mode first: the same aten graph AOTAutograd
would make, minus its autograd and functionalization work (the saving this path exists
for), with each node's ``stack_trace`` kept for the diagnostics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx.traceback as fx_traceback
from torch.fx.experimental.proxy_tensor import make_fx

from xlabridge._upstream import torch as upstream_torch


def aten_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> torch.fx.GraphModule:
    """``gm`` traced to aten ops with fake copies of ``example_inputs``, nodes with ``meta["val"]``."""
    context = upstream_torch.tracing_context()
    fake_mode = context.fake_mode if context is not None else None
    if fake_mode is None:
        fake_mode = upstream_torch.fake_tensor_mode(allow_non_fake_inputs=True)
    fakes = [fake_mode.from_tensor(x, static_shapes=True) if isinstance(x, torch.Tensor) else x for x in example_inputs]

    def run(*args: Any) -> Any:
        return torch.fx.Interpreter(gm).run(*args)

    with fake_mode, fx_traceback.preserve_node_meta(), upstream_torch.python_dispatcher():
        traced = make_fx(run, record_module_stack=True)(*fakes)
    # The trace keeps what Dynamo's graph computed and did not use (the unused outputs of
    # multi-output ops, the views of a dropout that is off): the bridge would run each of
    # them at extraction. Dead code only: ops that mutate are kept, and no output changes.
    if traced.graph.eliminate_dead_code():
        traced.recompile()
    return traced
