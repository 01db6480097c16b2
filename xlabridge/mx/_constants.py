"""Numbers of the OCP Microscaling (MX) v1.0 specification that the MXFP8 and MXFP4 casts use.

Every other module takes these from here, so a reader checks the spec in one place.
Section numbers refer to "OCP Microscaling Formats (MX) Specification v1.0".
"""

from __future__ import annotations

import dataclasses
import enum

# Section 5.2: the shared scale covers k = 32 consecutive elements in every concrete format.
DEFAULT_BLOCK_SIZE = 32

# Section 5.3 / OFP8: float8_e4m3fn elements. The largest normal value is 1.75 * 2**8 = 448,
# so emax_elem, the exponent of the largest power of two the element can hold, is 8.
E4M3_MAX = 448.0
E4M3_EMAX = 8

# Section 5.4.1: the scale is E8M0, an unsigned biased exponent byte: value 2**(byte - 127),
# bytes 0..254 are 2**-127..2**127, 0xFF is NaN. E8M0 has no zero and no infinity.
E8M0_BIAS = 127
E8M0_MAX_FINITE = 254
E8M0_NAN = 0xFF

# IEEE binary32 fields, used to read exponents and build powers of two bit by bit.
F32_MANTISSA_BITS = 23
F32_MANTISSA_MASK = 0x007F_FFFF
F32_ABS_MASK = 0x7FFF_FFFF
HALF_ABS_MASK = 0x7FFF  # the same for bfloat16 and float16 bit patterns
F32_INF_BITS = 0x7F80_0000  # |x| bit patterns at or above this are Inf or NaN
F32_HALF_SUBNORMAL_MANTISSA = 0x0040_0000  # the float32 subnormal 2**-127

# rceil (the rounding NVIDIA's hardware conversion cvt.rp.satfinite.ue8m0x2.f32 applies, and
# torchao's ScaleCalculationMode.RCEIL): the scale is amax * fl32(1/448) rounded up to a power
# of two. The float32 rounding of 1/448 is part of the definition: hardware recipes multiply by it.
RCEIL_RECIPROCAL = 1.0 / E4M3_MAX  # rounded to float32 where it is used

# Section 5.3.3: FP4 (E2M1) elements: 1 sign bit, 2 exponent bits with bias 1, 1 mantissa bit,
# no Inf or NaN. Magnitudes 0, 0.5 (the one subnormal), 1, 1.5, 2, 3, 4, 6; emax_elem = 2.
E2M1_MAX = 6.0
E2M1_EMAX = 2
E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E2M1_SIGN = 0x8  # the sign bit of a 4-bit code
# MXFP4's packed layout (OCP leaves packing to implementations; this is gpt-oss's checkpoints' and
# transformers' ``convert_moe_packed_tensors``'): two elements per byte along the blocked
# dimension, element 2i in the low nibble and element 2i+1 in the high nibble.
FP4_PER_BYTE = 2
# E2M1 has no NaN code, so a block holding a NaN or an infinity is NaN through its scale byte
# (0xFF) alone; its data bytes are all zero (a documented choice: the spec leaves them open).
# Zeros also make transformers' dequantization of such a block NaN (0 * 2**128 = 0 * inf).
MXFP4_NAN_DATA = 0x00


@dataclasses.dataclass(frozen=True)
class ElementFormat:
    """What the scale rules need of an element format: its largest power of two (emax_elem, spec
    section 6.3) and the float32 reciprocal of its largest value (for rceil)."""

    name: str
    max: float
    emax: int

    @property
    def rceil_reciprocal(self) -> float:
        """1 / max, rounded to float32 where it is used."""
        return 1.0 / self.max


E4M3 = ElementFormat("e4m3", E4M3_MAX, E4M3_EMAX)
E2M1 = ElementFormat("e2m1", E2M1_MAX, E2M1_EMAX)


class Rounding(str, enum.Enum):
    """How a block's scale is chosen."""

    FLOOR = "floor"
    """The spec's rule: 2**(floor(log2(amax)) - emax_elem) (8 for MXFP8, 2 for MXFP4)."""
    RCEIL = "rceil"
    """NVIDIA's hardware conversion (torchao's RCEIL): amax * fl32(1/max) (1/448 for MXFP8, 1/6 for
    MXFP4) rounded up to a power of two, so no element saturates."""


ROUNDING_MODES = tuple(mode.value for mode in Rounding)
