"""Seeded inputs for the MXFP8 tests: random magnitudes over each dtype's whole range, plus
blocks built to hit every special case of the spec (zeros, signed zeros, subnormals, NaN,
+-Inf, saturation, round-to-even ties, scale clamping, rceil power-of-two boundaries)."""

from __future__ import annotations

import numpy as np
import torch

from tests.mx._reference import _TABLE, E2M1_TABLE

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
ROUNDINGS = ("floor", "rceil")

# log2 range of finite values (subnormals included) for each dtype
_EXPONENT_RANGE = {torch.float32: (-149, 127), torch.bfloat16: (-133, 127), torch.float16: (-24, 15)}


# each element format's non-negative values and the power of two its floor scale divides by
_ELEMENTS = {"e4m3": (_TABLE, 256.0), "e2m1": (E2M1_TABLE, 4.0)}


def _special_block(kind: int, rng: np.random.Generator, bs: int, dtype: torch.dtype, elem: str = "e4m3") -> np.ndarray:
    table, top_power = _ELEMENTS[elem]
    lo, hi = _EXPONENT_RANGE[dtype]
    finfo = torch.finfo(dtype)
    block = rng.standard_normal(bs) * 2.0 ** rng.integers(lo + 30, hi - 2)
    if kind == 0:  # all zeros with signed zeros
        block = np.where(rng.random(bs) < 0.5, -0.0, 0.0)
    elif kind == 1:  # a NaN
        block[rng.integers(bs)] = np.nan
    elif kind == 2:  # an infinity
        block[rng.integers(bs)] = np.inf if rng.random() < 0.5 else -np.inf
    elif kind == 3:  # subnormals of the dtype only
        block = rng.integers(-8, 9, bs) * float(finfo.smallest_normal) / 16
    elif kind == 4:  # subnormals next to a small normal maximum (scale clamps at 2**-127)
        block = rng.integers(-8, 9, bs) * float(finfo.smallest_normal) / 16
        block[0] = float(finfo.smallest_normal) * rng.integers(1, 4)
    elif kind == 5:  # the dtype's largest values: saturation, largest scales
        block = np.sign(rng.standard_normal(bs)) * float(finfo.max) * rng.uniform(0.3, 1.0, bs)
    elif kind == 6:  # exact ties between element neighbours under a power-of-two scale
        e = int(rng.integers(max(lo + 20, -100), min(hi - 10, 100)))
        i = rng.integers(0, len(table) - 1, bs)
        block = (table[i] + table[i + 1]) / 2 * 2.0**e * np.where(rng.random(bs) < 0.5, -1, 1)
        block[0] = top_power * 2.0**e  # fixes the floor scale at 2**e
    elif kind == 7:  # amax at and around max * 2**k: the rceil rounding boundary
        k = int(rng.integers(max(lo + 20, -100), min(hi - 10, 100)))
        block[0] = table[-1] * 2.0**k * (1 + rng.choice([0.0, 2.0**-10, -(2.0**-10), 2.0**-7]))
        block[1:] = block[0] * rng.uniform(-1, 1, bs - 1)
    elif kind == 8:  # exact powers of two and values just under them
        e = rng.integers(lo + 30, hi - 2, bs)
        block = 2.0**e * np.where(rng.random(bs) < 0.5, 1.0, 1.0 - 2.0**-7)
    return block


def make_input(shape: tuple[int, ...], dtype: torch.dtype, seed: int, block_size: int = 32, special_fraction: float = 0.4,
               elem: str = "e4m3") -> torch.Tensor:
    """A CPU tensor of ``shape`` and ``dtype``; a ``special_fraction`` of its blocks are special
    (ties and rceil boundaries of element format ``elem``: ``"e4m3"`` or ``"e2m1"``)."""
    rng = np.random.default_rng(seed)
    lo, hi = _EXPONENT_RANGE[dtype]
    n_blocks = int(np.prod(shape)) // block_size
    block_exp = rng.integers(lo + 8, hi - 1, n_blocks)[:, None]
    spread = rng.integers(-12, 1, (n_blocks, block_size))
    values = rng.standard_normal((n_blocks, block_size)) * 2.0 ** (block_exp + spread)
    for b in np.nonzero(rng.random(n_blocks) < special_fraction)[0]:
        values[b] = _special_block(int(rng.integers(0, 9)), rng, block_size, dtype, elem)
    with np.errstate(over="ignore"):
        return torch.from_numpy(values.reshape(shape)).to(dtype)


def mxfp4_extreme_scales(g: torch.Generator, n: int, rows: int, low: int, high: int, planted=()):
    """MXFP4 matmul operands with the scale bytes at their extremes: ``x`` ``[2, rows, 1952]`` (61
    blocks: a last span of one block in four, a split-K's partial step) near 2**-100, three experts'
    weights ``[3, n, 976]`` bytes with scale bytes drawn from ``[low, high)``, and planted: 0 and 1,
    253 and 254 over nibbles up to 1.5 (finite in bf16), 0xFF on rows 24-31 of block 4 of experts 0
    and 1 (NaN rows), and ``planted`` ``(expert, rows, block, byte)``. Drawn from ``g`` in a fixed
    order, so that a caller's later draws stay the same."""
    data = torch.randint(0, 256, (3, n, 976), dtype=torch.uint8, generator=g)
    scale = torch.randint(low, high, (3, n, 61), dtype=torch.uint8, generator=g)
    scale[0, :8, 0], scale[1, :8, 1] = 0, 1
    for expert, where, block, byte in planted:
        scale[expert, where, block] = byte
    for expert in (0, 1):
        for first, block, byte in ((8, 2, 253), (16, 3, 254)):
            scale[expert, first:first + 8, block] = byte
            data[expert, first:first + 8, 16 * block:16 * block + 16] &= 0x33
        scale[expert, 24:32, 4] = 255
    x = (torch.randn(2, rows, 1952, generator=g) * 2.0**-100).bfloat16()
    return x, data, scale


def assert_within_bf16_of(got: torch.Tensor, exact: torch.Tensor) -> None:
    """``got`` NaN exactly where ``exact`` is (the 0xFF rows of ``mxfp4_extreme_scales``), elsewhere
    within a bf16 rounding of each output plus 2**-16 of its row's largest."""
    got, exact = got.double().cpu(), exact.double().cpu()
    nan = exact.isnan()
    assert nan[:, :, 24:32].all() and int(nan.sum()) == nan[:, :, 24:32].numel() and bool((got.isnan() == nan).all())
    exact = exact.nan_to_num(0.0)
    tolerance = torch.finfo(torch.bfloat16).eps * exact.abs() + 2**-16 * exact.abs().amax(dim=1, keepdim=True)
    assert bool(((got - exact).abs() <= tolerance)[~nan].all())
