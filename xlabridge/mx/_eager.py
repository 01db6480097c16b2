"""Eager PyTorch adapter of the formulation: the MXFP8 and MXFP4 casts on CPU tensors (and any
device without a dedicated kernel). Several kernels per call, bit-identical to the fused paths."""

from __future__ import annotations

import torch

from xlabridge.mx import _constants as C
from xlabridge.mx import _formulation

_DTYPES = {
    "f32": torch.float32,
    "bf16": torch.bfloat16,
    "f16": torch.float16,
    "s16": torch.int16,
    "s32": torch.int32,
    "u8": torch.uint8,
    "f8e4m3fn": torch.float8_e4m3fn,
}


class TorchOps:
    """``ArrayOps`` over eager torch tensors."""

    def convert(self, a, dtype):
        return a.to(_DTYPES[dtype])

    def bitcast(self, a, dtype):
        return a.view(_DTYPES[dtype])

    def add(self, a, b):
        return a + b

    def sub(self, a, b):
        return a - b

    def mul(self, a, b):
        if isinstance(b, float):
            b = torch.tensor(b, dtype=torch.float32, device=a.device)
        return a * b

    def bit_and(self, a, b):
        return a & b

    def div_int(self, a, b):
        return torch.div(a, b, rounding_mode="trunc")

    def shift_right(self, a, bits):
        return a >> bits

    def shift_left(self, a, bits):
        return a << bits

    def maximum(self, a, b):
        return torch.clamp(a, min=b) if isinstance(b, int) else torch.maximum(a, b)

    def eq(self, a, b):
        return a == b

    def ne(self, a, b):
        return a != b

    def ge(self, a, b):
        return a >= b

    def gt(self, a, b):
        return a > b

    def select(self, pred, on_true, on_false):
        return torch.where(pred, on_true, on_false)

    def clamp(self, a, lo, hi):
        return torch.clamp(a, lo, hi)

    def reduce_max_last(self, a):
        return a.amax(dim=-1)

    def slice_last(self, a, index):
        return a[..., index]

    def expand_last(self, a, size):
        return a.unsqueeze(-1).expand(*a.shape, size)

    def bit_or(self, a, b):
        return a | b

    def split_pairs(self, a):
        return a[..., 0::2], a[..., 1::2]

    def interleave_pairs(self, even, odd):
        return torch.stack((even, odd), dim=-1).reshape(*even.shape[:-1], 2 * even.shape[-1])


def to_mxfp8(x: torch.Tensor, block_size: int, rounding: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(data, scale)`` of ``x`` computed with eager torch operations."""
    blocks = x.reshape(*x.shape[:-1], x.shape[-1] // block_size, block_size)
    input_dtype = next(name for name, dtype in _DTYPES.items() if dtype == x.dtype)
    data, scale = _formulation.cast_blocks(TorchOps(), blocks, input_dtype, block_size, rounding, "two_pass")
    return data.reshape(x.shape), scale


def from_mxfp8(data: torch.Tensor, scale: torch.Tensor, block_size: int, dtype: torch.dtype) -> torch.Tensor:
    """Dequantize: ``data * 2**(scale - 127)`` computed in float32, NaN where the scale is 0xFF."""
    blocks = data.reshape(*data.shape[:-1], data.shape[-1] // block_size, block_size).to(torch.float32)
    code = scale.to(torch.int32).unsqueeze(-1)
    first, second = _formulation.split_scale(TorchOps(), code)
    values = torch.where(code == C.E8M0_NAN, float("nan"), blocks * first * second)
    return values.reshape(data.shape).to(dtype)


def to_mxfp4(x: torch.Tensor, block_size: int, rounding: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(data, scale)`` of ``x``: packed E2M1 bytes ``[..., K/2]`` and E8M0 bytes ``[..., K/block_size]``."""
    ops = TorchOps()
    blocks = x.reshape(*x.shape[:-1], x.shape[-1] // block_size, block_size)
    codes, scale = _formulation.cast_blocks_fp4(ops, blocks, block_size, rounding)
    return _formulation.pack_nibbles(ops, codes.reshape(x.shape)), scale


def from_mxfp4(data: torch.Tensor, scale: torch.Tensor, block_size: int, dtype: torch.dtype) -> torch.Tensor:
    """Dequantize packed MXFP4 ``data`` ``[..., K/2]`` under ``scale``: values ``[..., K]`` in ``dtype``."""
    k = 2 * data.shape[-1]
    blocks = data.reshape(*data.shape[:-1], k // block_size, block_size // 2)
    values = _formulation.dequantize_blocks_fp4(TorchOps(), blocks, scale, block_size)
    return values.reshape(*data.shape[:-1], k).to(dtype)
