"""The MX cast's public functions and ``MXTensor`` (see the package's docstring for the
semantics); ``xlabridge.mx`` exports them, and the MX linear uses them from here."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from xlabridge.mx import _checks, _dispatch
from xlabridge.mx._constants import DEFAULT_BLOCK_SIZE, Rounding


@dataclass(frozen=True)
class MXTensor:
    """An MXFP8 tensor: ``data`` (float8_e4m3fn) and ``scale`` (uint8 E8M0 bytes, shape
    ``data.shape[:-1] + (K // block_size,)``), plus what dequantizing needs. Blocks always run
    along ``data``'s last dimension: ``data`` has the shape of the tensor it encodes, which for
    ``to_mxfp8(x, dim=d)`` is ``x.movedim(d, -1)``."""

    data: torch.Tensor
    scale: torch.Tensor
    block_size: int
    orig_dtype: torch.dtype

    @property
    def shape(self) -> torch.Size:
        """The shape of the tensor this encodes."""
        return self.data.shape

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """``from_mxfp8(self, dtype)``; ``dtype`` defaults to the original dtype."""
        return from_mxfp8(self, dtype)


def to_mxfp8(
    x: torch.Tensor, block_size: int = DEFAULT_BLOCK_SIZE, rounding: str | Rounding = Rounding.FLOOR, dim: int = -1
) -> MXTensor:
    """Cast ``x`` (float32, bfloat16 or float16, any leading shape) to MXFP8.

    Args:
        x: the tensor; dimension ``dim`` must be a multiple of ``block_size``.
        block_size: elements per shared scale, along ``dim`` (the spec's k = 32).
        rounding: ``Rounding.FLOOR``/``"floor"`` (the spec's scale) or ``Rounding.RCEIL``/``"rceil"``
            (hardware's round-up scale).
        dim: the dimension the blocks run along (last by default). For any other dimension the
            result is the MX tensor of ``x.movedim(dim, -1)``, bit for bit
            ``to_mxfp8(x.movedim(dim, -1).contiguous())``: ``data`` has the moved shape (for a
            matrix and ``dim=0``, ``x.t()``'s, as torchao's dim1 cast) and is contiguous, and
            ``scale`` is ``data.shape[:-1] + (x.shape[dim] // block_size,)``. No transposed copy
            of ``x`` is made on CUDA and TPU: the kernel reads ``x`` in place and writes the
            moved layout.

    Raises:
        TypeError: ``x`` is not a float32/bfloat16/float16 tensor, or ``block_size``/``dim`` not an int.
        ValueError: ``block_size`` is not positive or does not divide dimension ``dim``, ``dim`` is
            not a dimension of ``x``, or ``rounding`` is unknown.
    """
    _checks.check_cast_args(x, block_size, rounding, last_dim=False)
    dim = _checks.check_dim(x, dim, block_size)
    mode = Rounding(rounding).value
    if dim == x.dim() - 1:
        data, scale = _dispatch.mxfp8_cast(x, block_size, mode)
    else:
        data, scale = _dispatch.mxfp8_cast_dim(x, block_size, mode, dim)
    return MXTensor(data=data, scale=scale, block_size=block_size, orig_dtype=x.dtype)


def to_mxfp8_both(
    x: torch.Tensor, block_size: int = DEFAULT_BLOCK_SIZE, rounding: str | Rounding = Rounding.FLOOR
) -> tuple[MXTensor, MXTensor]:
    """``(to_mxfp8(x, ...), to_mxfp8(x, ..., dim=-2))`` from one read of ``x``: the row-wise and
    the column-wise MX tensors of ``x`` (``ndim >= 2``), bit for bit those two casts. On CUDA one
    Triton kernel, on TPU one Mosaic kernel (for the shapes ``_mosaic_cols.supports`` takes), on
    other XLA devices one XLA computation. The second has the layout of ``to_mxfp8(x, dim=-2)``:
    the MX tensor of ``x.transpose(-2, -1)``.

    Raises:
        As ``to_mxfp8``; ValueError also if ``x`` has fewer than two dimensions.
    """
    _checks.check_cast_args(x, block_size, rounding, last_dim=False)
    if x.dim() < 2:
        raise ValueError(f"x must have at least two dimensions for to_mxfp8_both, got shape {tuple(x.shape)}")
    _checks.check_dim(x, -1, block_size)
    _checks.check_dim(x, -2, block_size)
    mode = Rounding(rounding).value
    row_data, row_scale, col_data, col_scale = _dispatch.mxfp8_cast_both(x, block_size, mode)
    return (
        MXTensor(data=row_data, scale=row_scale, block_size=block_size, orig_dtype=x.dtype),
        MXTensor(data=col_data, scale=col_scale, block_size=block_size, orig_dtype=x.dtype),
    )


def from_mxfp8(mx: MXTensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Dequantize ``mx``: each element times its block's scale, computed in float32, returned in
    ``dtype`` (default: the dtype ``mx`` was cast from). Blocks with scale 0xFF are NaN."""
    if not isinstance(mx, MXTensor):
        raise TypeError(f"mx must be an MXTensor (from to_mxfp8), got {type(mx).__name__}")
    dtype = mx.orig_dtype if dtype is None else dtype
    _checks.check_dequantize_dtype(dtype)
    return _dispatch.mxfp8_dequantize(mx.data, mx.scale, mx.block_size, dtype)
