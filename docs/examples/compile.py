"""``xlabridge.compile``: the xlabridge backend, the forward-only path, and errors that say what to do."""

import tempfile

import torch
import torch_xla
from torch import nn

import xlabridge
from xlabridge.backend import cache

device = torch_xla.device()
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)

# Same as torch.compile(model, backend="xlabridge"), with errors that name the bad argument.
# The cache directory must be set before torch_xla's first computation.
compiled = xlabridge.compile(model, cache_dir=tempfile.mkdtemp())
with torch.no_grad():  # inference: each graph is compiled forward-only, without AOTAutograd
    out = compiled(torch.randn(8, 16, device=device))
print(out.shape, out.device)

try:
    compiled(torch.randn(8, 16))  # a CPU tensor into a model on the XLA device
except xlabridge.DeviceMismatchError as error:
    print(f"{type(error).__name__}: {error}")

print("cache:", cache.status()["state"])  # "unsupported" on PJRT CPU, with the reason
