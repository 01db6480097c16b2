"""MX (OCP Microscaling v1.0) formats: MXFP8 (float8_e4m3fn elements) and MXFP4 (E2M1 elements,
two per byte), each with one E8M0 scale per block of 32.

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

MXFP4 (``docs/guides/mxfp4.md``): ``to_mxfp4(x)`` gives an ``MXFP4Tensor``, E2M1 elements (+-0, 0.5,
1, 1.5, 2, 3, 4, 6) packed two per byte along the last dimension (element 2i in the low nibble),
and one E8M0 byte per 32: the layout of gpt-oss checkpoints' ``*_blocks``/``*_scales``, which
``MXFP4Tensor.from_checkpoint`` reads as stored. The scale is the spec's (``floor``:
2**(floor(log2 amax) - 2)) or ``rceil`` (amax * fl32(1/6) rounded up to a power of two); elements
round to nearest even and saturate at +-6; a block holding NaN or Inf gets scale 0xFF and zero
data bytes. ``from_mxfp4`` is exact in float32 (bit for bit transformers' ``convert_moe_packed_tensors``
in bfloat16 and float32, transposed). ``mxfp4_linear``, ``mxfp4_expert_linear`` and
``MXFP4Linear`` keep the weight MXFP4 in memory and dequantize it inside the matmul kernel (one
Triton kernel on CUDA, one Mosaic kernel on TPU). Cast and inverse are one Triton launch on
CUDA, one Mosaic kernel on TPU, one XLA computation elsewhere on XLA, eager torch otherwise.

``Packing`` names how an ``MXFP4Tensor``'s data bits hold its elements: ``Packing.SPEC``, the
layout above (checkpoints', ``to_mxfp4``'s), or ``Packing.DECODE``, each 32-bit word's bits
and each span of 128 elements' words moved to where the CUDA decode kernels (Hopper and newer, 1
to 64 tokens) read them with fewer integer operations and ``x`` as it lies in memory. ``w.repack("decode")`` and ``MXFP4Linear.repack("decode")`` change it;
every other path repacks to ``SPEC`` on each call, and ``to_checkpoint`` writes ``SPEC``.
"""

from __future__ import annotations

from xlabridge.mx._api import MXTensor, from_mxfp8, to_mxfp8, to_mxfp8_both
from xlabridge.mx._constants import (
    DEFAULT_BLOCK_SIZE,
    E2M1_MAX,
    E4M3_MAX,
    E8M0_BIAS,
    E8M0_NAN,
    ROUNDING_MODES,
    Rounding,
)
from xlabridge.mx._fp4_packing import Packing
from xlabridge.mx._linear import MXLinear, mx_linear
from xlabridge.mx._mxfp4 import MXFP4Tensor, from_mxfp4, to_mxfp4
from xlabridge.mx._mxfp4_linear import MXFP4Linear, mxfp4_expert_linear, mxfp4_linear

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "E2M1_MAX",
    "E4M3_MAX",
    "E8M0_BIAS",
    "E8M0_NAN",
    "ROUNDING_MODES",
    "MXFP4Linear",
    "MXFP4Tensor",
    "MXLinear",
    "MXTensor",
    "Packing",
    "Rounding",
    "from_mxfp4",
    "from_mxfp8",
    "mx_linear",
    "mxfp4_expert_linear",
    "mxfp4_linear",
    "to_mxfp4",
    "to_mxfp8",
    "to_mxfp8_both",
]
