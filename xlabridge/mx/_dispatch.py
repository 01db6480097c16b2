"""The casts and their inverses as torch custom ops, routed by device.

Being ``torch.library`` custom ops (``xlabridge::mxfp8_cast``, ``xlabridge::mxfp8_dequantize``,
``xlabridge::mxfp4_cast``, ``xlabridge::mxfp4_dequantize``, ``xlabridge::mxfp4_repack``, and the MXFP4
matmul of ``_mxfp4_linear.py``)
lets ``torch.compile`` keep them in its graph without a graph break: under
``backend="openxla"`` (or ``"xlabridge"``) torch_xla replays the graph on XLA tensors, reaching
the XLA computation, or on TPU the Mosaic kernel (``_tpu.py``); under inductor on CUDA the op
stays one Triton launch. The fake implementations give shapes.
"""

from __future__ import annotations

from typing import Optional

import torch

from xlabridge.mx import _checks, _eager as _torch_ops, _fp4_packing
from xlabridge.mx._fp4_packing import Packing


def _route_cast(x: torch.Tensor, block_size: int, rounding: str) -> tuple[torch.Tensor, torch.Tensor]:
    if x.device.type == "xla":
        from xlabridge.mx._mosaic import lowering as _tpu
        from xlabridge.mx import _xla

        if _tpu.takes(x, block_size):
            return _tpu.to_mxfp8(x, block_size, rounding)

        return _xla.to_mxfp8(x, block_size, rounding)
    if x.device.type == "cuda":
        from xlabridge.mx._triton import rows as _triton

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
        from xlabridge.mx._mosaic import lowering_cols as _tpu_cols
        from xlabridge.mx import _xla

        if _tpu_cols.dequantize_takes(data, block_size, dtype):
            return _tpu_cols.from_mxfp8(data, scale, block_size, dtype)
        return _xla.from_mxfp8(data, scale, block_size, dtype)
    return _torch_ops.from_mxfp8(data, scale, block_size, dtype)


@mxfp8_dequantize.register_fake
def _(data: torch.Tensor, scale: torch.Tensor, block_size: int, dtype: torch.dtype) -> torch.Tensor:
    return data.new_empty(data.shape, dtype=dtype)


