"""The MX casts on XLA tensors: one XLA computation each, built with torch_xla's XlaBuilder.

torch_xla 2.9 has no lazy lowering of ``Tensor.view(dtype)`` (bit reinterpretation falls back to
the CPU, a device round trip), nor of ``frexp``/``exp2``; the cast needs exact exponent
arithmetic, so it is written as an XLA computation directly (``bitcast-convert``, integer ops,
``convert`` to ``f8e4m3fn``) and spliced into the lazy graph with ``_xla_user_computation``.
XLA inlines it, so it fuses with the caller's surrounding ops like any other HLO. Computations
are built on first use for each (shape, dtype, options) and cached.

torch_xla is imported only here, and only when an XLA tensor reaches the cast.
"""

from __future__ import annotations

import functools

import torch

from xlabridge import _optional
from xlabridge._upstream import torch_xla as upstream_xla
from xlabridge.mx import _constants as C
from xlabridge.mx import _formulation

_FEATURE = "xlabridge.mx on XLA devices"

_XLA_TYPES = {
    torch.float32: "f32",
    torch.bfloat16: "bf16",
    torch.float16: "f16",
    torch.int16: "s16",
    torch.float8_e4m3fn: "f8e4m3fn",
    torch.uint8: "u8",
}


def _xb():
    _optional.require("torch_xla", _FEATURE)
    import torch_xla.core.xla_builder as xb

    return xb


class XlaBuilderOps:
    """``ArrayOps`` over torch_xla ``xla_builder.Op`` values."""

    def __init__(self, xb):
        self._xb = xb

    def _like(self, a, value):
        if isinstance(value, (int, float)):
            shape = a.shape()
            return self._xb.Op.scalar(a.builder(), value, dtype=shape.dtype)
        return value

    def _full(self, like, value, dtype):
        shape = like.shape()
        return self._xb.Op.scalar(like.builder(), value, dtype=dtype).broadcast(shape.sizes)

    def convert(self, a, dtype):
        return a.cast(dtype)

    def bitcast(self, a, dtype):
        return a.bitcast(dtype)

    def add(self, a, b):
        return a + self._like(a, b)

    def sub(self, a, b):
        if isinstance(a, (int, float)):
            return self._like(b, a) - b
        return a - self._like(a, b)

    def mul(self, a, b):
        return a * self._like(a, b)

    def bit_and(self, a, b):
        return a & self._like(a, b)

    def div_int(self, a, b):
        return a / self._like(a, b)

    def shift_right(self, a, bits):
        # torch_xla's builder has no ShiftRight op; the formulation only shifts non-negative
        # values, for which a division by 2**bits is the same (XLA turns it back into a shift).
        return a / self._like(a, 1 << bits)

    def shift_left(self, a, bits):
        return a << self._like(a, bits)

    def maximum(self, a, b):
        return a.max(self._like(a, b))

    def eq(self, a, b):
        return a == self._like(a, b)

    def ne(self, a, b):
        return a != self._like(a, b)

    def ge(self, a, b):
        return a >= self._like(a, b)

    def gt(self, a, b):
        return a > self._like(a, b)

    def select(self, pred, on_true, on_false):
        like = on_false if not isinstance(on_false, (int, float)) else on_true
        dtype = like.shape().dtype
        if isinstance(on_true, (int, float)):
            on_true = self._full(pred, on_true, dtype)
        if isinstance(on_false, (int, float)):
            on_false = self._full(pred, on_false, dtype)
        return pred.select(on_true, on_false)

    def clamp(self, a, lo, hi):
        return a.clamp(self._like(a, lo), self._like(a, hi))

    def reduce_max_last(self, a):
        shape = a.shape()
        init = self._xb.Op.scalar(a.builder(), 0, dtype=shape.dtype)
        return a.reduce(init, lambda lhs, rhs: lhs.max(rhs), [shape.rank - 1])

    def slice_last(self, a, index):
        sizes = a.shape().sizes
        sliced = a.slice_in_dim(index, index + 1, len(sizes) - 1)
        return sliced.reshape(sizes[:-1])

    def expand_last(self, a, size):
        sizes = tuple(a.shape().sizes)
        return a.broadcast_in_dim(sizes + (size,), list(range(len(sizes))))

    def bit_or(self, a, b):
        return a | self._like(a, b)

    def split_pairs(self, a):
        sizes = a.shape().sizes
        last = len(sizes) - 1
        return a.slice_in_dim(0, sizes[-1], last, 2), a.slice_in_dim(1, sizes[-1], last, 2)

    def interleave_pairs(self, even, odd):
        sizes = tuple(even.shape().sizes)
        pairs = [t.reshape(sizes + (1,)) for t in (even, odd)]
        return self._xb.Op.concat_in_dim(pairs, len(sizes)).reshape(sizes[:-1] + (2 * sizes[-1],))


