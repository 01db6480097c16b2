"""A small language-model training script that is split both ways, for ``make demo``.

It is written the way people write TPU training loops (``torch.compile(..., backend="openxla")``
and ``torch_xla.sync()`` per step) and carries two common traps:

* an **HLO lowering break**: ``torch.exp2`` has no XLA lowering in torch_xla 2.9, so the
  Dynamo bridge cuts the forward graph around it and runs it on the CPU;
* a **Dynamo graph break**: ``.item()`` decides a branch inside ``forward``, so Dynamo
  stops capturing there and the forward becomes two FX graphs.

Run it alone (``python -m xlabridge.examples.demo``) or under the report
(``xlabridge report -- python -m xlabridge.examples.demo``).
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


class TinyLM(nn.Module):
    """Embedding, a gated MLP block with a learned base-2 temperature, and an LM head."""

    def __init__(self, vocab: int = 256, width: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.log2_temperature = nn.Parameter(torch.zeros(width))
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(ids)
        hidden = hidden * torch.exp2(self.log2_temperature.clamp(-4.0, 4.0))
        hidden = hidden + self.down(torch.nn.functional.gelu(self.up(self.norm(hidden))))
        if hidden.abs().max().item() > 50.0:
            hidden = hidden / 50.0
        return self.head(self.norm(hidden))


def train(steps: int, backend: str) -> list[float]:
    """Train ``TinyLM`` for ``steps`` steps on the XLA device; returns the losses."""
    import torch_xla

    device = torch_xla.device()
    torch.manual_seed(0)
    model = TinyLM().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    compiled = torch.compile(model, backend=backend)
    generator = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(steps):
        ids = torch.randint(0, 256, (8, 32), generator=generator).to(device)
        logits = compiled(ids[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch_xla.sync()
        losses.append(loss.item())
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="training steps to run")
    parser.add_argument("--backend", default="openxla", help="torch.compile backend")
    args = parser.parse_args()
    losses = train(args.steps, args.backend)
    print("losses:", " ".join(f"{loss:.4f}" for loss in losses))


if __name__ == "__main__":
    main()
