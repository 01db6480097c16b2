"""What XLA:TPU makes of a graph, compiled here by libtpu's compile-only client (nothing runs on a TPU)."""

import torch
import torch_xla
from torch import nn

from xlabridge import hlo, tpu

device = torch_xla.device()
model = nn.Sequential(nn.Linear(128, 512), nn.GELU(), nn.Linear(512, 128)).to(device)
loss = model(torch.randn(64, 128, device=device)).square().mean()
loss.backward()  # the pending lazy graph: forward and backward, not run

with tpu.TpuCompiler("tpu:v5e") as compiler:  # one worker process, many compiles
    result = compiler.compile_tensors([loss, *(p.grad for p in model.parameters())])
print(result.label)
print("kernels:", result.kernel_count, "| fits:", result.fits, "| HBM per device:", result.memory.total_bytes, "bytes")
for finding in tpu.findings(result):  # what to fix for the TPU, costliest by the cost model first
    print(finding.kind.value, "x", finding.count, "| cost model:", finding.cost_model_seconds, "s")


def gelu(x):
    return torch.nn.functional.gelu(x) * 2


# The kernel count of a torch function, compiled for the local XLA device or for a TPU.
print("kernels on TPU v6e:", hlo.kernel_count(gelu, torch.randn(256, 256), target="tpu:v6e").count)
