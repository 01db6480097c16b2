"""Numbers of the OCP Microscaling (MX) v1.0 specification that the MXFP8 cast uses.

Every other module takes these from here, so a reader checks the spec in one place.
Section numbers refer to "OCP Microscaling Formats (MX) Specification v1.0".
"""

from __future__ import annotations

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

class Rounding(str, enum.Enum):
    """How a block's scale is chosen."""

    FLOOR = "floor"
    """The spec's rule: 2**(floor(log2(amax)) - 8)."""
    RCEIL = "rceil"
    """NVIDIA's hardware conversion (torchao's RCEIL): amax * fl32(1/448) rounded up to a power of two."""


ROUNDING_MODES = tuple(mode.value for mode in Rounding)
