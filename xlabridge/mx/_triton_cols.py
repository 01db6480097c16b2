"""Column-wise and both-layouts casts on CUDA tensors: one Triton kernel each, one read of the input.

``x`` is viewed as ``[A, R, B]`` (``R`` the blocked dimension; a view with its own strides, copied
only where no such view exists). Each program loads a ``[TILE_R, TILE_B]`` tile of one matrix
(coalesced along ``B``), takes each column block's maximum down the rows in registers, and
stores the scaled tile transposed into the ``[A, B, R]`` output and its scale bytes into
``[A, B, R/32]`` (Triton moves the tile through shared memory for the transposed, coalesced
stores). The both-layouts kernel also takes each row block's maximum along ``B`` and stores the
row-wise data and scale of the same tile: four outputs from one load. The arithmetic is
``_triton.py``'s (the formulation of ``_formulation.py``), bit for bit.

Tiles and warps: ``CONFIG``, chosen from the ``CONFIGS`` the benchmark times on the H100 (a fixed
choice rather than ``triton.autotune``, which also cannot run under Triton's CPU interpreter
that the CPU tests use).
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
    (64, 128, 4, False, False), (32, 256, 4, True, False), (64, 128, 2, False, True), (64, 128, 2, False, False),
    (64, 128, 1, False, True), (64, 256, 2, False, True), (128, 64, 2, False, True), (64, 64, 2, False, True),
    (64, 64, 1, False, True), (32, 128, 2, False, True), (32, 128, 2, True, False), (32, 64, 1, False, True),
    (32, 64, 2, False, False), (128, 128, 4, False, True), (64, 128, 4, False, True), (32, 256, 2, True, False),
)
"""(TILE_R, TILE_B, num_warps, B_FIRST, PRE) candidates (B_FIRST: the grid's fastest axis walks
``B``; PRE: reduce the column blocks in the tile as loaded and transpose only the float8 and scale
bytes, rather than transpose the input tile first); each tile holds whole blocks of up to 32 elements both
ways (larger block sizes take ``_triton.py``'s kernel on a transposed copy)."""


CONFIG = (64, 128, 2, False, False)
"""The (TILE_R, TILE_B, num_warps, B_FIRST, PRE) the column-wise kernel runs with: the fastest at
256 MB on the H100 (``tools/bench/mx_cast.py --cols``, the last of six sweeps): 2 warps, 0.171 ms
against 0.202-0.211 ms with 4 (a column block's 32 rows then span fewer warps); PRE and B_FIRST
within 1%; taller tiles, whose scale rows are whole sectors, slower. The sweep checks every
config's bytes against those of the config the CUDA tests ran with, on randn and special values."""
CONFIG_BOTH = (32, 128, 2, True, False)
"""The same for the both-layouts kernel (0.272 ms, against 0.288-0.298 ms with 4 warps)."""


@functools.cache
def _kernels():
    _optional.require("triton", _FEATURE)
    from xlabridge.mx._triton_cols_kernel import mxfp8_cast_cols_kernel

    return mxfp8_cast_cols_kernel


def supports(block_size: int) -> bool:
    """Block sizes the kernels take: powers of two from 2 to 32 (a tile holds whole blocks)."""
    return 2 <= block_size <= 32 and block_size & (block_size - 1) == 0


def _launch(x3: torch.Tensor, block_size: int, rounding: str, both: bool,
            config: tuple[int, int, int, bool, bool] | None = None):
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

        tile_r, tile_b, warps, b_first, pre = config or (CONFIG_BOTH if both else CONFIG)
        tile_r = max(tile_r, block_size)  # whole column blocks per tile
        if both:
            tile_b = max(tile_b, block_size)  # and whole row blocks
        tiles_r, tiles_b = -(-R // tile_r), -(-B // tile_b)
        grid = (tiles_b, tiles_r, A) if b_first else (tiles_r, tiles_b, A)

        with torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext():  # CPU: Triton's interpreter
            kernel[grid](
                x3, col_data, col_scale, row_data, row_scale, R, B, x3.stride(0), x3.stride(1), x3.stride(2),
                BLOCK=block_size, RCEIL=rounding == "rceil", RECIPROCAL=C.RCEIL_RECIPROCAL, BOTH=both, WIDE_INDEX=wide,
                TILE_R=tile_r, TILE_B=tile_b, B_FIRST=b_first, PRE=pre, num_warps=warps,
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
        from xlabridge.mx import _triton

        return _triton.to_mxfp8(x.movedim(dim, -1).contiguous(), block_size, rounding)
    col_data, col_scale, _, _ = _launch(_view_3d(x, dim), block_size, rounding, both=False)
    moved = moved_shape(tuple(x.shape), dim)
    return col_data.view(moved), col_scale.view(moved[:-1] + (moved[-1] // block_size,))


def to_mxfp8_both(x: torch.Tensor, block_size: int, rounding: str):
    """``(row data, row scale, col data, col scale)`` of ``x`` from one kernel launch."""
    shape = tuple(x.shape)
    if block_size > 32:
        from xlabridge.mx import _triton

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
