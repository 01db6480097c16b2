"""One training step of the demo model, for ``xlabridge compare xlabridge/examples/compare_step.py``."""

from __future__ import annotations

from collections.abc import Callable

import torch

from xlabridge.examples.demo import TinyLM


def make_step() -> tuple[Callable[[torch.Tensor], torch.Tensor], tuple[torch.Tensor]]:
    """The step (forward, loss, backward, optimizer update) and its batch on the XLA device."""
    import torch_xla

    device = torch_xla.device()
    torch.manual_seed(0)
    model = TinyLM().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 256, (8, 32), generator=torch.Generator().manual_seed(0)).to(device)

    def step(batch: torch.Tensor) -> torch.Tensor:
        logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss

    return step, (ids,)
