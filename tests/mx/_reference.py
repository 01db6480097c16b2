"""An independent NumPy model of the MXFP8 cast, written from the OCP MX v1.0 spec.

Nothing here comes from xlabridge.mx: the float8_e4m3fn value table is decoded from the bit
layout (OFP8: 1 sign, 4 exponent bits with bias 7, 3 mantissa bits, S.1111.111 = NaN, no Inf),
rounding picks the nearest table value with ties to the even code, and all block arithmetic is
exact float64 (every float32 and every scaled value is exact in float64).

Scale rules:
* floor (spec 6.3): X = (largest power of two <= amax) / 2**8, clamped to [2**-127, 2**127].
* rceil (NVIDIA's cvt.rp.satfinite.ue8m0x2.f32 of amax * fl32(1/448)): the float32 product,
  rounded up to a power of two, clamped to [2**-127, 2**127].
* Any NaN or Inf in the block: scale byte 0xFF and data bytes 0x7F (xlabridge's documented
  choice for the data of a NaN block, which the spec leaves open).

``ftz=True`` models XLA on CPU/TPU, which flushes float32 subnormals to zero: subnormal inputs
scale as signed zeros, and an rceil product below 2**-126 is zero.
"""

from __future__ import annotations

import math

import numpy as np

F32_TINY = 2.0**-126
RCEIL_FACTOR = float(np.float32(1.0 / 448.0))


def _e4m3_table() -> np.ndarray:
    """Values of codes 0x00..0x7E (the non-negative finite float8_e4m3fn numbers), ascending."""
    values = []
    for code in range(0x7F):
        exponent, mantissa = code >> 3, code & 7
        if exponent == 0:
            values.append(mantissa / 8 * 2.0**-6)
        else:
            values.append((1 + mantissa / 8) * 2.0 ** (exponent - 7))
    return np.array(values)


_TABLE = _e4m3_table()
E4M3_MAX = _TABLE[-1]  # 448


def e4m3_codes(q: np.ndarray) -> np.ndarray:
    """float8_e4m3fn bytes of finite float64 ``q``: nearest, ties to even, saturating at 448."""
    mag = np.minimum(np.abs(q), E4M3_MAX)
    hi = np.clip(np.searchsorted(_TABLE, mag, side="left"), 0, len(_TABLE) - 1)
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = mag - _TABLE[lo], _TABLE[hi] - mag
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo).astype(np.uint8)
    return code | np.where(np.signbit(q), 0x80, 0).astype(np.uint8)


def _floor_exponent(amax: float) -> int:
    if amax < F32_TINY:  # zero or float32-subnormal: floor(log2) - 8 < -127 anyway
        return -127
    mantissa, exponent = math.frexp(amax)  # amax = mantissa * 2**exponent, mantissa in [0.5, 1)
    return exponent - 1 - 8


def _rceil_exponent(amax: float, ftz: bool) -> int:
    descale = float(np.float32(amax * RCEIL_FACTOR))  # the exact product, rounded once to float32
    if descale == 0.0 or (ftz and descale < F32_TINY):
        return -127
    mantissa, exponent = math.frexp(descale)
    return exponent - 1 if mantissa == 0.5 else exponent


def mxfp8_reference(x: np.ndarray, block_size: int, rounding: str, ftz: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(data_bytes, scale_bytes)`` of float64 array ``x`` (values of the float inputs)."""
    shape = x.shape
    blocks = x.reshape(-1, block_size)
    data = np.empty(blocks.shape, dtype=np.uint8)
    scale = np.empty(blocks.shape[0], dtype=np.uint8)
    for i, block in enumerate(blocks):
        if not np.all(np.isfinite(block)):
            scale[i], data[i] = 0xFF, 0x7F
            continue
        values = np.where(np.abs(block) < F32_TINY, np.copysign(0.0, block), block) if ftz else block
        amax = float(np.max(np.abs(block)))
        e = _floor_exponent(amax) if rounding == "floor" else _rceil_exponent(amax, ftz)
        e = min(max(e, -127), 127)
        scale[i] = e + 127
        data[i] = e4m3_codes(values / 2.0**e)
    return data.reshape(shape), scale.reshape(shape[:-1] + (shape[-1] // block_size,))


def e4m3_values(codes: np.ndarray) -> np.ndarray:
    """float64 values of float8_e4m3fn bytes (NaN for 0x7F/0xFF)."""
    codes = np.asarray(codes, dtype=np.uint8)
    mag = np.concatenate([_TABLE, [np.nan]])[codes & 0x7F]
    return np.where(codes & 0x80, -mag, mag)


def dequantize_reference(data: np.ndarray, scale: np.ndarray, block_size: int, ftz: bool = False) -> np.ndarray:
    """float64 ``P * 2**(scale - 127)`` per block; NaN for scale byte 0xFF. ``ftz`` flushes
    results below the smallest normal float32 to signed zeros, as XLA on CPU/TPU does."""
    values = e4m3_values(data).reshape(-1, block_size)
    exps = scale.reshape(-1).astype(np.float64)
    factor = np.where(exps == 0xFF, np.nan, 2.0 ** (exps - 127))
    result = values * factor[:, None]
    if ftz:
        result = np.where(np.abs(result) < F32_TINY, np.copysign(0.0, result), result)
    return result.reshape(data.shape)
