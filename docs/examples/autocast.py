"""Autocast on XLA: einsum in bf16, and the audit of XLA's autocast lists against CUDA's and CPU's."""

import torch
import torch_xla

import xlabridge  # noqa: F401  (importing xlabridge makes sure einsum is in XLA's bf16 list)
from xlabridge import autocast

device = torch_xla.device()
a, b = torch.randn(8, 16, device=device), torch.randn(16, 4, device=device)
with torch.autocast("xla", dtype=torch.bfloat16):
    print("einsum:", torch.einsum("ij,jk->ik", a, b).dtype)

report = autocast.audit()  # read from the dispatcher of the running torch and torch_xla
lines = str(report).splitlines()  # the table `xlabridge autocast-audit` prints
print("\n".join(lines[:3] + lines[5:6]))  # versions, counts, gaps; the column heads
print("\n".join(line for line in lines if line.startswith(("aten::einsum ", "aten::layer_norm ", "aten::mv "))))
