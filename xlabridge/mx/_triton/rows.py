"""The cast on CUDA tensors: one Triton kernel, one read of the input, one write of each output.

Each program takes ``TILE`` consecutive 32-element blocks as a ``[TILE, BLOCK]`` tile: it loads
the tile once (16-byte vector loads), takes each row's maximum in registers, and writes the
row's scale byte and the scaled float8 row. Nothing is staged through memory, so the kernel
moves the fewest bytes the cast allows (input + data + scale) and runs at copy bandwidth.

The arithmetic is the formulation of ``_formulation.py`` written in Triton: integer max of the
float32 bit patterns (NaN-safe), scale byte from the exponent field, multiplication by an
exact power of two, and the float32 -> e4m3 conversion, which on sm_89+ is the hardware's
round-to-nearest-even ``cvt.rn.satfinite.e4m3x2.f32``.

Why a hand-written kernel rather than torch.compile of torch code: inductor's result depends
on op order. With the reshape back to x's shape before the fp8 cast it makes two kernels (the
reduction, then a pointwise pass that reads the input again); with the cast first it fuses one
persistent-reduction kernel, whose speed then depends on the config its autotuning picks and
moves from run to run (tools/bench/results/mx_cast.json times both orders beside this kernel).
As a custom op the cast is opaque to inductor, which calls this kernel as is, whatever the
caller's op order.

Triton is imported when the first CUDA tensor reaches the cast; the kernel is compiled on its
first launch for each specialization and cached by Triton's JIT.
"""

from __future__ import annotations

import functools

import torch

from xlabridge import _optional
from xlabridge.mx import _constants as C

_FEATURE = "xlabridge.mx CUDA kernel"

# Blocks per program and warps per program. On an H100 every tile from 32 to 256 blocks with 2-8
# warps but 32x8 ran within noise of this one (tools/bench/mx_cast.py's tile sweep).
TILE = 128
NUM_WARPS = 4


def supports(block_size: int) -> bool:
    """Whether the kernel handles ``block_size`` (a power of two from 2 to 256; tl.arange needs it)."""
    return 2 <= block_size <= 256 and block_size & (block_size - 1) == 0


@functools.cache
def _kernel():
    _optional.require("triton", _FEATURE)
    import triton
    import triton.language as tl

    @triton.jit
    def mxfp8_cast_kernel(
        x_ptr,
        data_ptr,
        scale_ptr,
        n_blocks,
        blocks_per_row,
        row_stride,
        BLOCK: tl.constexpr,
        TILE: tl.constexpr,
        RCEIL: tl.constexpr,
        CONTIGUOUS: tl.constexpr,
        WIDE_INDEX: tl.constexpr,
        E4M3_MAX: tl.constexpr,
        E4M3_EMAX: tl.constexpr,
        NAN_CODE: tl.constexpr,
        RCEIL_RECIPROCAL: tl.constexpr,
        BIAS: tl.constexpr,
        MANTISSA_BITS: tl.constexpr,
        MANTISSA_MASK: tl.constexpr,
        ABS_MASK: tl.constexpr,
        INF_BITS: tl.constexpr,
        HALF_SUBNORMAL: tl.constexpr,
    ):
        pid = tl.program_id(0)
        if WIDE_INDEX:
            pid = pid.to(tl.int64)
        block = pid * TILE + tl.arange(0, TILE)
        in_range = block < n_blocks
        lane = tl.arange(0, BLOCK)
        if CONTIGUOUS:
            src = block * BLOCK
        else:
            src = (block // blocks_per_row) * row_stride + (block % blocks_per_row) * BLOCK
        x = tl.load(x_ptr + src[:, None] + lane[None, :], mask=in_range[:, None], other=0.0, eviction_policy="evict_first")
        x32 = x.to(tl.float32)
        abs_bits = x32.to(tl.int32, bitcast=True) & ABS_MASK
        amax_bits = tl.max(abs_bits, axis=1)
        if RCEIL:
            descale = amax_bits.to(tl.float32, bitcast=True) * RCEIL_RECIPROCAL
            bits = descale.to(tl.int32, bitcast=True)
            exponent = bits >> MANTISSA_BITS
            mantissa = bits & MANTISSA_MASK
            round_up = tl.where(exponent == 0, mantissa > HALF_SUBNORMAL, mantissa != 0)
            code = exponent + round_up.to(tl.int32)
        else:
            code = tl.maximum((amax_bits >> MANTISSA_BITS) - E4M3_EMAX, 0)
        code = tl.where(amax_bits >= INF_BITS, NAN_CODE, code)
        tl.store(scale_ptr + block, code.to(tl.uint8), mask=in_range)
        reciprocal = ((2 * BIAS - code) << MANTISSA_BITS).to(tl.float32, bitcast=True)
        scaled = x32 * reciprocal[:, None]
        scaled = tl.minimum(tl.maximum(scaled, -E4M3_MAX), E4M3_MAX)
        scaled = tl.where((code == NAN_CODE)[:, None], float("nan"), scaled)
        dst = block[:, None] * BLOCK + lane[None, :]
        tl.store(data_ptr + dst, scaled.to(tl.float8e4nv), mask=in_range[:, None])

    return mxfp8_cast_kernel


def _rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` as a 2-D ``[rows, K]`` view with unit inner stride, copying only if no view exists."""
    if x.stride(-1) == 1:
        try:
            return x.view(-1, x.shape[-1])
        except RuntimeError:
            pass
    return x.contiguous().view(-1, x.shape[-1])


def to_mxfp8(x: torch.Tensor, block_size: int, rounding: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(data, scale)`` of CUDA tensor ``x`` from one kernel launch."""
    kernel = _kernel()
    K = x.shape[-1]
    data = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty(x.shape[:-1] + (K // block_size,), dtype=torch.uint8, device=x.device)
    n_blocks = scale.numel()
    if n_blocks == 0:
        return data, scale
    rows = _rows(x)
    row_stride = rows.stride(0)
    contiguous = row_stride == K or rows.shape[0] == 1
    wide = max(rows.shape[0] * row_stride, x.numel()) >= 2**31 - 1
    grid = (-(-n_blocks // TILE),)
    with torch.cuda.device(x.device):
        kernel[grid](
            rows,
            data,
            scale,
            n_blocks,
            K // block_size,
            row_stride,
            BLOCK=block_size,
            TILE=TILE,
            RCEIL=rounding == "rceil",
            CONTIGUOUS=contiguous,
            WIDE_INDEX=wide,
            E4M3_MAX=C.E4M3_MAX,
            E4M3_EMAX=C.E4M3_EMAX,
            NAN_CODE=C.E8M0_NAN,
            RCEIL_RECIPROCAL=C.RCEIL_RECIPROCAL,
            BIAS=C.E8M0_BIAS,
            MANTISSA_BITS=C.F32_MANTISSA_BITS,
            MANTISSA_MASK=C.F32_MANTISSA_MASK,
            ABS_MASK=C.F32_ABS_MASK,
            INF_BITS=C.F32_INF_BITS,
            HALF_SUBNORMAL=C.F32_HALF_SUBNORMAL_MANTISSA,
            num_warps=NUM_WARPS,
        )
    return data, scale

