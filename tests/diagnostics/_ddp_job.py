"""A DDP training job as ``torchrun`` launches it (gloo on the CPU), compiled whole as torch's DDP guide
has it (``torch.compile(DDP(model))``), for the tests of breaks inside torch's own code and of
DDPOptimizer's splits: DDP's forward breaks (its C++ logger, the context manager Dynamo skips), and
DDPOptimizer splits the model's graph at DDP's buckets (``--bucket-cap-mb``; the first bucket is
torch's default, 1 MiB). Each layer's parameters are just over 1 MiB, so each fills a bucket."""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Model(nn.Module):
    def __init__(self, d=512, layers=3):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


p = argparse.ArgumentParser()
p.add_argument("--backend", default="aot_eager")
p.add_argument("--bucket-cap-mb", type=float, default=1.0)
a = p.parse_args()
dist.init_process_group("gloo")
torch.manual_seed(0)
model = Model()
step_fn = torch.compile(DDP(model, bucket_cap_mb=a.bucket_cap_mb), backend=a.backend)  # the user's line
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(2):
    loss = step_fn(torch.randn(8, 512)).square().mean()  # CALL
    loss.backward()
    opt.step()
    opt.zero_grad()
print(f"rank {dist.get_rank()}: loss {loss.item():.6f}")
dist.destroy_process_group()
