"""An MXFP8 linear layer for training: forward and backward matmuls on MXFP8 operands, quantised
the way torchao's ``MXLinear`` does (torchao 0.17, ``torchao.prototype.mx_formats``), with the
matmul emulated (each operand dequantized to the input's dtype, then an ordinary matmul) for
chips without an MXFP8 matrix unit (TPUs, the H100).

The three matmuls of ``y = x @ w.T`` and what each operand is blocked along (the contraction):

* forward ``y = x @ w.T``: ``x`` and ``w`` along K (the last dimension of each);
* ``grad_x = g @ w``: ``g`` along N (its last dimension), ``w`` along N (its first: the
  column-wise cast, the MX tensor of ``w.T``);
* ``grad_w = g.T @ x``: ``g`` and ``x`` along M (their first dimension: column-wise casts).

So each of ``x``, ``w`` and ``g`` is cast both ways, and ``to_mxfp8_both`` gives both from one
read (one kernel on TPU and CUDA). The column-wise casts of ``x`` and ``w`` are made in the
forward and saved for the backward (float8 plus scales, instead of the high-precision tensors
torchao saves and casts again). The bias and its gradient stay in high precision, as torchao's.
``M`` (the rows of ``x``), ``K`` and ``N`` must be multiples of the block size.
"""

from __future__ import annotations

import torch

from xlabridge.tpu import _lowering
from xlabridge.mx import _api as mx
from xlabridge.mx import _constants as C

__all__ = ["MXLinear", "mx_linear"]


def _both(t: torch.Tensor, block_size: int, rounding: str):
    return mx.to_mxfp8_both(t, block_size, rounding)


def _mm(a, b_t, dtype: torch.dtype) -> torch.Tensor:
    """``deq(a) @ deq(b_t).T``: the emulated MX matmul of two MX tensors blocked along their last
    dimension (the contraction)."""
    return mx.from_mxfp8(a, dtype) @ mx.from_mxfp8(b_t, dtype).t()


class _MXLinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, block_size, rounding):
        rows = x.reshape(-1, x.shape[-1])
        x_rows, x_cols = _both(rows, block_size, rounding)
        w_rows, w_cols = _both(weight, block_size, rounding)
        y = _mm(x_rows, w_rows, x.dtype)
        if bias is not None:
            y = y + bias.to(y.dtype)
        ctx.save_for_backward(x_cols.data, x_cols.scale, w_cols.data, w_cols.scale)
        ctx.meta = (block_size, rounding, x.shape, x.dtype, weight.dtype, bias is not None)
        # autograd runs an XLA device's backward on a thread of its own, where the context
        # variable of xlabridge.tpu._lowering.override_lowering (compile-only TPU tracing) is unset
        ctx.lowering = _lowering._override.get()
        return y.reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad_y):
        if ctx.lowering is None:
            return _MXLinearFunction._backward(ctx, grad_y)
        target, generation = ctx.lowering
        with _lowering.override_lowering(target, generation=generation):
            return _MXLinearFunction._backward(ctx, grad_y)

    @staticmethod
    def _backward(ctx, grad_y):
        block_size, rounding, x_shape, x_dtype, w_dtype, has_bias = ctx.meta
        x_cols_data, x_cols_scale, w_cols_data, w_cols_scale = ctx.saved_tensors
        x_cols = mx.MXTensor(x_cols_data, x_cols_scale, block_size, x_dtype)
        w_cols = mx.MXTensor(w_cols_data, w_cols_scale, block_size, w_dtype)
        g = grad_y.reshape(-1, grad_y.shape[-1])
        g_rows, g_cols = _both(g.contiguous(), block_size, rounding)
        grad_x = _mm(g_rows, w_cols, x_dtype).reshape(x_shape)  # [M, N] @ [N, K]
        grad_w = _mm(g_cols, x_cols, w_dtype)  # [N, M] @ [M, K]
        grad_b = g.sum(0) if has_bias else None
        return grad_x, grad_w, grad_b, None, None


def mx_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
              block_size: int = C.DEFAULT_BLOCK_SIZE, rounding: str | C.Rounding = C.Rounding.FLOOR) -> torch.Tensor:
    """``torch.nn.functional.linear(x, weight, bias)`` with MXFP8 operands in the forward and the
    backward (see the module docstring)."""
    return _MXLinearFunction.apply(x, weight, bias, block_size, C.Rounding(rounding).value)


class MXLinear(torch.nn.Linear):
    """``torch.nn.Linear`` whose forward and backward matmuls take MXFP8 operands (emulated)."""

    block_size: int = C.DEFAULT_BLOCK_SIZE
    rounding: str = C.Rounding.FLOOR.value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        device_type = x.device.type
        if torch.is_autocast_enabled(device_type):
            # as nn.Linear under autocast (and torchao's MXLinear): operands in the autocast dtype
            dtype = torch.get_autocast_dtype(device_type)
            x, weight = x.to(dtype), weight.to(dtype)
            bias = None if bias is None else bias.to(dtype)
            with torch.autocast(device_type, enabled=False):
                return mx_linear(x, weight, bias, self.block_size, self.rounding)
        return mx_linear(x, weight, bias, self.block_size, self.rounding)

    @classmethod
    def swap(cls, module: torch.nn.Module, block_size: int = C.DEFAULT_BLOCK_SIZE,
             rounding: str | C.Rounding = C.Rounding.FLOOR) -> torch.nn.Module:
        """Turn every ``torch.nn.Linear`` in ``module`` (in place) into an ``MXLinear`` with the
        same parameters; returns ``module`` (or the new layer, when ``module`` is a Linear)."""
        if type(module) is torch.nn.Linear:
            module.__class__ = cls
            module.block_size, module.rounding = block_size, C.Rounding(rounding).value
            return module
        for child in module.children():
            cls.swap(child, block_size, rounding)
        return module
