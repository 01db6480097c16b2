"""Argument checks of the public MX functions: each error names the argument and what it needs."""

from __future__ import annotations

import torch

from xlabridge.mx import _constants as C

INPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def check_cast_args(x: object, block_size: object, rounding: object, last_dim: bool = True) -> None:
    """Raise TypeError/ValueError unless ``to_mxfp8(x, block_size, rounding)`` is well defined
    (``last_dim=False``: blocks along another dimension, which ``check_dim`` checks)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in INPUT_DTYPES:
        names = ", ".join(str(d).removeprefix("torch.") for d in INPUT_DTYPES)
        raise TypeError(f"x must have dtype {names}; got {x.dtype}")
    if isinstance(block_size, bool) or not isinstance(block_size, int):
        raise TypeError(f"block_size must be an int, got {type(block_size).__name__}")
    if block_size <= 0:
        raise ValueError(f"block_size must be a positive number of elements, got {block_size}")
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension: blocks run along the last one")
    if last_dim and x.shape[-1] % block_size != 0:
        raise ValueError(
            f"the last dimension of x ({x.shape[-1]}, shape {tuple(x.shape)}) must be a multiple "
            f"of block_size ({block_size})"
        )
    if rounding not in C.ROUNDING_MODES:
        raise ValueError(f"rounding must be one of {C.ROUNDING_MODES}, got {rounding!r}")


def check_dim(x: torch.Tensor, dim: object, block_size: int) -> int:
    """``dim`` normalized to ``0..x.dim()-1``; TypeError/ValueError unless it is a dimension of ``x``
    whose size is a multiple of ``block_size``."""
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"dim must be an int, got {type(dim).__name__}")
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim must be a dimension of x (shape {tuple(x.shape)}): -{x.dim()}..{x.dim() - 1}, got {dim}")
    dim %= x.dim()
    if dim == x.dim() - 1:
        check_cast_args(x, block_size, C.ROUNDING_MODES[0])
    elif x.shape[dim] % block_size != 0:
        raise ValueError(
            f"dimension {dim} of x ({x.shape[dim]}, shape {tuple(x.shape)}) must be a multiple of block_size ({block_size})"
        )
    return dim


def check_dequantize_dtype(dtype: object) -> None:
    """Raise TypeError unless ``dtype`` is a floating dtype to dequantize into."""
    if not isinstance(dtype, torch.dtype) or dtype not in INPUT_DTYPES:
        names = ", ".join(str(d).removeprefix("torch.") for d in INPUT_DTYPES)
        raise TypeError(f"dtype must be one of {names}, got {dtype!r}")


def moved_shape(shape: tuple[int, ...], dim: int) -> tuple[int, ...]:
    """``shape`` with dimension ``dim`` (non-negative) moved last: the data shape of a ``dim`` cast."""
    return tuple(shape[:dim]) + tuple(shape[dim + 1 :]) + (shape[dim],)


def check_fp4_block_size(block_size: object) -> None:
    """MXFP4 packs two elements per byte within a block: ``block_size`` must be a positive even int."""
    if isinstance(block_size, bool) or not isinstance(block_size, int):
        raise TypeError(f"block_size must be an int, got {type(block_size).__name__}")
    if block_size <= 0 or block_size % C.FP4_PER_BYTE:
        raise ValueError(
            f"block_size must be a positive even number of elements for MXFP4 (two per byte), got {block_size}"
        )


def check_fp4_packed(data: object, scale: object, block_size: int, what: str = "data") -> None:
    """Raise TypeError/ValueError unless ``data`` (packed bytes ``[..., K/2]``) and ``scale``
    (``[..., K/block_size]``) are the uint8 tensors of one MXFP4 tensor."""
    check_fp4_block_size(block_size)
    for name, tensor in ((what, data), ("scale", scale)):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dtype != torch.uint8:
            raise TypeError(f"{name} must be uint8 (MXFP4 {'bytes' if name == what else 'E8M0 scale bytes'}), got {tensor.dtype}")
    if data.dim() == 0:
        raise ValueError(f"{what} must have at least one dimension (the packed last one), got a scalar")
    k = C.FP4_PER_BYTE * data.shape[-1]
    if k % block_size:
        raise ValueError(
            f"{what}'s last dimension ({data.shape[-1]} bytes = {k} elements) must hold a whole number of "
            f"blocks of {block_size}"
        )
    expected = tuple(data.shape[:-1]) + (k // block_size,)
    if tuple(scale.shape) != expected:
        raise ValueError(
            f"scale must have shape {expected} ({what}'s leading shape and one byte per {block_size} elements "
            f"of its {k}), got {tuple(scale.shape)}"
        )
    if data.device != scale.device:
        raise ValueError(f"{what} and scale must be on one device, got {data.device} and {scale.device}")
