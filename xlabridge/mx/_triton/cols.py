"""Column-wise and both-layouts casts on CUDA tensors: one Triton kernel each, one read of the input.

``x`` is viewed as ``[A, R, B]`` (``R`` the blocked dimension; a view with its own strides, copied
only where no such view exists). Each program loads a ``[TILE_R, TILE_B]`` tile of one matrix
(coalesced along ``B``), takes each column block's maximum down the rows in registers, and
stores the scaled tile transposed into the ``[A, B, R]`` output and its scale bytes into
``[A, B, R/32]`` (Triton moves the tile, or its float8 bytes, through shared memory for the
transposed, coalesced stores). The both-layouts kernel also takes each row block's maximum along
``B`` and stores the row-wise data and scale of the same tile: four outputs from one load. The
arithmetic is ``_triton.py``'s (the formulation of ``_formulation.py``), bit for bit.

Tiles, warps and the loads' cache hint: ``CONFIG`` and ``CONFIG_BOTH``, chosen from the
``CONFIGS`` the benchmark times on the H100 (a fixed choice rather than ``triton.autotune``, which
also cannot run under Triton's CPU interpreter that the CPU tests use).
"""

from __future__ import annotations

import contextlib
import functools

import torch

from xlabridge import _optional
from xlabridge.mx import _constants as C
from xlabridge.mx._checks import moved_shape

_FEATURE = "xlabridge.mx CUDA kernel"

CONFIGS = (
    (64, 128, 2, False, True, "evict_last"), (64, 128, 2, False, True, ""), (32, 128, 2, True, True, "evict_last"),
    (64, 128, 1, False, True, "evict_last"), (64, 64, 1, False, True, "evict_last"), (64, 128, 2, False, True, "evict_first"),
)
"""(TILE_R, TILE_B, num_warps, B_FIRST, PACK, LOAD_EVICT) candidates (B_FIRST: the grid's fastest
axis walks ``B``; PACK: a tile's scale bytes of an output row as one store; LOAD_EVICT: the input
loads' L2 eviction policy); each tile holds whole blocks of up to 32 elements both ways (larger
block sizes take ``_triton.py``'s kernel on a transposed copy)."""

CONFIG = (64, 128, 2, False, True, "evict_last")
"""The column-wise kernel's config: the fastest on the H100 of the tiles, warps and load hints
``tools/bench/mx_dim1_tune.py`` sweeps (results/mx_dim1_tune.json; docs/benchmarks.md). Loads
are not marked ``evict_first``: with that hint the same kernel moves the same DRAM bytes at a
lower share of peak bandwidth (Nsight Compute, results/mx_dim1_profile.txt). The compute uses
the conversion's own saturation and NaN (one multiply per element), 16-bit block maxima and one
packed store per row for the scale bytes, the fewest instructions per element tried.
A Gluon kernel that kept each column block in registers (no shared-memory transpose, the next
block prefetched) ran as fast as this one, so it was not kept; nor was a persistent grid (as
many programs as the GPU holds, each given the same number of tiles, for the last partial wave
of mid-sized inputs), which was slower in the same sweep."""
CONFIG_BOTH = (32, 128, 2, True, True, "evict_last")
"""The both-layouts kernel's config: on the H100 faster than with the loads marked ``evict_first``
or with 64 x 64 tiles, and faster than the two separate casts and torchao's compiled ``to_mx``
pair (results/mx_cast_cols.json; docs/benchmarks.md)."""


@functools.cache
def _kernels():
    _optional.require("triton", _FEATURE)
    from xlabridge.mx._triton.cols_kernel import mxfp8_cast_cols_kernel

    return mxfp8_cast_cols_kernel


def supports(block_size: int) -> bool:
    """Block sizes the kernels take: powers of two from 2 to 32 (a tile holds whole blocks)."""
    return 2 <= block_size <= 32 and block_size & (block_size - 1) == 0


