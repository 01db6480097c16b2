"""The MXFP4 cast's public functions and ``MXFP4Tensor`` (the semantics are in the package's
docstring); ``xlabridge.mx`` exports them, and the MXFP4 linear (``_mxfp4_linear.py``) uses them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from xlabridge.mx import _checks, _dispatch
from xlabridge.mx import _constants as C
from xlabridge.mx._constants import DEFAULT_BLOCK_SIZE, Rounding
from xlabridge.mx._fp4_packing import Packing

_PACKINGS = tuple(p.value for p in Packing)
_WORD_BYTES = 4  # a packing permutes the bits of each 32-bit word: eight elements


def _packing_arg(packing: object, name: str = "packing") -> Packing:
    """``packing`` as a ``Packing``: the enum itself or its string value; anything else is a
    ValueError naming ``name``."""
    if isinstance(packing, Packing):
        return packing
    if isinstance(packing, str) and packing in _PACKINGS:
        return Packing(packing)
    raise ValueError(f"{name} must be one of {_PACKINGS} (an xlabridge.mx.Packing or its value), got {packing!r}")


def _check_repackable(data: torch.Tensor) -> None:
    if not isinstance(data, torch.Tensor) or data.dtype != torch.uint8 or data.dim() == 0:
        raise TypeError(f"data must be a uint8 tensor of packed MXFP4 bytes to repack, got "
                        f"{getattr(data, 'dtype', type(data).__name__)}")
    if data.shape[-1] % _WORD_BYTES:
        raise ValueError(
            f"data's last dimension ({data.shape[-1]} bytes) must be a multiple of {_WORD_BYTES} to change "
            f"its packing: a packing permutes the bits of each 32-bit word (eight elements)"
        )


@dataclass(frozen=True)
class MXFP4Tensor:
    """An MXFP4 tensor of logical shape ``[..., K]``: ``data`` holds the E2M1 elements packed two
    per byte along the last dimension (uint8 ``[..., K/2]``, element 2i in the low nibble, 2i+1 in
    the high one) and ``scale`` one E8M0 byte per ``block_size`` elements (uint8
    ``[..., K/block_size]``). This is the layout of gpt-oss checkpoints' ``*_blocks`` and
    ``*_scales`` with the block dimension merged into the last one (``from_checkpoint``).

    ``packing`` says how ``data``'s bits hold the elements. ``Packing.SPEC`` (the default) is the
    layout above: checkpoints' and ``to_mxfp4``'s. ``Packing.DECODE`` (``repack("decode")``) keeps
    every element in its row's span of 128 (the same scales) and moves it to where the CUDA decode
    kernels (Hopper and newer, bfloat16 ``x`` of 1 to 64 tokens) read it: each 32-bit word's bits
    in the order they decode with fewer integer operations, the span's words in the order in which
    those kernels take ``x`` as it lies in memory, without permutes (``_fp4_packing``): for a weight
    that CUDA decode reads many times. Where nothing reads it as such (TPU, other XLA devices, CPU, ``dequantize``,
    ``to_checkpoint``; on CUDA, calls the decode kernels do not take) a ``DECODE`` tensor is
    repacked to ``SPEC`` on each call, one more pass over the weight; off CUDA its results are its
    ``SPEC`` twin's bit for bit.
    """

    data: torch.Tensor
    scale: torch.Tensor
    block_size: int = DEFAULT_BLOCK_SIZE
    orig_dtype: torch.dtype = torch.bfloat16
    packing: Packing = Packing.SPEC

    def __post_init__(self) -> None:
        # only the packing is checked here: the tensors are checked where they are used, so that a
        # traced or fake tensor can be wrapped
        if not isinstance(self.packing, Packing):
            object.__setattr__(self, "packing", _packing_arg(self.packing))

    @property
    def shape(self) -> torch.Size:
        """The logical shape (the tensor this encodes): ``data``'s with the last dimension doubled."""
        return self.data.shape[:-1] + (C.FP4_PER_BYTE * self.data.shape[-1],)

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """``from_mxfp4(self, dtype)``; ``dtype`` defaults to the original dtype."""
        return from_mxfp4(self, dtype)

    def repack(self, packing: Packing | str) -> MXFP4Tensor:
        """This tensor with ``data`` laid out as ``packing`` (a ``Packing`` or ``"spec"``/``"decode"``):
        ``self`` where it already is, else a new tensor whose ``data`` is a new tensor on the same
        device (the same values, ``scale`` shared). ``w.repack("decode")`` once, before a CUDA
        decode loop reads ``w`` many times, is the intended use.

        Raises:
            ValueError: ``packing`` is not a packing, or ``data``'s last dimension is not a whole
                number of 32-bit words (a multiple of 4 bytes).
            TypeError: ``data`` is not a uint8 tensor.
        """
        packing = _packing_arg(packing)
        if packing is self.packing:
            return self
        _check_repackable(self.data)
        data = _dispatch.mxfp4_repack(self.data, packing.value, self.packing.value)
        return dataclasses.replace(self, data=data, packing=packing)

    @classmethod
    def from_checkpoint(cls, blocks: torch.Tensor, scales: torch.Tensor, orig_dtype: torch.dtype = torch.bfloat16
                        ) -> MXFP4Tensor:
        """The MXFP4 tensor of a checkpoint's ``*_blocks`` (uint8 ``[..., G, block_size / 2]``) and
        ``*_scales`` (uint8 ``[..., G]``), as gpt-oss stores its expert weights: ``data`` is
        ``blocks`` with its last two dimensions merged (a view, no copy), ``scale`` is ``scales``.
        For an expert weight ``[E, N, G, 16]`` the logical shape is ``[E, N, 32 G]``, the
        ``torch.nn.Linear`` orientation (out_features, in_features); transformers'
        ``convert_moe_packed_tensors`` returns its transpose, ``[E, 32 G, N]``. Checkpoints are in
        ``Packing.SPEC``, and so is the result.

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
        """``(blocks, scales)`` in the checkpoint layout: ``data`` as ``[..., G, block_size / 2]``, in
        ``Packing.SPEC`` (a ``DECODE`` tensor's data is repacked first, a new tensor; a ``SPEC``
        tensor's blocks are a view of its data)."""
        data = self.repack(Packing.SPEC).data
        groups = self.scale.shape[-1]
        return data.reshape(*data.shape[:-1], groups, self.block_size // C.FP4_PER_BYTE), self.scale


def to_mxfp4(x: torch.Tensor, block_size: int = DEFAULT_BLOCK_SIZE, rounding: str | Rounding = Rounding.FLOOR
             ) -> MXFP4Tensor:
    """Cast ``x`` (float32, bfloat16 or float16, any leading shape) to MXFP4 along its last dimension,
    in ``Packing.SPEC`` (``.repack("decode")`` for CUDA decode).

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
    Blocks with scale 0xFF are NaN. A ``Packing.DECODE`` tensor is repacked to ``SPEC`` first (the
    same values as its ``SPEC`` twin, bit for bit)."""
    if not isinstance(mx, MXFP4Tensor):
        raise TypeError(f"mx must be an MXFP4Tensor (from to_mxfp4 or MXFP4Tensor.from_checkpoint), got {type(mx).__name__}")
    dtype = mx.orig_dtype if dtype is None else dtype
    _checks.check_dequantize_dtype(dtype)
    _checks.check_fp4_packed(mx.data, mx.scale, mx.block_size)
    mx = mx.repack(Packing.SPEC)
    return _dispatch.mxfp4_dequantize(mx.data, mx.scale, mx.block_size, dtype)