@functools.lru_cache(maxsize=128)
def _cast_computation(shape: tuple[int, ...], dtype: torch.dtype, block_size: int, rounding: str, strategy: str):
    xb = _xb()
    name = "xlabridge_mxfp8_cast"
    builder = xb.create_builder(name)
    x = xb.mkparam(builder, 0, xb.mkshape(_XLA_TYPES[dtype], shape))
    blocks = x.reshape(shape[:-1] + (shape[-1] // block_size, block_size))
    data, scale = _formulation.cast_blocks(XlaBuilderOps(xb), blocks, _XLA_TYPES[dtype], block_size, rounding, strategy)
    return xb.Op.tuple([data.reshape(shape), scale]).build(name)


def _cast_op(xb, x, shape: tuple[int, ...], dtype: torch.dtype, block_size: int, rounding: str, strategy: str):
    """``(data, scale)`` ops of the cast of ``x`` (an op of ``shape``) along its last dimension."""
    blocks = x.reshape(shape[:-1] + (shape[-1] // block_size, block_size))
    data, scale = _formulation.cast_blocks(XlaBuilderOps(xb), blocks, _XLA_TYPES[dtype], block_size, rounding, strategy)
    return data.reshape(shape), scale


def _moved(x, shape: tuple[int, ...], dim: int):
    """``x`` (an op of ``shape``) with dimension ``dim`` moved last (an XLA transpose), and its shape."""
    perm = [d for d in range(len(shape)) if d != dim] + [dim]
    return x.transpose(perm), tuple(shape[d] for d in perm)


@functools.lru_cache(maxsize=128)
def _cast_dim_computation(shape: tuple[int, ...], dtype: torch.dtype, block_size: int, rounding: str, dim: int):
    xb = _xb()
    name = "xlabridge_mxfp8_cast_dim"
    builder = xb.create_builder(name)
    x = xb.mkparam(builder, 0, xb.mkshape(_XLA_TYPES[dtype], shape))
    moved, moved_shape = _moved(x, shape, dim)
    return xb.Op.tuple(list(_cast_op(xb, moved, moved_shape, dtype, block_size, rounding, "two_pass"))).build(name)


@functools.lru_cache(maxsize=128)
def _cast_both_computation(shape: tuple[int, ...], dtype: torch.dtype, block_size: int, rounding: str):
    xb = _xb()
    name = "xlabridge_mxfp8_cast_both"
    builder = xb.create_builder(name)
    x = xb.mkparam(builder, 0, xb.mkshape(_XLA_TYPES[dtype], shape))
    moved, moved_shape = _moved(x, shape, len(shape) - 2)
    row = _cast_op(xb, x, shape, dtype, block_size, rounding, "two_pass")
    col = _cast_op(xb, moved, moved_shape, dtype, block_size, rounding, "two_pass")
    return xb.Op.tuple([*row, *col]).build(name)


@functools.lru_cache(maxsize=128)
def _dequantize_computation(shape: tuple[int, ...], block_size: int, dtype: torch.dtype):
    xb = _xb()
    ops = XlaBuilderOps(xb)
    name = "xlabridge_mxfp8_dequantize"
    builder = xb.create_builder(name)
    data = xb.mkparam(builder, 0, xb.mkshape("f8e4m3fn", shape))
    nblocks = shape[-1] // block_size
    scale = xb.mkparam(builder, 1, xb.mkshape("u8", shape[:-1] + (nblocks,)))
    values = data.reshape(shape[:-1] + (nblocks, block_size)).cast("f32")
    code = ops.expand_last(scale.cast("s32"), block_size)
    first, second = _formulation.split_scale(ops, code)
    values = ops.select(ops.eq(code, C.E8M0_NAN), float("nan"), ops.mul(ops.mul(values, first), second))
    return xb.Op.tuple([values.reshape(shape).cast(_XLA_TYPES[dtype])]).build(name)


@functools.lru_cache(maxsize=128)
def _bitcast_computation(shape: tuple[int, ...], dtype: torch.dtype, to: torch.dtype):
    xb = _xb()
    name = "xlabridge_bitcast"
    builder = xb.create_builder(name)
    x = xb.mkparam(builder, 0, xb.mkshape(_XLA_TYPES[dtype], shape))
    return xb.Op.tuple([x.bitcast(_XLA_TYPES[to])]).build(name)


def bitcast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """XLA tensor ``x``'s bits as ``dtype`` of the same width, lazily (torch_xla 2.9 has no lazy
    ``Tensor.view(dtype)``; see the module docstring)."""
    (out,) = upstream_xla.user_computation("xlabridge::bitcast", [x], _bitcast_computation(tuple(x.shape), x.dtype, dtype))
    return out


def to_mxfp8(x: torch.Tensor, block_size: int, rounding: str, strategy: str = "two_pass"):
    """``(data, scale)`` of XLA tensor ``x``, as lazy XLA tensors from one XLA computation.

    ``two_pass`` is the default everywhere: on XLA:CPU it is the minimum of two kernels (one per
    output; XLA:CPU puts only same-shape outputs in one kernel), and on XLA:GPU (measured through JAX on an
    H100) its three kernels ran faster than the two of ``recompute`` (tools/bench/results/mx_cast.json).
    """
    computation = _cast_computation(tuple(x.shape), x.dtype, block_size, rounding, strategy)
    data, scale = upstream_xla.user_computation("xlabridge::mxfp8_cast", [x], computation)
    return data, scale


def to_mxfp8_dim(x: torch.Tensor, block_size: int, rounding: str, dim: int):
    """``(data, scale)`` of ``x.movedim(dim, -1)``: one XLA computation, the transpose inside it
    (XLA fuses it into the cast's kernels where it can)."""
    computation = _cast_dim_computation(tuple(x.shape), x.dtype, block_size, rounding, dim)
    data, scale = upstream_xla.user_computation("xlabridge::mxfp8_cast_dim", [x], computation)
    return data, scale


def to_mxfp8_both(x: torch.Tensor, block_size: int, rounding: str):
    """``(row data, row scale, col data, col scale)`` of ``x`` from one XLA computation."""
    computation = _cast_both_computation(tuple(x.shape), x.dtype, block_size, rounding)
    return tuple(upstream_xla.user_computation("xlabridge::mxfp8_cast_both", [x], computation))


def from_mxfp8(data: torch.Tensor, scale: torch.Tensor, block_size: int, dtype: torch.dtype) -> torch.Tensor:
    """Dequantized XLA tensor of ``dtype``, from one XLA computation."""
    computation = _dequantize_computation(tuple(data.shape), block_size, dtype)
    (values,) = upstream_xla.user_computation("xlabridge::mxfp8_dequantize", [data, scale], computation)
    return values


# ----------------------------------------------------------------------------- MXFP4


@functools.lru_cache(maxsize=128)
def _fp4_cast_computation(shape: tuple[int, ...], dtype: torch.dtype, block_size: int, rounding: str):
    xb = _xb()
    ops = XlaBuilderOps(xb)
    name = "xlabridge_mxfp4_cast"
    builder = xb.create_builder(name)
    x = xb.mkparam(builder, 0, xb.mkshape(_XLA_TYPES[dtype], shape))
    blocks = x.reshape(shape[:-1] + (shape[-1] // block_size, block_size))
    codes, scale = _formulation.cast_blocks_fp4(ops, blocks, block_size, rounding)
    return xb.Op.tuple([_formulation.pack_nibbles(ops, codes.reshape(shape)), scale]).build(name)


@functools.lru_cache(maxsize=128)
def _fp4_dequantize_computation(shape: tuple[int, ...], block_size: int, dtype: torch.dtype):
    """Values ``[..., K]`` from packed ``[..., K/2]`` and scale ``[..., K/block_size]`` (``shape`` is the packed one)."""
    xb = _xb()
    name = "xlabridge_mxfp4_dequantize"
    builder = xb.create_builder(name)
    k = 2 * shape[-1]
    nblocks = k // block_size
    data = xb.mkparam(builder, 0, xb.mkshape("u8", shape))
    scale = xb.mkparam(builder, 1, xb.mkshape("u8", shape[:-1] + (nblocks,)))
    blocks = data.reshape(shape[:-1] + (nblocks, block_size // 2))
    values = _formulation.dequantize_blocks_fp4(XlaBuilderOps(xb), blocks, scale, block_size)
    return xb.Op.tuple([values.reshape(shape[:-1] + (k,)).cast(_XLA_TYPES[dtype])]).build(name)


def to_mxfp4(x: torch.Tensor, block_size: int, rounding: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(data, scale)`` of XLA tensor ``x``: packed E2M1 bytes and E8M0 bytes, from one XLA computation."""
    from xlabridge._upstream import torch_xla as upstream_xla

    computation = _fp4_cast_computation(tuple(x.shape), x.dtype, block_size, rounding)
    data, scale = upstream_xla.user_computation("xlabridge::mxfp4_cast", [x], computation)
    return data, scale


def from_mxfp4(data: torch.Tensor, scale: torch.Tensor, block_size: int, dtype: torch.dtype) -> torch.Tensor:
    """The dequantized XLA tensor (``[..., 2 * data.shape[-1]]`` of ``dtype``), from one XLA computation."""
    from xlabridge._upstream import torch_xla as upstream_xla

    computation = _fp4_dequantize_computation(tuple(data.shape), block_size, dtype)
    (values,) = upstream_xla.user_computation("xlabridge::mxfp4_dequantize", [data, scale], computation)
    return values