def _hardware_convert(device: torch.device) -> bool:
    """Whether the float32 -> e4m3 conversion is the hardware's ``cvt.rn.satfinite`` (sm_89+), whose
    saturation and NaN the kernel then uses rather than an explicit clamp and select."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 9)


def _launch(x3: torch.Tensor, block_size: int, rounding: str, both: bool,
            config: tuple[int, int, int, bool, bool, str] | None = None):
    A, R, B = x3.shape
    dev = x3.device
    col_data = torch.empty((A, B, R), dtype=torch.float8_e4m3fn, device=dev)
    col_scale = torch.empty((A, B, R // block_size), dtype=torch.uint8, device=dev)
    if both:
        row_data = torch.empty((A, R, B), dtype=torch.float8_e4m3fn, device=dev)
        row_scale = torch.empty((A, R, B // block_size), dtype=torch.uint8, device=dev)
    else:
        row_data, row_scale = col_data, col_scale  # not written
    if x3.numel():
        kernel = _kernels()
        wide = max(x3.numel(), A * x3.stride(0) if A else 0) >= 2**31 - 1

        tile_r, tile_b, warps, b_first, pack, load_evict = config or (CONFIG_BOTH if both else CONFIG)
        tile_r = max(tile_r, block_size)  # whole column blocks per tile
        if both:
            tile_b = max(tile_b, block_size)  # and whole row blocks
        # packed scale stores need whole tiles along each blocked dimension
        pack = pack and R % tile_r == 0 and (not both or B % tile_b == 0)
        tiles_r, tiles_b = -(-R // tile_r), -(-B // tile_b)
        grid = (tiles_b, tiles_r, A) if b_first else (tiles_r, tiles_b, A)

        with torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext():  # CPU: Triton's interpreter
            kernel[grid](
                x3, col_data, col_scale, row_data, row_scale, R, B, x3.stride(0), x3.stride(1), x3.stride(2),
                BLOCK=block_size, RCEIL=rounding == "rceil", RECIPROCAL=C.RCEIL_RECIPROCAL, BOTH=both, WIDE_INDEX=wide,
                TILE_R=tile_r, TILE_B=tile_b, B_FIRST=b_first, HW=_hardware_convert(dev), PACK=pack,
                LOAD_EVICT=load_evict, num_warps=warps,
            )
    return col_data, col_scale, row_data, row_scale


def _view_3d(x: torch.Tensor, dim: int) -> torch.Tensor:
    shape = tuple(x.shape)
    A = 1
    for s in shape[:dim]:
        A *= s
    B = 1
    for s in shape[dim + 1 :]:
        B *= s
    try:
        return x.view(A, shape[dim], B)
    except RuntimeError:
        return x.reshape(A, shape[dim], B)


def to_mxfp8_dim(x: torch.Tensor, block_size: int, rounding: str, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(data, scale)`` of ``x.movedim(dim, -1)`` from one kernel launch that reads ``x`` in place."""
    if block_size > 32:
        from xlabridge.mx._triton import rows as _triton

        return _triton.to_mxfp8(x.movedim(dim, -1).contiguous(), block_size, rounding)
    col_data, col_scale, _, _ = _launch(_view_3d(x, dim), block_size, rounding, both=False)
    moved = moved_shape(tuple(x.shape), dim)
    return col_data.view(moved), col_scale.view(moved[:-1] + (moved[-1] // block_size,))


def to_mxfp8_both(x: torch.Tensor, block_size: int, rounding: str):
    """``(row data, row scale, col data, col scale)`` of ``x`` from one kernel launch."""
    shape = tuple(x.shape)
    if block_size > 32:
        from xlabridge.mx._triton import rows as _triton

        return (*_triton.to_mxfp8(x, block_size, rounding),
                *_triton.to_mxfp8(x.transpose(-2, -1).contiguous(), block_size, rounding))
    col_data, col_scale, row_data, row_scale = _launch(_view_3d(x, x.dim() - 2), block_size, rounding, both=True)
    moved = shape[:-2] + (shape[-1], shape[-2])
    return (
        row_data.view(shape),
        row_scale.view(shape[:-1] + (shape[-1] // block_size,)),
        col_data.view(moved),
        col_scale.view(moved[:-1] + (moved[-1] // block_size,)),
    )
