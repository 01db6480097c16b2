"""The cast and its inverse as torch custom ops, routed by device.

Being ``torch.library`` custom ops (``xlabridge::mxfp8_cast``, ``xlabridge::mxfp8_dequantize``)
lets ``torch.compile`` keep them in its graph without a graph break: under
``backend="openxla"`` (or ``"xlabridge"``) torch_xla replays the graph on XLA tensors, reaching
the XLA computation, or on TPU the Mosaic kernel (``_tpu.py``); under inductor on CUDA the op
stays one Triton launch. The fake implementations give shapes.
"""

from __future__ import annotations

import torch

from xlabridge.mx import _torch_ops


def _route_cast(x: torch.Tensor, block_size: int, rounding: str) -> tuple[torch.Tensor, torch.Tensor]:
    if x.device.type == "xla":
        from xlabridge.mx import _tpu, _xla

        if _tpu.takes(x, block_size):
            return _tpu.to_mxfp8(x, block_size, rounding)

        return _xla.to_mxfp8(x, block_size, rounding)
    if x.device.type == "cuda":
        from xlabridge.mx import _triton

        if _triton.supports(block_size):
            return _triton.to_mxfp8(x, block_size, rounding)
    return _torch_ops.to_mxfp8(x, block_size, rounding)


@torch.library.custom_op("xlabridge::mxfp8_cast", mutates_args=())
def mxfp8_cast(x: torch.Tensor, block_size: int, rounding: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(data, scale)`` of ``x``: float8_e4m3fn of x's shape, and u8 E8M0 bytes per block."""
    return _route_cast(x, block_size, rounding)


@mxfp8_cast.register_fake
def _(x: torch.Tensor, block_size: int, rounding: str) -> tuple[torch.Tensor, torch.Tensor]:
    data = x.new_empty(x.shape, dtype=torch.float8_e4m3fn)
    scale = x.new_empty(x.shape[:-1] + (x.shape[-1] // block_size,), dtype=torch.uint8)
    return data, scale


@torch.library.custom_op("xlabridge::mxfp8_dequantize", mutates_args=())
def mxfp8_dequantize(data: torch.Tensor, scale: torch.Tensor, block_size: int, dtype: torch.dtype) -> torch.Tensor:
    """``data * 2**(scale - 127)`` per block, in ``dtype``; NaN where the scale byte is 0xFF."""
    if data.device.type == "xla":
        from xlabridge.mx import _xla

        return _xla.from_mxfp8(data, scale, block_size, dtype)
    return _torch_ops.from_mxfp8(data, scale, block_size, dtype)


@mxfp8_dequantize.register_fake
def _(data: torch.Tensor, scale: torch.Tensor, block_size: int, dtype: torch.dtype) -> torch.Tensor:
    return data.new_empty(data.shape, dtype=dtype)
