"""The MXFP4 cast and its inverse on CUDA tensors: one Triton kernel launch each (``fp4_kernels``).

The cast reads the input once and writes the packed data and the scale bytes once: each program
takes ``TILE`` consecutive 32-element blocks, takes each block's maximum in registers, and
stores the block's scale byte and its 16 packed bytes. The dequantization reads 16 bytes and a
scale byte per block and writes the 32 values. The bytes moved are the fewest the formats allow.

bfloat16 inputs whose rows start on 4-byte boundaries (all but odd views) take the word kernel
(``mxfp4_cast_bf16_kernel``: one thread per block, two elements per instruction on the GPU);
float32, float16 and such views take ``mxfp4_cast_kernel``.

``CAST_CONFIG``, ``BF16_CAST_CONFIG`` and ``DEQUANTIZE_CONFIG`` (blocks per program, warps) are
fixed choices, which ``tools/bench/mx4_cast.py`` sweeps on the GPU (rather than ``triton.autotune``,
whose timing runs would also need a GPU in the CPU tests, which run these kernels in Triton's
interpreter).
"""

from __future__ import annotations

import contextlib
import functools

import torch

from xlabridge import _optional
from xlabridge.mx._triton.rows import _rows

_FEATURE = "xlabridge.mx MXFP4 CUDA kernels"

CAST_CONFIG = (64, 4)
"""(blocks per program, warps) of the cast of float32 and float16."""
BF16_CAST_CONFIG = (32, 1, False)
"""(blocks per program, warps, quad) of the cast of bfloat16 (``mxfp4_cast_bf16_kernel``'s
``QUAD``): a multiple of 32 blocks per warp with one thread per block, 8 per warp with four."""
BF16_CONFIGS = (tuple((blocks, warps, False) for warps in (1, 2, 4, 8) for blocks in (32 * warps, 64 * warps, 128 * warps))
                + tuple((8 * warps, warps, True) for warps in (2, 4, 8, 16)))
"""What the benchmark sweeps for the bfloat16 cast."""
DEQUANTIZE_CONFIG = (128, 4)
"""(blocks per program, warps) of the dequantization."""
CONFIGS = tuple((tile, warps) for tile in (32, 64, 128, 256) for warps in (2, 4, 8))
"""What the benchmark sweeps for both."""
BLOCK_SIZE = 32
OUTPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def supports(block_size: int) -> bool:
    """Whether the kernels handle ``block_size`` (the spec's 32)."""
    return block_size == BLOCK_SIZE


@functools.cache
def _kernels():
    _optional.require("triton", _FEATURE)
    from xlabridge.mx._triton import fp4_kernels

    return fp4_kernels


def device_guard(t: torch.Tensor):
    """``torch.cuda.device`` of a CUDA tensor; nothing for the CPU tensors that Triton's
    interpreter (``TRITON_INTERPRET=1``) runs the kernels on in the CPU tests."""
    return torch.cuda.device(t.device) if t.device.type == "cuda" else contextlib.nullcontext()


def _words(rows: torch.Tensor) -> torch.Tensor | None:
    """The bfloat16 ``rows`` as int32 words (two elements each), or None where no such view exists
    (a row starting at an odd element)."""
    if rows.dtype != torch.bfloat16 or rows.data_ptr() % 4 or rows.stride(0) % 2:
        return None
    return rows.view(torch.int32)


def to_mxfp4(x: torch.Tensor, block_size: int, rounding: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(data, scale)`` of CUDA tensor ``x`` from one kernel launch."""
    K = x.shape[-1]
    data = torch.empty(x.shape[:-1] + (K // 2,), dtype=torch.uint8, device=x.device)
    scale = torch.empty(x.shape[:-1] + (K // block_size,), dtype=torch.uint8, device=x.device)
    n_blocks = scale.numel()
    if n_blocks == 0:
        return data, scale
    rows = _rows(x)
    row_stride = rows.stride(0)
    contiguous = row_stride == K or rows.shape[0] == 1
    wide = max(rows.shape[0] * row_stride, x.numel()) >= 2**31 - 1
    words = _words(rows)
    with device_guard(x):
        if words is not None:
            blocks, warps, quad = BF16_CAST_CONFIG
            _kernels().mxfp4_cast_bf16_kernel[(-(-n_blocks // blocks),)](
                words, data, scale, n_blocks, K // block_size, row_stride // 2,
                RCEIL=rounding == "rceil", BLOCKS=blocks, CONTIGUOUS=contiguous, WIDE_INDEX=wide,
                ASM=x.device.type == "cuda", QUAD=quad, num_warps=warps,
            )
        else:
            tile, warps = CAST_CONFIG
            _kernels().mxfp4_cast_kernel[(-(-n_blocks // tile),)](
                rows, data, scale, n_blocks, K // block_size, row_stride,
                RCEIL=rounding == "rceil", TILE=tile, CONTIGUOUS=contiguous, WIDE_INDEX=wide,
                num_warps=warps,
            )
    return data, scale


def from_mxfp4(data: torch.Tensor, scale: torch.Tensor, block_size: int, dtype: torch.dtype) -> torch.Tensor:
    """The values (``[..., 2 * data.shape[-1]]`` of ``dtype``) of CUDA tensors ``data`` and ``scale``
    from one kernel launch."""
    out = torch.empty(data.shape[:-1] + (2 * data.shape[-1],), dtype=dtype, device=data.device)
    n_blocks = scale.numel()
    if n_blocks == 0:
        return out
    tile, warps = DEQUANTIZE_CONFIG
    with device_guard(data):
        _kernels().mxfp4_dequantize_kernel[(-(-n_blocks // tile),)](
            data.contiguous(), scale.contiguous(), out, n_blocks, TILE=tile, WIDE_INDEX=out.numel() >= 2**31 - 1,
            num_warps=warps,
        )
    return out
