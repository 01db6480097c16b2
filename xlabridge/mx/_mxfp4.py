"""The MXFP4 cast's public functions and ``MXFP4Tensor`` (the semantics are in the package's
docstring); ``xlabridge.mx`` exports them, and the MXFP4 linear (``_mxfp4_linear.py``) uses them."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from xlabridge.mx import _checks, _dispatch
from xlabridge.mx import _constants as C
from xlabridge.mx._constants import DEFAULT_BLOCK_SIZE, Rounding


@dataclass(frozen=True)
class MXFP4Tensor:
    """An MXFP4 tensor of logical shape ``[..., K]``: ``data`` holds the E2M1 elements packed two
    per byte along the last dimension (uint8 ``[..., K/2]``, element 2i in the low nibble, 2i+1 in
    the high one) and ``scale`` one E8M0 byte per ``block_size`` elements (uint8
    ``[..., K/block_size]``). This is the layout of gpt-oss checkpoints' ``*_blocks`` and
    ``*_scales`` with the block dimension merged into the last one (``from_checkpoint``)."""

    data: torch.Tensor
    scale: torch.Tensor
    block_size: int = DEFAULT_BLOCK_SIZE
    orig_dtype: torch.dtype = torch.bfloat16

    @property
    def shape(self) -> torch.Size:
        """The logical shape (the tensor this encodes): ``data``'s with the last dimension doubled."""
        return self.data.shape[:-1] + (C.FP4_PER_BYTE * self.data.shape[-1],)

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """``from_mxfp4(self, dtype)``; ``dtype`` defaults to the original dtype."""
        return from_mxfp4(self, dtype)

    @classmethod
    def from_checkpoint(cls, blocks: torch.Tensor, scales: torch.Tensor, orig_dtype: torch.dtype = torch.bfloat16
                        ) -> MXFP4Tensor:
        """The MXFP4 tensor of a checkpoint's ``*_blocks`` (uint8 ``[..., G, block_size / 2]``) and
        ``*_scales`` (uint8 ``[..., G]``), as gpt-oss stores its expert weights: ``data`` is
        ``blocks`` with its last two dimensions merged (a view, no copy), ``scale`` is ``scales``.
        For an expert weight ``[E, N, G, 16]`` the logical shape is ``[E, N, 32 G]``, the
        ``torch.nn.Linear`` orientation (out_features, in_features); transformers'
        ``convert_moe_packed_tensors`` returns its transpose, ``[E, 32 G, N]``.

        Raises:
            TypeError, ValueError: the tensors are not uint8, or their shapes do not match.
        """
        for name, tensor in (("blocks", blocks), ("scales", scales)):
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if blocks.dim() < 2:
            raise ValueError(f"blocks must be [..., G, bytes per block], got shape {tuple(blocks.shape)}")
        if tuple(scales.shape) != tuple(blocks.shape[:-1]):
            raise ValueError(
                f"scales must have blocks' shape without its last dimension, {tuple(blocks.shape[:-1])}, "
                f"got {tuple(scales.shape)}"
            )
        block_size = C.FP4_PER_BYTE * blocks.shape[-1]
        data = blocks.reshape(*blocks.shape[:-2], blocks.shape[-2] * blocks.shape[-1])
        _checks.check_fp4_packed(data, scales, block_size, what="blocks")
        return cls(data=data, scale=scales, block_size=block_size, orig_dtype=orig_dtype)

    def to_checkpoint(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(blocks, scales)`` in the checkpoint layout: ``data`` as ``[..., G, block_size / 2]``."""
        groups = self.scale.shape[-1]
        return self.data.reshape(*self.data.shape[:-1], groups, self.block_size // C.FP4_PER_BYTE), self.scale


def to_mxfp4(x: torch.Tensor, block_size: int = DEFAULT_BLOCK_SIZE, rounding: str | Rounding = Rounding.FLOOR
             ) -> MXFP4Tensor:
    """Cast ``x`` (float32, bfloat16 or float16, any leading shape) to MXFP4 along its last dimension.

    Args:
        x: the tensor; its last dimension must be a multiple of ``block_size``.
        block_size: elements per shared scale (the spec's k = 32); even.
        rounding: ``Rounding.FLOOR``/``"floor"`` (the spec's scale, 2**(floor(log2 amax) - 2)) or
            ``Rounding.RCEIL``/``"rceil"`` (amax * fl32(1/6) rounded up to a power of two).

    Raises:
        TypeError: ``x`` is not a float32/bfloat16/float16 tensor, or ``block_size`` not an int.
        ValueError: ``block_size`` is not positive and even or does not divide the last dimension,
            or ``rounding`` is unknown.
    """
    _checks.check_fp4_block_size(block_size)
    _checks.check_cast_args(x, block_size, rounding)
    data, scale = _dispatch.mxfp4_cast(x, block_size, Rounding(rounding).value)
    return MXFP4Tensor(data=data, scale=scale, block_size=block_size, orig_dtype=x.dtype)


def from_mxfp4(mx: MXFP4Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Dequantize ``mx``: each element times its block's scale, exact in float32, returned in
    ``dtype`` (default: the dtype ``mx`` was cast from; one rounding, where ``dtype`` is narrower).
    Blocks with scale 0xFF are NaN."""
    if not isinstance(mx, MXFP4Tensor):
        raise TypeError(f"mx must be an MXFP4Tensor (from to_mxfp4 or MXFP4Tensor.from_checkpoint), got {type(mx).__name__}")
    dtype = mx.orig_dtype if dtype is None else dtype
    _checks.check_dequantize_dtype(dtype)
    _checks.check_fp4_packed(mx.data, mx.scale, mx.block_size)
    return _dispatch.mxfp4_dequantize(mx.data, mx.scale, mx.block_size, dtype)
