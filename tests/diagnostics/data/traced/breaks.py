"""Traced without xlabridge (TORCH_TRACE=DIR python breaks.py): graph breaks of three kinds and
recompiles of two, on CPU with a backend of torch's own."""

import sys

import torch


def step(x, scale):
    y = torch.sin(x) * scale
    print("", end="")  # BREAK print
    if y.sum() > 0:  # BREAK branch
        y = y * 2
    return y + scale


compiled = torch.compile(step, backend=sys.argv[1] if len(sys.argv) > 1 else "aot_eager")
for size, scale in ((4, 1.0), (4, 1.0), (8, 1.0), (8, 2.0)):
    compiled(torch.randn(size), scale)
print("xlabridge imported:", "xlabridge" in sys.modules)
