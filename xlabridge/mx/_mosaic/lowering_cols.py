"""The column-wise, both-layouts and dequantizing Mosaic kernels (``_mosaic_cols.py``,
``_mosaic_dequant.py``) as ``tpu_custom_call``s in torch_xla's lazy graph, lowered as ``_tpu.py``
lowers the row-wise cast (JAX in this process, a private CPU device for the assignment, payloads
cached per shape and options).

A ``dim`` cast views ``x`` as ``[A, R, B]`` (``R`` the blocked dimension): free when ``dim`` is the
second-to-last dimension; for an earlier one the reshape of the minor dimensions is a relayout
XLA makes before the kernel.
"""

from __future__ import annotations

import functools
import math

import torch

from xlabridge._upstream import torch_xla as upstream_xla
from xlabridge.mx._mosaic import lowering as _tpu

_TARGET = "tpu_custom_call"


def _view_3d(shape: tuple[int, ...], dim: int) -> tuple[int, int, int]:
    return (math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1 :]))


def takes(x: torch.Tensor, block_size: int, dim: int, both: bool = False) -> bool:
    """Whether the Mosaic kernel takes the ``dim`` cast (``both``: the both-layouts cast) of ``x``,
    given that ``_tpu.takes(x, block_size)`` (a TPU lowering, JAX installed, dtype and block size)."""
    from xlabridge.mx._mosaic import cols as _mosaic_cols

    return _mosaic_cols.supports(_view_3d(tuple(x.shape), dim), _tpu._JAX_DTYPES[x.dtype], block_size, both)


def to_mxfp8_dim(x: torch.Tensor, block_size: int, rounding: str, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(data, scale)`` of ``x.movedim(dim, -1)`` from one ``tpu_custom_call`` (lazy)."""
    from xlabridge.mx._checks import moved_shape

    A, R, B = shape3 = _view_3d(tuple(x.shape), dim)
    payload = _payload("cols", shape3, _tpu._JAX_DTYPES[x.dtype], block_size, rounding)
    data, scale = upstream_xla.tpu_custom_call(
        [x.reshape(shape3)], payload, [[A, B, R], [A, B, R // block_size]], [torch.float8_e4m3fn, torch.uint8]
    )
    moved = moved_shape(tuple(x.shape), dim)
    return data.reshape(moved), scale.reshape(moved[:-1] + (R // block_size,))


def to_mxfp8_both(x: torch.Tensor, block_size: int, rounding: str):
    """``(row data, row scale, col data, col scale)`` of ``x`` from one ``tpu_custom_call`` (lazy)."""
    shape = tuple(x.shape)
    A, R, B = shape3 = _view_3d(shape, x.dim() - 2)
    payload = _payload("both", shape3, _tpu._JAX_DTYPES[x.dtype], block_size, rounding)
    # the kernel's outputs in pallas_call order: col data, col scale, row data, row scale
    col_data, col_scale, row_data, row_scale = upstream_xla.tpu_custom_call(
        [x.reshape(shape3)],
        payload,
        [[A, B, R], [A, B, R // block_size], [A, R, B], [A, R, B // block_size]],
        [torch.float8_e4m3fn, torch.uint8, torch.float8_e4m3fn, torch.uint8],
    )
    moved = shape[:-2] + (shape[-1], shape[-2])
    return (
        row_data.reshape(shape),
        row_scale.reshape(shape[:-1] + (shape[-1] // block_size,)),
        col_data.reshape(moved),
        col_scale.reshape(moved[:-1] + (moved[-1] // block_size,)),
    )


def dequantize_takes(data: torch.Tensor, block_size: int, dtype: torch.dtype) -> bool:
    """Whether ``from_mxfp8`` of XLA tensor ``data`` into ``dtype`` takes the Mosaic kernel."""
    from xlabridge.tpu import _lowering
    from xlabridge import _optional

    if _lowering.lowering_for(data.device) is not _lowering.LoweringTarget.TPU or not _optional.is_available("jax"):
        return False
    from xlabridge.mx._mosaic import dequant as _mosaic_dequant

    return data.dim() > 0 and _mosaic_dequant.supports(_tpu._JAX_DTYPES.get(dtype, ""), block_size)


def from_mxfp8(data: torch.Tensor, scale: torch.Tensor, block_size: int, dtype: torch.dtype) -> torch.Tensor:
    """The dequantized tensor from one ``tpu_custom_call`` (lazy)."""
    from xlabridge.mx._mosaic import rows as _mosaic

    shape3 = _mosaic.as_3d(tuple(data.shape))
    payload = _payload("dequant", shape3, _tpu._JAX_DTYPES[dtype], block_size, "", _tpu._vmem_bytes(data.device))
    scale3 = shape3[:2] + (shape3[2] // block_size,)
    (values,) = upstream_xla.tpu_custom_call(
        [data.reshape(shape3), scale.reshape(scale3)], payload, [list(shape3)], [dtype]
    )
    return values.reshape(data.shape)


@functools.lru_cache(maxsize=128)
def _payload(kind: str, shape3: tuple[int, int, int], dtype: str, block_size: int, rounding: str,
             vmem_bytes: int | None = None) -> str:
    """The backend config of a Mosaic kernel (``kind``: cols, both, dequant) lowered for TPU."""
    import jax

    if kind == "dequant":
        from xlabridge.mx._mosaic import dequant as _mosaic_dequant

        tiles = _mosaic_dequant.tiles_for(shape3, dtype, block_size, vmem_bytes)
        fn = functools.partial(_mosaic_dequant.dequantize_3d, block_size=block_size, dtype=dtype, tiles=tiles)
        scale3 = shape3[:2] + (shape3[2] // block_size,)
        args = (jax.ShapeDtypeStruct(shape3, "float8_e4m3fn"), jax.ShapeDtypeStruct(scale3, "uint8"))
    else:
        from xlabridge.mx._mosaic import cols as _mosaic_cols

        cast = _mosaic_cols.cast_both_3d if kind == "both" else _mosaic_cols.cast_cols_3d
        fn = functools.partial(cast, block_size=block_size, rounding=rounding)
        args = (jax.ShapeDtypeStruct(shape3, dtype),)
    sharding = jax.sharding.SingleDeviceSharding(_tpu._lowering_device())
    lowered = (
        jax.jit(fn, in_shardings=(sharding,) * len(args), out_shardings=sharding)
        .trace(*args)
        .lower(lowering_platforms=("tpu",))
    )
    return _tpu.kernel_config(lowered, f"MXFP8 {kind}")
