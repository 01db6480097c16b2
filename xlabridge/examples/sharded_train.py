"""A small sharded training script with one avoidable all-gather, for the pod report.

Tensor parallelism on a 2-D mesh (``data`` × ``model``), Megatron style: each block's ``up``
projection is column-parallel (its weight sharded over ``model`` on the output dimension) and
its ``down`` projection row-parallel (sharded over ``model`` on the input dimension it
contracts), so a block needs one all-reduce of its output and nothing else; the batch is
sharded over ``data``. The trap: the last block's ``down`` weight is sharded on the wrong
dimension (``("model", None)``: a copy-paste of the ``up`` line), so XLA's SPMD partitioner
must gather the whole hidden activation on every device, forward and backward, every step.
``--fixed`` shards it as it should be and the all-gathers go away.

Runs in seconds on the CPU: ``PJRT_DEVICE=CPU`` with ``--devices`` host devices (4 by default;
``CPU_NUM_DEVICES`` is set before torch_xla starts unless already set)::

    python -m xlabridge.examples.sharded_train [--devices 4] [--steps 5] [--fixed] [--compile]

Lazy tracing with ``torch_xla.sync()`` per step by default; ``--compile`` runs the forward and
loss through ``torch.compile(backend="openxla")``.
"""

from __future__ import annotations

import argparse
import os

import torch
from torch import nn


class Block(nn.Module):
    """A residual MLP block: ``x + down(relu(up(x)))``."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.up = nn.Linear(width, hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(x)))


class ShardedMLP(nn.Module):
    def __init__(self, width: int = 64, hidden: int = 256, depth: int = 2) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(width, hidden) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def make_mesh(devices: int):
    """A ``(data, model)`` mesh over every device: two-way tensor parallelism."""
    import numpy as np
    import torch_xla.distributed.spmd as xs

    if devices < 2 or devices % 2:
        raise ValueError(f"the mesh needs an even number of devices (data x 2), got {devices}")
    return xs.Mesh(np.arange(devices), (devices // 2, 2), ("data", "model"))


def shard(model: ShardedMLP, mesh, *, fixed: bool) -> None:
    """Megatron-style shardings; unless ``fixed``, the last ``down`` weight on the wrong dimension."""
    import torch_xla.distributed.spmd as xs

    for index, block in enumerate(model.blocks):
        xs.mark_sharding(block.up.weight, mesh, ("model", None))
        planted = not fixed and index == len(model.blocks) - 1
        xs.mark_sharding(block.down.weight, mesh, ("model", None) if planted else (None, "model"))


def batch(device: torch.device, mesh, *, size: int = 16, width: int = 64, seed: int = 0):
    """A seeded regression batch, sharded over ``data``."""
    import torch_xla.distributed.spmd as xs

    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(size, width, generator=generator).to(device)
    targets = torch.randn(size, width, generator=generator).to(device)
    xs.mark_sharding(inputs, mesh, ("data", None))
    xs.mark_sharding(targets, mesh, ("data", None))
    return inputs, targets


def train(steps: int, *, fixed: bool, compile: bool) -> list[float]:
    """Train ``ShardedMLP`` for ``steps`` steps on a mesh of every device; returns the losses."""
    import torch_xla
    import torch_xla.runtime as xr

    xr.use_spmd()
    mesh = make_mesh(xr.global_runtime_device_count())
    device = torch_xla.device()
    torch.manual_seed(0)
    model = ShardedMLP().to(device)
    shard(model, mesh, fixed=fixed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, targets = batch(device, mesh)

    def loss_of(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(model(x), y)

    step_loss = torch.compile(loss_of, backend="openxla") if compile else loss_of
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = step_loss(inputs, targets)
        loss.backward()
        optimizer.step()
        torch_xla.sync()
        losses.append(loss)
    return [loss.item() for loss in losses]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=4, help="host devices of a CPU run (CPU_NUM_DEVICES)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--fixed", action="store_true", help="shard the last down projection correctly")
    parser.add_argument("--compile", action="store_true", help='forward and loss through torch.compile(backend="openxla")')
    args = parser.parse_args(argv)
    # torch_xla reads both once, when it starts: a CPU run gets the mesh's device count.
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    if os.environ["PJRT_DEVICE"] == "CPU":
        os.environ.setdefault("CPU_NUM_DEVICES", str(args.devices))
    losses = train(args.steps, fixed=args.fixed, compile=args.compile)
    print("losses:", " ".join(f"{loss:.6f}" for loss in losses))


if __name__ == "__main__":
    main()
