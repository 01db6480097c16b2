"""A small causal transformer and its training loop, for comparing MXFP8 linears with bf16 ones
(``tests/mx/test_linear.py``, ``tools/bench/mx_linear_train.py``).

The data is a seeded Markov chain over a small vocabulary (each token has a few likely
successors), so the loss falls from ln(vocab) towards the chain's entropy within a few hundred
steps. Parameters are float32; every step runs under ``torch.autocast`` in bfloat16, the way
torchao's MX training recipes run (its ``MXLinear`` casts to the autocast dtype, as ours does).
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F

VOCAB = 64
D_MODEL = 128
HEADS = 4
LAYERS = 2
SEQ = 64
BATCH = 16


class Block(torch.nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(attn)
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TinyLM(torch.nn.Module):
    def __init__(self, vocab: int = VOCAB, d: int = D_MODEL, heads: int = HEADS, layers: int = LAYERS, seq: int = SEQ):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.randn(seq, d) * 0.02)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def markov_batches(steps: int, seed: int = 0, vocab: int = VOCAB, batch: int = BATCH, seq: int = SEQ) -> list[torch.Tensor]:
    """``steps`` batches of ``[batch, seq + 1]`` tokens from a seeded sparse Markov chain."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(vocab, vocab, generator=g) * 3.0
    probs = torch.softmax(logits, dim=-1)
    batches = []
    for _ in range(steps):
        tokens = torch.empty(batch, seq + 1, dtype=torch.long)
        tokens[:, 0] = torch.randint(vocab, (batch,), generator=g)
        for i in range(seq):
            tokens[:, i + 1] = torch.multinomial(probs[tokens[:, i]], 1, generator=g).squeeze(1)
        batches.append(tokens)
    return batches


def loss_of(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    with torch.autocast(tokens.device.type, dtype=torch.bfloat16):
        logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def train(model: torch.nn.Module, batches: list[torch.Tensor], lr: float = 3e-3) -> list[float]:
    """Losses of AdamW steps over ``batches`` (a fixed order, so two runs see the same data)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    for tokens in batches:
        loss = loss_of(model, tokens)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def bf16_and_mx(steps: int, seed: int = 0) -> tuple[list[float], list[float]]:
    """Loss curves of the same initial model trained with bf16 linears and with MXFP8 linears."""
    from xlabridge import mx

    torch.manual_seed(seed)
    base = TinyLM()
    batches = markov_batches(steps, seed=seed + 1)
    mx_model = mx.MXLinear.swap(copy.deepcopy(base))
    return train(base, batches), train(mx_model, batches)


def sqnr_db(reference: torch.Tensor, other: torch.Tensor) -> float:
    """Signal to quantization noise ratio in dB (what torchao's tests call ``compute_error``)."""
    reference, other = reference.double(), other.double()
    return 20 * math.log10(reference.norm().item() / (reference - other).norm().item())
