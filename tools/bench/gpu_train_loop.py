"""A training loop as people write it on a GPU: a 6-layer transformer, ``torch.compile`` (inductor),
AdamW, ``loss.item()`` each step for logging; it keeps its own clock.

Each step is timed on the host (``time.monotonic``) from its start to the end of its
``loss.item()`` (the program's own wait for the GPU): the first step holds Dynamo's and inductor's
compiles of the forward (its call) and of the backward (its first ``backward()``). ``--clock FILE``
writes ``{"steps": [[start, forward_end, backward_end, end], ...], "device": ...}`` (monotonic
seconds), which ``tools/bench/check_gpu_report.py`` compares with the report's shares.

    PYTHONPATH=. python tools/bench/gpu_train_loop.py --steps 30 --clock /tmp/clock.json
"""

from __future__ import annotations

import argparse
import json
import time

import torch


class Transformer(torch.nn.Module):
    """A decoder-only transformer: embedding, ``layers`` pre-norm blocks with causal attention, LM head."""

    def __init__(self, vocab: int = 8192, width: int = 512, heads: int = 8, layers: int = 6, seq: int = 512) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.position = torch.nn.Parameter(torch.zeros(seq, width))
        block = torch.nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True,
                                                 norm_first=True, activation="gelu")
        self.blocks = torch.nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab, bias=False)
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) + self.position[: ids.shape[1]]
        x = self.blocks(x, mask=self.mask[: ids.shape[1], : ids.shape[1]], is_causal=True)
        logits = self.head(self.norm(x))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--clock", help="write the step times here (JSON)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = Transformer(seq=args.seq).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step = torch.compile(model, backend="inductor")
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 8192, (args.batch, args.seq + 1), generator=generator).to(device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16)
    clock, losses = [], []
    for _ in range(args.steps):
        start = time.monotonic()
        with autocast:
            loss = step(ids[:, :-1], ids[:, 1:])
        forward = time.monotonic()
        loss.backward()
        backward = time.monotonic()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())  # the program's own wait for the GPU, as a logging loop has it
        clock.append([start, forward, backward, time.monotonic()])
    steady = sorted(end - begin for begin, _, _, end in clock[1:])
    print(json.dumps({"first_step_s": clock[0][3] - clock[0][0],
                      "median_step_s": steady[len(steady) // 2] if steady else None, "last_loss": losses[-1]}))
    if args.clock:
        with open(args.clock, "w", encoding="utf-8") as out:
            json.dump({"steps": clock, "device": str(device), "losses": losses}, out)


if __name__ == "__main__":
    main()
