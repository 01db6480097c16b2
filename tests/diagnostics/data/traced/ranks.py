"""Traced without xlabridge: two processes (gloo on this machine), each compiling its own step, one of
them breaking once more; torch names each log by its rank."""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank: int, port: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=2)

    def step(x):
        y = x.cos()
        if rank == 1:
            print("", end="")  # BREAK on rank 1 only
        return y + 1

    torch.compile(step, backend="eager")(torch.randn(4))
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(sys.argv[1],), nprocs=2)
