"""One rank of a multi-process data-parallel training run on PJRT CPU, for the divergence test.

Each process has its own XLA device (``PJRT_DEVICE=CPU``, one device) and its own rank
(``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``); gradients are averaged across
processes through torch.distributed's gloo backend on CPU tensors (torch_xla 2.9 has no
cross-process collectives on PJRT CPU: ``torch_xla.launch`` there runs one thread per device in
a single process, and its ``xm.all_reduce`` aborts in XLA's rendezvous).

``python -m tests.pod._rank_worker STEPS DIVERGE_AT``: at step ``DIVERGE_AT`` rank 1 adds a
weight penalty to its loss (a branch the other rank does not take); ``-1`` never. Prints the
losses as JSON.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist


def main() -> None:
    import torch_xla

    steps, diverge_at = int(sys.argv[1]), int(sys.argv[2])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch_xla.device()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(rank)
    losses = []
    for step in range(steps):
        optimizer.zero_grad()
        inputs = torch.randn(4, 8, generator=generator).to(device)
        loss = model(inputs).pow(2).mean()
        if rank == 1 and step == diverge_at:
            loss = loss + 1e-3 * model.weight.abs().sum()  # the branch only rank 1 takes
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters()]).cpu()
        dist.all_reduce(grads)
        offset = 0
        for parameter in model.parameters():
            count = parameter.numel()
            parameter.grad = (grads[offset : offset + count] / world).view_as(parameter).to(device)
            offset += count
        optimizer.step()
        torch_xla.sync()
        losses.append(loss.item())
    dist.destroy_process_group()
    print(json.dumps({"rank": rank, "losses": losses}))


if __name__ == "__main__":
    main()
