"""The graphs torch_xla compiles for a training step that donates its state, and for inference.

Run as a script in a process of its own: ``python _donating_step.py DUMP OUT`` (``XLA_FLAGS``
must name DUMP before torch_xla starts, so the caller sets it). An MLP takes SGD-with-momentum
steps under ``torch_xla.sync()``: torch_xla marks the parameters and momentum buffers each step
replaces as buffer donors of the step's graph (``XLA_ENABLE_PARAM_ALIASING``, on by default),
which XLA's dump keeps in the module it was handed (``*.before_optimizations.hlo.pb``). A forward
pass under ``no_grad``, synced the same way, replaces nothing. OUT (JSON) names the dumped module of the second
step (the first creates the momentum buffers; later steps reuse the second's graph) and of the
inference pass, and the donated state's bytes, counted from the model's and optimizer's tensors.

Every size is a multiple of XLA:TPU's tiles ((8, 128) for 2-D f32 arrays, 128 for 1-D ones), so
the bytes the tensors hold are those XLA:TPU allocates for them; and no donated array has the
loss's size on TPU (a f32 scalar takes one 128-element tile), which XLA:TPU's pairing of donors
with outputs by their size would otherwise be free to give the loss.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _new_module(dump: Path, seen: set[str]) -> str:
    modules = {p.name for p in dump.glob("*.before_optimizations.hlo.pb")} - seen
    assert len(modules) == 1, f"expected one new module in {dump}, got {sorted(modules)}"
    seen |= modules
    return modules.pop()


def main(dump: Path, out: Path) -> None:
    import torch
    import torch_xla

    device = torch_xla.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 256)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(64, 128).to(device), torch.randint(0, 256, (64,)).to(device)
    torch_xla.sync()
    seen = {p.name for p in dump.glob("*.before_optimizations.hlo.pb")}
    modules = {}
    for step in range(3):
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        torch_xla.sync()
        if step < 2:
            modules[f"step{step}"] = _new_module(dump, seen)
    with torch.no_grad():
        logits = model(x)
    torch_xla.sync()
    assert logits.shape == (64, 256)
    modules["inference"] = _new_module(dump, seen)
    state = [*model.parameters(), *(optimizer.state[p]["momentum_buffer"] for p in model.parameters())]
    out.write_text(json.dumps({
        "step": modules["step1"],
        "inference": modules["inference"],
        "donated_bytes": sum(t.numel() * t.element_size() for t in state),
    }))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
