"""Column-wise and both-layouts casts on CUDA tensors: one kernel each, one read of the input.

``x`` is viewed as ``[A, R, B]`` (``R`` the blocked dimension; a view with its own strides, copied
only where no such view exists). The column-wise cast (``to_mxfp8(x, dim=...)``) on sm_89+ GPUs
with blocks of 32 is the Gluon kernel of ``_gluon_cols_kernel.py``: each thread holds a column
block's rows, so the block maximum is a register reduction and the converted bytes are stored
transposed straight from registers. Elsewhere (other block sizes, older GPUs, Triton's CPU
interpreter, a Triton without Gluon) and for both layouts it is the plain Triton kernel of
``_triton_cols_kernel.py``: each program loads a ``[TILE_R, TILE_B]`` tile (coalesced along
``B``), takes each column block's maximum, and stores the scaled tile transposed into the
``[A, B, R]`` output and its scale bytes into ``[A, B, R/32]`` (Triton moves the tile through
shared memory between the load's layout and the store's); the both-layouts kernel also takes each
row block's maximum along ``B`` and stores the row-wise data and scale of the same tile: four
outputs from one load. The arithmetic is ``_triton.py``'s (the formulation of
``_formulation.py``), bit for bit.

Tiles, warps and cache hints: ``GLUON_CONFIG`` and ``CONFIG_BOTH``, chosen from the
``GLUON_CONFIGS`` and ``CONFIGS`` that ``tools/bench/mx_cast.py`` times on the H100 (a fixed
choice rather than ``triton.autotune``, which also cannot run under Triton's CPU interpreter).
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
    (32, 128, 2, True, True, "evict_last"), (32, 128, 2, True, True, ""), (64, 64, 1, False, True, "evict_last"),
    (64, 128, 2, False, True, "evict_last"), (32, 128, 4, True, True, "evict_last"),
)
"""(TILE_R, TILE_B, num_warps, B_FIRST, PACK, LOAD_EVICT) candidates of the plain Triton kernel
(B_FIRST: the grid's fastest axis walks ``B``; PACK: an output row's scale bytes of a tile as one
store; LOAD_EVICT: the input loads' L2 eviction policy); each tile holds whole blocks of up to 32
elements both ways (larger block sizes take ``_triton.py``'s kernel on a transposed copy)."""

CONFIG_BOTH = (32, 128, 2, True, True, "evict_last")
"""The both-layouts kernel's config: on the H100 at 256 MB 0.230 ms, against 0.268 ms with the
input loads marked ``evict_first`` as they were (every kernel here lost 8-18% to that hint), 0.236
with 64 x 64 tiles (tools/bench/results/mx_dim1_tune_h100.json)."""
CONFIG = (64, 128, 2, False, True, "evict_last")
"""The plain Triton kernel's config for the column-wise cast where the Gluon kernel does not run
(0.152 ms at 256 MB on the H100 with the input loads not marked ``evict_first``; 0.176 ms marked)."""

GLUON_CONFIGS = (
    (4, 16, 2, 2, "", "evict_last"), (4, 16, 2, 2, "evict_last", "evict_last"), (4, 16, 2, 2, "evict_last", ""),
    (2, 8, 2, 4, "evict_last", ""), (2, 16, 2, 2, "evict_last", "evict_last"), (4, 16, 2, 2, "", ""),
)
"""(TR, VEC_BYTES, num_warps, NB, LOAD_EVICT, STORE_EVICT) candidates of the Gluon kernel: TR
threads down a column block (32 // TR rows each), VEC_BYTES of the input along B per row and
thread, NB blocks down R per program, the L2 eviction policies of the input loads and the data
stores."""
GLUON_CONFIG = (4, 16, 2, 2, "", "evict_last")
"""The Gluon kernel's config: on the H100 0.0398-0.0403 ms at 64 MB, 0.149-0.150 ms at 256 MB,
0.570 ms at 1 GB, the fastest of two rounds at 64 MB; 4 threads per column block (8 rows, 8-byte
stores, a full 32-byte sector per column across them) keep 109 registers, against 192 with 2; the
next block's load issued before this one's work (without it 0.157-0.162 ms); the data stores
marked ``evict_last`` (0.151 ms unmarked); loads marked ``evict_first`` 0.174 ms
(tools/bench/results/mx_dim1_tune_h100.json, every config checked byte for byte)."""


@functools.cache
def _kernels():
    _optional.require("triton", _FEATURE)
    from xlabridge.mx._triton_cols_kernel import mxfp8_cast_cols_kernel

    return mxfp8_cast_cols_kernel


@functools.cache
def _gluon_module():
    """``_gluon_cols_kernel``, or None where this Triton has no Gluon."""
    _optional.require("triton", _FEATURE)
    try:
        from xlabridge.mx import _gluon_cols_kernel
    except ImportError:
        return None
    return _gluon_cols_kernel


def supports(block_size: int) -> bool:
    """Block sizes the kernels take: powers of two from 2 to 32 (a tile holds whole blocks)."""
    return 2 <= block_size <= 32 and block_size & (block_size - 1) == 0


def _hardware_convert(device: torch.device) -> bool:
    """Whether the float32 -> e4m3 conversion is the hardware's ``cvt.rn.satfinite`` (sm_89+), whose
    saturation and NaN the kernels then use rather than an explicit clamp and select."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 9)


def _launch_gluon(x3: torch.Tensor, rounding: str, module, config: tuple[int, int, int, int, str, str] | None = None):
    A, R, B = x3.shape
    dev = x3.device
    col_data = torch.empty((A, B, R), dtype=torch.float8_e4m3fn, device=dev)
    col_scale = torch.empty((A, B, R // 32), dtype=torch.uint8, device=dev)
    if x3.numel():
        tr, vec_bytes, warps, nb, load_evict, store_evict = config or GLUON_CONFIG
        load_layout, layout, tile_b = module.layouts(vec_bytes // x3.element_size(), tr, warps)
        wide = max(x3.numel(), A * x3.stride(0) if A else 0) >= 2**31 - 1
        with torch.cuda.device(dev):
            module.mxfp8_cast_cols_kernel_gluon[(-(-R // (32 * nb)), -(-B // tile_b), A)](
                x3, col_data, col_scale, R, B, x3.stride(0), x3.stride(1), x3.stride(2),
                RCEIL=rounding == "rceil", RECIPROCAL=C.RCEIL_RECIPROCAL, WIDE_INDEX=wide,
                LOAD_LAYOUT=load_layout, LAYOUT=layout, TILE_B=tile_b, NB=nb, PACK=nb > 1 and R % (32 * nb) == 0,
                LOAD_EVICT=load_evict, STORE_EVICT=store_evict, num_warps=warps,
            )
    return col_data, col_scale


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
        from xlabridge.mx import _triton

        return _triton.to_mxfp8(x.movedim(dim, -1).contiguous(), block_size, rounding)
    x3 = _view_3d(x, dim)
    module = _gluon_module() if block_size == 32 and _hardware_convert(x3.device) else None
    if module is not None:
        col_data, col_scale = _launch_gluon(x3, rounding, module)
    else:
        col_data, col_scale, _, _ = _launch(x3, block_size, rounding, both=False)
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
