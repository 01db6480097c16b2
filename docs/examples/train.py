"""A small training script as people write them for TPUs: ``torch.compile(backend="openxla")`` and
``torch_xla.sync()`` per step. Run it under the report: ``xlabridge report -- python train.py``."""

import torch
import torch_xla
from torch import nn


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(32, 128), nn.Linear(128, 32)
        self.log2_scale = nn.Parameter(torch.zeros(32))

    def forward(self, x):
        x = x * torch.exp2(self.log2_scale)  # no XLA lowering on torch_xla 2.9: runs on the CPU
        return self.down(torch.relu(self.up(x)))


device = torch_xla.device()
model = Model().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
compiled = torch.compile(model, backend="openxla")
for step in range(3):
    loss = compiled(torch.randn(16, 32, device=device)).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    torch_xla.sync()
print("trained")
