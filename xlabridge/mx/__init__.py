"""MXFP8 (OCP Microscaling v1.0) cast: float8_e4m3fn elements with one E8M0 scale per block.

``to_mxfp8(x)`` views ``x`` as blocks of ``block_size`` (32) consecutive values along its last
dimension, gives each block the shared power-of-two scale of the spec's section 6.3, and stores
``x / scale`` as float8_e4m3fn, saturating at +-448. ``from_mxfp8`` multiplies back.

Semantics, bit for bit (tests/mx checks them against a NumPy model of the spec):

* ``rounding="floor"`` (the spec's rule): scale = 2**(floor(log2(amax)) - 8), amax being the
  block's largest magnitude, clamped to E8M0's 2**-127..2**127. ``rounding="rceil"`` (NVIDIA's
  hardware conversion, torchao's RCEIL): scale = fl32(amax * fl32(1/448)) rounded up to a
  power of two, so no element saturates.
* A block of zeros gets byte 0 (2**-127) and zero data; zeros keep their sign.
* Subnormal inputs are scaled exactly like normal ones (the division by 2**-127 of torchao's
  floor mode is not reproduced: torchao used 2**-126 there; the spec divides by 2**-127).
* A block holding a NaN or an infinity gets scale byte 0xFF (NaN); E8M0 has no infinity, and
  the spec leaves no finite scale for an infinite maximum. Every data byte of such a block is
  the float8 NaN 0x7F, so the data alone also says the block is NaN.
* Scaled values round to nearest even, and finite values beyond 448 saturate to +-448.

Devices: CUDA tensors take one Triton kernel launch (reads the input once, no copies); XLA
tensors on a TPU (bfloat16, float32 and float16, block sizes 8 to 128) take one Mosaic kernel, put
into torch_xla's graph as a ``tpu_custom_call`` (``_mosaic.py``, ``_tpu.py``; where XLA:TPU still
adds a kernel around it, ``MosaicRelayoutWarning`` says so); other XLA tensors take one XLA computation built with torch_xla's XlaBuilder
(``xlabridge.hlo.kernel_count`` shows what XLA makes of it: two kernels on XLA:CPU, the fewest it
can make of two outputs, ten on TPU); other tensors use eager torch. For XLA on GPUs through
JAX, ``xlabridge.mx._pallas.to_mxfp8`` is the same formulation as one Pallas kernel. See
``_formulation.py`` for why it is written so. XLA on CPU and TPU flushes float32 subnormals to
zero, so there, subnormal inputs scale as zeros (their block's scale byte is unaffected, except
that an rceil scale below 2**-126 flushes to byte 0). Both functions are torch custom ops, so
``torch.compile`` keeps them in its graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from xlabridge.mx import _checks, _dispatch
from xlabridge.mx._constants import DEFAULT_BLOCK_SIZE, E4M3_MAX, E8M0_BIAS, E8M0_NAN, ROUNDING_MODES, Rounding

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "E4M3_MAX",
    "E8M0_BIAS",
    "E8M0_NAN",
    "MXTensor",
    "ROUNDING_MODES",
    "Rounding",
    "from_mxfp8",
    "to_mxfp8",
]


@dataclass(frozen=True)
class MXTensor:
    """An MXFP8 tensor: ``data`` (float8_e4m3fn, the original shape) and ``scale`` (uint8 E8M0
    bytes, shape ``data.shape[:-1] + (K // block_size,)``), plus what dequantizing needs."""

    data: torch.Tensor
    scale: torch.Tensor
    block_size: int
    orig_dtype: torch.dtype

    @property
    def shape(self) -> torch.Size:
        """The shape of the tensor this encodes."""
        return self.data.shape

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """``from_mxfp8(self, dtype)``; ``dtype`` defaults to the original dtype."""
        return from_mxfp8(self, dtype)


def to_mxfp8(
    x: torch.Tensor, block_size: int = DEFAULT_BLOCK_SIZE, rounding: str | Rounding = Rounding.FLOOR
) -> MXTensor:
    """Cast ``x`` (float32, bfloat16 or float16, any leading shape) to MXFP8.

    Args:
        x: the tensor; its last dimension must be a multiple of ``block_size``.
        block_size: elements per shared scale, along the last dimension (the spec's k = 32).
        rounding: ``Rounding.FLOOR``/``"floor"`` (the spec's scale) or ``Rounding.RCEIL``/``"rceil"``
            (hardware's round-up scale).

    Raises:
        TypeError: ``x`` is not a float32/bfloat16/float16 tensor, or ``block_size`` not an int.
        ValueError: ``block_size`` is not positive, does not divide the last dimension, or
            ``rounding`` is unknown.
    """
    _checks.check_cast_args(x, block_size, rounding)
    data, scale = _dispatch.mxfp8_cast(x, block_size, Rounding(rounding).value)
    return MXTensor(data=data, scale=scale, block_size=block_size, orig_dtype=x.dtype)


def from_mxfp8(mx: MXTensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Dequantize ``mx``: each element times its block's scale, computed in float32, returned in
    ``dtype`` (default: the dtype ``mx`` was cast from). Blocks with scale 0xFF are NaN."""
    if not isinstance(mx, MXTensor):
        raise TypeError(f"mx must be an MXTensor (from to_mxfp8), got {type(mx).__name__}")
    dtype = mx.orig_dtype if dtype is None else dtype
    _checks.check_dequantize_dtype(dtype)
    return _dispatch.mxfp8_dequantize(mx.data, mx.scale, mx.block_size, dtype)
