"""An independent NumPy model of the MXFP8 and MXFP4 casts, written from the OCP MX v1.0 spec
(MXFP4 at the end of this module).

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


# ----------------------------------------------------------------------------- MXFP4
#
# E2M1 (spec section 5.3.3): 1 sign bit, 2 exponent bits with bias 1, 1 mantissa bit, no Inf or
# NaN. Scale rules as for MXFP8 with emax_elem = 2 (floor) and max 6 (rceil: amax / 6, the exact
# quotient rounded once to float32, then up to a power of two). A block holding a NaN or an
# infinity: scale byte 0xFF and every data nibble 0 (xlabridge's documented choice). Packing: two
# elements per byte along the last dimension, element 2i in the low nibble (gpt-oss checkpoints).


def _e2m1_table() -> np.ndarray:
    """Values of the non-negative codes 0..7, decoded from the bit layout, ascending."""
    values = []
    for code in range(8):
        exponent, mantissa = code >> 1, code & 1
        values.append(mantissa / 2 if exponent == 0 else (1 + mantissa / 2) * 2.0 ** (exponent - 1))
    return np.array(values)


E2M1_TABLE = _e2m1_table()
E2M1_MAX = E2M1_TABLE[-1]  # 6


def e2m1_codes(q: np.ndarray) -> np.ndarray:
    """4-bit codes (uint8, sign in bit 3) of finite float64 ``q``: nearest, ties to the even code,
    saturating at 6; the sign is kept, zeros included."""
    mag = np.minimum(np.abs(q), E2M1_MAX)
    distance = np.abs(mag[..., None] - E2M1_TABLE)
    nearest = distance.min(axis=-1, keepdims=True)
    candidates = distance == nearest  # one code, or two neighbours at a tie
    first = np.argmax(candidates, axis=-1)
    tie = candidates.sum(axis=-1) > 1
    code = np.where(tie & (first % 2 == 1), first + 1, first)  # of two neighbours, the even code
    return (code | np.where(np.signbit(q), 8, 0)).astype(np.uint8)


def _fp4_floor_exponent(amax: float) -> int:
    if amax < F32_TINY:
        return -127
    mantissa, exponent = math.frexp(amax)
    return exponent - 1 - 2


def _fp4_rceil_exponent(amax: float, ftz: bool) -> int:
    descale = float(np.float32(amax / 6.0))  # the exact quotient, rounded once to float32
    if descale == 0.0 or (ftz and descale < F32_TINY):
        return -127
    mantissa, exponent = math.frexp(descale)
    return exponent - 1 if mantissa == 0.5 else exponent


def pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """Bytes of 4-bit ``codes`` along the last dimension: element 2i low, 2i+1 high."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def unpack_nibbles(data: np.ndarray) -> np.ndarray:
    out = np.empty(data.shape[:-1] + (2 * data.shape[-1],), dtype=np.uint8)
    out[..., 0::2], out[..., 1::2] = data & 0xF, data >> 4
    return out


def mxfp4_reference(x: np.ndarray, block_size: int, rounding: str, ftz: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(packed_bytes [..., K/2], scale_bytes [..., K/block_size])`` of float64 array ``x``."""
    shape = x.shape
    blocks = x.reshape(-1, block_size)
    codes = np.empty(blocks.shape, dtype=np.uint8)
    scale = np.empty(blocks.shape[0], dtype=np.uint8)
    for i, block in enumerate(blocks):
        if not np.all(np.isfinite(block)):
            scale[i], codes[i] = 0xFF, 0
            continue
        values = np.where(np.abs(block) < F32_TINY, np.copysign(0.0, block), block) if ftz else block
        amax = float(np.max(np.abs(block)))
        e = _fp4_floor_exponent(amax) if rounding == "floor" else _fp4_rceil_exponent(amax, ftz)
        e = min(max(e, -127), 127)
        scale[i] = e + 127
        codes[i] = e2m1_codes(values / 2.0**e)
    return pack_nibbles(codes.reshape(shape)), scale.reshape(shape[:-1] + (shape[-1] // block_size,))


def e2m1_values(codes: np.ndarray) -> np.ndarray:
    mag = E2M1_TABLE[codes & 7]
    return np.where(codes & 8, -mag, mag)


def dequantize_fp4_reference(data: np.ndarray, scale: np.ndarray, block_size: int, ftz: bool = False) -> np.ndarray:
    """float64 values ``[..., K]`` of packed bytes ``data`` under ``scale``; NaN for scale 0xFF."""
    values = e2m1_values(unpack_nibbles(np.asarray(data, dtype=np.uint8))).reshape(-1, block_size)
    exps = np.asarray(scale).reshape(-1).astype(np.float64)
    factor = np.where(exps == 0xFF, np.nan, 2.0 ** (exps - 127))
    result = values * factor[:, None]
    if ftz:
        result = np.where(np.abs(result) < F32_TINY, np.copysign(0.0, result), result)
    return result.reshape(data.shape[:-1] + (2 * data.shape[-1],))
