"""A small training job as ``torchrun`` launches it: DDP or FSDP2, compiled whole or block by block.

The two ways people compile a distributed model: DDP with the model compiled whole
(``torch.compile(DDP(model))``, as torch's DDP tutorial has it) and FSDP2 with each block compiled
(``block.compile()``) and then sharded (``fully_shard``, as torchtitan does). gloo on the CPU, NCCL
on GPUs. Options that plant what goes wrong in real jobs:

* ``--uneven-rank R``: from step 3 on, rank R alone takes a branch on a host read (``.item()``)
  inside the compiled forward, so it recompiles and breaks where the others do not, and they wait;
* ``--die R:S``: rank R is killed (SIGKILL, as the OOM killer does) at step S; torchrun ends the rest;
* ``--slow R:S``: rank R stalls ``--slow-seconds`` before step S while the others wait for it
  (``--mean-loss``: every rank all-reduces its loss each step, as a training log does).

``--out PREFIX`` writes each rank's own clock (start, after imports, after the process group, each
step, end), its last loss and a digest of its final parameters to ``PREFIX.rank<R>.json``::

    torchrun --standalone --nproc_per_node=2 -m xlabridge.examples.torchrun_train --uneven-rank 1
    xlabridge report -- torchrun --standalone --nproc_per_node=2 -m xlabridge.examples.torchrun_train --uneven-rank 1
"""
import argparse, hashlib, json, os, signal, time
t_start = time.time()
import torch
import torch.distributed as dist
import torch.nn as nn

class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)
    def forward(self, x):
        return x + self.down(torch.relu(self.up(self.norm(x))))

class Model(nn.Module):
    def __init__(self, d=64, layers=2):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(layers))
        self.head = nn.Linear(d, 8)
        self.check = False
    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        if self.check and x.norm().item() > 0:  # a host read, on one rank only
            x = x * 1.0
        return self.head(x)

p = argparse.ArgumentParser()
p.add_argument("--mode", choices=["ddp", "fsdp2"], default="ddp")
p.add_argument("--backend", default="inductor")
p.add_argument("--compile", choices=["model", "blocks"], default="model")
p.add_argument("--steps", type=int, default=6)
p.add_argument("--uneven-rank", type=int, default=None)
p.add_argument("--die", default=None)
p.add_argument("--slow", default=None)
p.add_argument("--slow-seconds", type=float, default=6.0)
p.add_argument("--mean-loss", action="store_true")
p.add_argument("--out", default=None)
p.add_argument("--width", type=int, default=64,
               help="the model's width; at 64 all its parameters fit DDP's first bucket (1 MiB), so DDPOptimizer "
                    "compiles it as one graph; at 256 each block holds 2 MiB and the buckets split it")
p.add_argument("--bucket-cap-mb", type=float, default=None,
               help="DDP's bucket_cap_mb (DDP's own default where not given): where DDPOptimizer splits the graph")
a = p.parse_args()


def at(spec):
    """``R:S`` as (rank, step), or (-1, -1)."""
    return tuple(int(v) for v in spec.split(":")) if spec else (-1, -1)
t_imported = time.time()
device = "cuda" if torch.cuda.is_available() else "cpu"
dist.init_process_group("nccl" if device == "cuda" else "gloo")
rank = dist.get_rank()
if device == "cuda":
    torch.cuda.set_device(rank)
t_pg = time.time()
torch.manual_seed(0)
model = Model(d=a.width).to(device)
if a.compile == "blocks":
    for block in model.blocks:
        block.compile(backend=a.backend)
if a.mode == "ddp":
    from torch.nn.parallel import DistributedDataParallel as DDP
    wrapped = DDP(model) if a.bucket_cap_mb is None else DDP(model, bucket_cap_mb=a.bucket_cap_mb)
else:
    from torch.distributed.fsdp import fully_shard
    for block in model.blocks:
        fully_shard(block)
    wrapped = fully_shard(model)
step_fn = torch.compile(wrapped, backend=a.backend) if a.compile == "model" else wrapped
opt = torch.optim.SGD(model.parameters(), lr=0.01)
g = torch.Generator().manual_seed(rank)
steps = []
for i in range(a.steps):
    t0 = time.time()
    model.check = a.uneven_rank == rank and i >= 3
    if at(a.die) == (rank, i):
        os.kill(os.getpid(), signal.SIGKILL)
    if at(a.slow) == (rank, i):
        time.sleep(a.slow_seconds)
    x = torch.randn(16, a.width, generator=g).to(device)
    y = torch.randn(16, 8, generator=g).to(device)
    loss = ((step_fn(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    if a.mean_loss:
        mean = loss.detach().clone()
        dist.all_reduce(mean)
    lv = loss.item()
    steps.append(time.time() - t0)
full = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu() for k, v in model.state_dict().items() if torch.is_tensor(v)}
digest = hashlib.sha256(b"".join(full[k].numpy().tobytes() for k in sorted(full))).hexdigest()
t_end = time.time()
if a.out:
    with open(f"{a.out}.rank{rank}.json", "w") as f:
        json.dump({"rank": rank, "start": t_start, "imported": t_imported, "pg": t_pg, "steps": steps, "end": t_end,
                   "loss": lv, "params": digest}, f)
print(f"rank {rank}: loss {lv:.6f} params {digest[:16]}")
dist.destroy_process_group()
