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
