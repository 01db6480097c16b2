"""A single-process inductor training loop with its own clock, for the time split's tests.

The compile-worker pool is started first, as torch's registered ``inductor`` backend does
(``maybe_warm_pool``, where Triton is installed): with warm caches it compiles nothing, and its
shutdown is the process's exit work. ``argv[1]``: where to write the clock (start, end).
"""
import json, sys, time
t_start = time.time()
import torch
import torch.nn as nn
from torch._inductor import async_compile

warm = getattr(async_compile, "maybe_warm_pool", None)
if warm is not None:
    warm()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 8))
step = torch.compile(model, backend="inductor")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(20):
    x, y = torch.randn(16, 64), torch.randn(16, 8)
    loss = ((step(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    loss.item()
with open(sys.argv[1], "w") as out:
    json.dump({"start": t_start, "end": time.time(), "pool": warm is not None}, out)