def _route_cast_dim(x: torch.Tensor, block_size: int, rounding: str, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    if x.device.type == "xla":
        from xlabridge.mx._mosaic import lowering as _tpu, lowering_cols as _tpu_cols
        from xlabridge.mx import _xla

        if _tpu.takes(x, block_size) and _tpu_cols.takes(x, block_size, dim):
            return _tpu_cols.to_mxfp8_dim(x, block_size, rounding, dim)
        return _xla.to_mxfp8_dim(x, block_size, rounding, dim)
    if x.device.type == "cuda":
        from xlabridge.mx._triton import rows as _triton, cols as _triton_cols

        if _triton.supports(block_size):
            return _triton_cols.to_mxfp8_dim(x, block_size, rounding, dim)
    return _torch_ops.to_mxfp8(x.movedim(dim, -1), block_size, rounding)


@torch.library.custom_op("xlabridge::mxfp8_cast_dim", mutates_args=())
def mxfp8_cast_dim(x: torch.Tensor, block_size: int, rounding: str, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(data, scale)`` of ``x.movedim(dim, -1)`` (``dim`` non-negative, not the last), read from
    ``x`` in place."""
    return _route_cast_dim(x, block_size, rounding, dim)


@mxfp8_cast_dim.register_fake
def _(x: torch.Tensor, block_size: int, rounding: str, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    shape = _checks.moved_shape(tuple(x.shape), dim)
    data = x.new_empty(shape, dtype=torch.float8_e4m3fn)
    scale = x.new_empty(shape[:-1] + (shape[-1] // block_size,), dtype=torch.uint8)
    return data, scale


def _route_cast_both(x: torch.Tensor, block_size: int, rounding: str):
    if x.device.type == "xla":
        from xlabridge.mx._mosaic import lowering as _tpu, lowering_cols as _tpu_cols
        from xlabridge.mx import _xla

        if _tpu.takes(x, block_size) and _tpu_cols.takes(x, block_size, x.dim() - 2, both=True):
            return _tpu_cols.to_mxfp8_both(x, block_size, rounding)
        return _xla.to_mxfp8_both(x, block_size, rounding)
    if x.device.type == "cuda":
        from xlabridge.mx._triton import rows as _triton, cols as _triton_cols

        if _triton.supports(block_size):
            return _triton_cols.to_mxfp8_both(x, block_size, rounding)
    row = _torch_ops.to_mxfp8(x, block_size, rounding)
    col = _torch_ops.to_mxfp8(x.transpose(-2, -1), block_size, rounding)
    return (*row, *col)


@torch.library.custom_op("xlabridge::mxfp8_cast_both", mutates_args=())
def mxfp8_cast_both(
    x: torch.Tensor, block_size: int, rounding: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(row data, row scale, col data, col scale)``: the casts of ``x`` along its last and its
    second-to-last dimension (the latter of ``x.transpose(-2, -1)``)."""
    return tuple(_route_cast_both(x, block_size, rounding))


@mxfp8_cast_both.register_fake
def _(x: torch.Tensor, block_size: int, rounding: str):
    shape = tuple(x.shape)
    moved = shape[:-2] + (shape[-1], shape[-2])
    return (
        x.new_empty(shape, dtype=torch.float8_e4m3fn),
        x.new_empty(shape[:-1] + (shape[-1] // block_size,), dtype=torch.uint8),
        x.new_empty(moved, dtype=torch.float8_e4m3fn),
        x.new_empty(moved[:-1] + (moved[-1] // block_size,), dtype=torch.uint8),
    )


# ----------------------------------------------------------------------------- MXFP4


def _route_fp4_cast(x: torch.Tensor, block_size: int, rounding: str) -> tuple[torch.Tensor, torch.Tensor]:
    if x.device.type == "xla":
        from xlabridge.mx._mosaic import lowering_fp4 as _tpu_fp4
        from xlabridge.mx import _xla

        if _tpu_fp4.cast_takes(x, block_size):
            return _tpu_fp4.to_mxfp4(x, block_size, rounding)
        return _xla.to_mxfp4(x, block_size, rounding)
    if x.device.type == "cuda":
        from xlabridge.mx._triton import fp4 as _triton_fp4

        if _triton_fp4.supports(block_size):
            return _triton_fp4.to_mxfp4(x, block_size, rounding)
    return _torch_ops.to_mxfp4(x, block_size, rounding)


@torch.library.custom_op("xlabridge::mxfp4_cast", mutates_args=())
def mxfp4_cast(x: torch.Tensor, block_size: int, rounding: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(data, scale)`` of ``x``: packed E2M1 bytes ``[..., K/2]`` and E8M0 bytes ``[..., K/block_size]``."""
    return _route_fp4_cast(x, block_size, rounding)


@mxfp4_cast.register_fake
def _(x: torch.Tensor, block_size: int, rounding: str) -> tuple[torch.Tensor, torch.Tensor]:
    data = x.new_empty(x.shape[:-1] + (x.shape[-1] // 2,), dtype=torch.uint8)
    scale = x.new_empty(x.shape[:-1] + (x.shape[-1] // block_size,), dtype=torch.uint8)
    return data, scale


@torch.library.custom_op("xlabridge::mxfp4_dequantize", mutates_args=())
def mxfp4_dequantize(data: torch.Tensor, scale: torch.Tensor, block_size: int, dtype: torch.dtype) -> torch.Tensor:
    """Values ``[..., 2 * data.shape[-1]]`` of ``dtype``; NaN where the scale byte is 0xFF."""
    if data.device.type == "xla":
        from xlabridge.mx._mosaic import lowering_fp4 as _tpu_fp4
        from xlabridge.mx import _xla

        if _tpu_fp4.dequantize_takes(data, block_size, dtype):
            return _tpu_fp4.from_mxfp4(data, scale, block_size, dtype)
        return _xla.from_mxfp4(data, scale, block_size, dtype)
    if data.device.type == "cuda":
        from xlabridge.mx._triton import fp4 as _triton_fp4

        if _triton_fp4.supports(block_size):
            return _triton_fp4.from_mxfp4(data, scale, block_size, dtype)
    return _torch_ops.from_mxfp4(data, scale, block_size, dtype)


@mxfp4_dequantize.register_fake
def _(data: torch.Tensor, scale: torch.Tensor, block_size: int, dtype: torch.dtype) -> torch.Tensor:
    return data.new_empty(data.shape[:-1] + (2 * data.shape[-1],), dtype=dtype)


@torch.library.custom_op("xlabridge::mxfp4_repack", mutates_args=())
def mxfp4_repack(data: torch.Tensor, to: str, frm: str) -> torch.Tensor:
    """Packed bytes ``data`` (uint8 ``[..., K/2]``, ``K/2`` a multiple of 4) laid out as ``frm``, in
    ``to``'s layout (``Packing`` values): a new tensor. An op of its own so that ``torch.compile``
    keeps it in its graph as it is (tracing the enum that names a layout would break the graph)."""
    out = _fp4_packing.repack(data, to, frm)
    return out.clone() if out is data else out  # an op's output may not be its input


@mxfp4_repack.register_fake
def _(data: torch.Tensor, to: str, frm: str) -> torch.Tensor:
    return data.new_empty(data.shape)


def _route_fp4_matmul(x, data, scale, expert_ids, bias, block_size, packing):
    if x.device.type == "cuda":
        from xlabridge.mx._triton import fp4_matmul as _triton_fp4_matmul

        if _triton_fp4_matmul.supports(x, block_size):
            return _triton_fp4_matmul.matmul(x, data, scale, expert_ids, bias, packing=Packing(packing))
    # every other route reads the spec layout: a DECODE weight costs one more pass here
    data = _fp4_packing.repack(data, Packing.SPEC, packing)
    if x.device.type == "xla":
        from xlabridge.mx._mosaic import lowering_fp4 as _tpu_fp4

        if _tpu_fp4.matmul_takes(x, data, block_size):
            return _tpu_fp4.matmul(x, data, scale, expert_ids, bias, block_size)
    return _dequantized_matmul(x, data, scale, expert_ids, bias, block_size)


def _dequantized_matmul(x, data, scale, expert_ids, bias, block_size):
    """The definition: the weight dequantized to ``x``'s dtype, then a batched ``linear``."""
    weight = mxfp4_dequantize(data, scale, block_size, x.dtype)
    if expert_ids is not None:
        weight = weight[expert_ids.long()]
        bias = None if bias is None else bias[expert_ids.long()]
    if bias is None:
        return torch.bmm(x, weight.transpose(-1, -2))
    # one rounding of product plus bias, as torch.nn.functional.linear's addmm
    return torch.baddbmm(bias.to(x.dtype)[:, None, :].expand(x.shape[0], x.shape[1], -1), x, weight.transpose(-1, -2))


@torch.library.custom_op("xlabridge::mxfp4_matmul", mutates_args=())
def mxfp4_matmul(x: torch.Tensor, data: torch.Tensor, scale: torch.Tensor, expert_ids: Optional[torch.Tensor],
                 bias: Optional[torch.Tensor], block_size: int, packing: str = "spec") -> torch.Tensor:
    """``y[a] = x[a] @ W[e].T (+ bias[e])``, ``e = expert_ids[a]`` (or ``a``): ``x`` ``[A, M, K]``, ``W``
    the MXFP4 tensor (``data`` ``[E, N, K/2]`` laid out as ``packing``, a ``Packing`` value,
    ``scale`` ``[E, N, K/block_size]``), ``y`` ``[A, M, N]`` in ``x``'s dtype. On CUDA and TPU the
    weight stays MXFP4 in memory (one kernel; off CUDA a ``"decode"`` weight is repacked first)."""
    return _route_fp4_matmul(x, data, scale, expert_ids, bias, block_size, packing)


@mxfp4_matmul.register_fake
def _(x, data, scale, expert_ids, bias, block_size, packing="spec"):
    return x.new_empty((x.shape[0], x.shape[1], data.shape[-2]))
