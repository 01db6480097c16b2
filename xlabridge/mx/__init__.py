"""MXFP8 (OCP Microscaling v1.0) cast: float8_e4m3fn elements with one E8M0 scale per block.

``to_mxfp8(x)`` views ``x`` as blocks of ``block_size`` (32) consecutive values along its last
dimension, gives each block the shared power-of-two scale of the spec's section 6.3, and stores
``x / scale`` as float8_e4m3fn, saturating at +-448. ``from_mxfp8`` multiplies back.
``to_mxfp8(x, dim=d)`` blocks along dimension ``d`` instead and returns the MX tensor of
``x.movedim(d, -1)`` (for a matrix and ``dim=0``, of ``x.t()``: torchao's "dim1" cast, whose data
is the transposed matrix), so its blocks again run along its last dimension, the layout an MX
matmul takes for its right-hand operand. ``to_mxfp8_both(x)`` returns the casts along the last and
the second-to-last dimension together, from one read of ``x`` on TPU and CUDA (what an MX
training step needs of each operand: the first for the forward matmul, the second for the
backward one).

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

Devices: CUDA tensors take one Triton kernel launch (reads the input once, no copies; the same
for ``dim`` casts and ``to_mxfp8_both``); XLA tensors on a TPU (bfloat16, float32 and float16,
block sizes 8 to 128) take one Mosaic kernel, put into torch_xla's graph as a ``tpu_custom_call``
(``_mosaic.py``, ``_tpu.py``; where XLA:TPU still adds a kernel around it,
``MosaicRelayoutWarning`` says so; ``dim`` casts and ``to_mxfp8_both`` likewise, ``_mosaic_cols.py``,
for the shapes it lists; ``from_mxfp8`` too, ``_mosaic_dequant.py``); other XLA tensors take one
XLA computation built with torch_xla's XlaBuilder
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
    "ROUNDING_MODES",
    "MXTensor",
    "Rounding",
    "from_mxfp8",
    "to_mxfp8",
    "to_mxfp8_both",
]


@dataclass(frozen=True)
class MXTensor:
    """An MXFP8 tensor: ``data`` (float8_e4m3fn) and ``scale`` (uint8 E8M0 bytes, shape
    ``data.shape[:-1] + (K // block_size,)``), plus what dequantizing needs. Blocks always run
    along ``data``'s last dimension: ``data`` has the shape of the tensor it encodes, which for
    ``to_mxfp8(x, dim=d)`` is ``x.movedim(d, -1)``."""

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
    x: torch.Tensor, block_size: int = DEFAULT_BLOCK_SIZE, rounding: str | Rounding = Rounding.FLOOR, dim: int = -1
) -> MXTensor:
    """Cast ``x`` (float32, bfloat16 or float16, any leading shape) to MXFP8.

    Args:
        x: the tensor; dimension ``dim`` must be a multiple of ``block_size``.
        block_size: elements per shared scale, along ``dim`` (the spec's k = 32).
        rounding: ``Rounding.FLOOR``/``"floor"`` (the spec's scale) or ``Rounding.RCEIL``/``"rceil"``
            (hardware's round-up scale).
        dim: the dimension the blocks run along (last by default). For any other dimension the
            result is the MX tensor of ``x.movedim(dim, -1)``, bit for bit
            ``to_mxfp8(x.movedim(dim, -1).contiguous())``: ``data`` has the moved shape (for a
            matrix and ``dim=0``, ``x.t()``'s, as torchao's dim1 cast) and is contiguous, and
            ``scale`` is ``data.shape[:-1] + (x.shape[dim] // block_size,)``. No transposed copy
            of ``x`` is made on CUDA and TPU: the kernel reads ``x`` in place and writes the
            moved layout.

    Raises:
        TypeError: ``x`` is not a float32/bfloat16/float16 tensor, or ``block_size``/``dim`` not an int.
        ValueError: ``block_size`` is not positive or does not divide dimension ``dim``, ``dim`` is
            not a dimension of ``x``, or ``rounding`` is unknown.
    """
    _checks.check_cast_args(x, block_size, rounding, last_dim=False)
    dim = _checks.check_dim(x, dim, block_size)
    mode = Rounding(rounding).value
    if dim == x.dim() - 1:
        data, scale = _dispatch.mxfp8_cast(x, block_size, mode)
    else:
        data, scale = _dispatch.mxfp8_cast_dim(x, block_size, mode, dim)
    return MXTensor(data=data, scale=scale, block_size=block_size, orig_dtype=x.dtype)


def to_mxfp8_both(
    x: torch.Tensor, block_size: int = DEFAULT_BLOCK_SIZE, rounding: str | Rounding = Rounding.FLOOR
) -> tuple[MXTensor, MXTensor]:
    """``(to_mxfp8(x, ...), to_mxfp8(x, ..., dim=-2))`` from one read of ``x``: the row-wise and
    the column-wise MX tensors of ``x`` (``ndim >= 2``), bit for bit those two casts. On CUDA one
    Triton kernel, on TPU one Mosaic kernel (for the shapes ``_mosaic_cols.supports`` takes), on
    other XLA devices one XLA computation. The second has the layout of ``to_mxfp8(x, dim=-2)``:
    the MX tensor of ``x.transpose(-2, -1)``.

    Raises:
        As ``to_mxfp8``; ValueError also if ``x`` has fewer than two dimensions.
    """
    _checks.check_cast_args(x, block_size, rounding, last_dim=False)
    if x.dim() < 2:
        raise ValueError(f"x must have at least two dimensions for to_mxfp8_both, got shape {tuple(x.shape)}")
    _checks.check_dim(x, -1, block_size)
    _checks.check_dim(x, -2, block_size)
    mode = Rounding(rounding).value
    row_data, row_scale, col_data, col_scale = _dispatch.mxfp8_cast_both(x, block_size, mode)
    return (
        MXTensor(data=row_data, scale=row_scale, block_size=block_size, orig_dtype=x.dtype),
        MXTensor(data=col_data, scale=col_scale, block_size=block_size, orig_dtype=x.dtype),
    )


def from_mxfp8(mx: MXTensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Dequantize ``mx``: each element times its block's scale, computed in float32, returned in
    ``dtype`` (default: the dtype ``mx`` was cast from). Blocks with scale 0xFF are NaN."""
    if not isinstance(mx, MXTensor):
        raise TypeError(f"mx must be an MXTensor (from to_mxfp8), got {type(mx).__name__}")
    dtype = mx.orig_dtype if dtype is None else dtype
    _checks.check_dequantize_dtype(dtype)
    return _dispatch.mxfp8_dequantize(mx.data, mx.scale, mx.block_size, dtype)


from xlabridge.mx._linear import MXLinear, mx_linear

__all__ += ["MXLinear", "mx_linear"]
