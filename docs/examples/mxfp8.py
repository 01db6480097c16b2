"""MXFP8: cast, dequantize, both layouts from one read, and an MX linear."""

import torch
import torch_xla
from torch import nn

from xlabridge import mx

torch.manual_seed(0)
x = torch.randn(64, 256, dtype=torch.bfloat16)
m = mx.to_mxfp8(x)  # blocks of 32 along the last dimension; rounding="floor" (the spec's) or "rceil"
print(m.data.dtype, tuple(m.data.shape), m.scale.dtype, tuple(m.scale.shape))
back = mx.from_mxfp8(m, torch.float32)
print(f"relative error: {float((back - x.float()).norm() / x.float().norm()):.3f}")

cols = mx.to_mxfp8(x, dim=0)  # blocks along dimension 0: the MX tensor of x.t()
print("dim=0:", tuple(cols.data.shape), tuple(cols.scale.shape))
rows, cols_too = mx.to_mxfp8_both(x)  # both casts from one read of x, bit for bit the two above
print("both:", torch.equal(rows.data.view(torch.uint8), m.data.view(torch.uint8)),
      torch.equal(cols_too.scale, cols.scale))

# The same call on an XLA tensor: one XLA computation in the lazy graph (one Mosaic kernel on TPU).
on_xla = mx.to_mxfp8(x.to(torch_xla.device()))
print("XLA:", torch.equal(on_xla.data.cpu().view(torch.uint8), m.data.view(torch.uint8)))

# Training on MXFP8 operands: swap every nn.Linear of a module for MXLinear.
model = mx.MXLinear.swap(nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64)))
loss = model(torch.randn(32, 64)).square().mean()
loss.backward()
print(type(model[0]).__name__, model[0].weight.grad.shape)
