"""Inputs and calls for each op the parity list registers, to run on a real XLA device.

Each case is ``(call, specs)``: ``specs`` describe the float inputs (shape and value range);
``call(*tensors)`` invokes exactly the overload under test, through ``torch.ops.aten`` where
a public function would pick another overload.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

aten = torch.ops.aten
Spec = tuple[tuple[int, ...], str]  # shape, range: "n" normal, "u" in (-0.9, 0.9), "p" in (0.1, 2)
Case = tuple[Callable[..., Any], list[Spec]]


def make_inputs(specs: list[Spec], seed: int = 0) -> list[torch.Tensor]:
    """fp32 CPU tensors for ``specs``, seeded."""
    generator = torch.Generator().manual_seed(seed)
    tensors = []
    for shape, kind in specs:
        if kind == "n":
            tensors.append(torch.randn(shape, generator=generator))
        elif kind == "u":
            tensors.append(torch.rand(shape, generator=generator) * 1.8 - 0.9)
        else:
            tensors.append(torch.rand(shape, generator=generator) * 1.9 + 0.1)
    return tensors


def _conv_args() -> tuple:
    return ([1, 1], [0, 0], [1, 1], False, [0, 0], 1)


LOWER: dict[str, Case] = {
    "aten::_convolution.deprecated": (
        lambda x, w: aten._convolution.deprecated(x, w, None, *_conv_args(), False, False, True),
        [((1, 2, 6, 6), "n"), ((3, 2, 3, 3), "n")],
    ),
    "aten::_convolution": (
        lambda x, w: aten._convolution(x, w, None, *_conv_args(), False, False, True, True),
        [((1, 2, 6, 6), "n"), ((3, 2, 3, 3), "n")],
    ),
    "aten::convolution": (
        lambda x, w: aten.convolution(x, w, None, *_conv_args()),
        [((1, 2, 6, 6), "n"), ((3, 2, 3, 3), "n")],
    ),
    "aten::mv": (torch.mv, [((5, 7), "n"), ((7,), "n")]),
    "aten::chain_matmul": (lambda a, b, c: aten.chain_matmul([a, b, c]), [((4, 3), "n"), ((3, 5), "n"), ((5, 2), "n")]),
    "aten::linalg_multi_dot": (
        lambda a, b, c: torch.linalg.multi_dot([a, b, c]),
        [((4, 3), "n"), ((3, 5), "n"), ((5, 2), "n")],
    ),
    "aten::lstm_cell": (
        lambda x, h, c, wi, wh, bi, bh: torch.lstm_cell(x, (h, c), wi, wh, bi, bh),
        [((2, 3), "n"), ((2, 4), "n"), ((2, 4), "n"), ((16, 3), "n"), ((16, 4), "n"), ((16,), "n"), ((16,), "n")],
    ),
    "aten::gru_cell": (
        torch.gru_cell,
        [((2, 3), "n"), ((2, 4), "n"), ((12, 3), "n"), ((12, 4), "n"), ((12,), "n"), ((12,), "n")],
    ),
    "aten::rnn_tanh_cell": (
        torch.rnn_tanh_cell,
        [((2, 3), "n"), ((2, 4), "n"), ((4, 3), "n"), ((4, 4), "n"), ((4,), "n"), ((4,), "n")],
    ),
    "aten::rnn_relu_cell": (
        torch.rnn_relu_cell,
        [((2, 3), "n"), ((2, 4), "n"), ((4, 3), "n"), ((4, 4), "n"), ((4,), "n"), ((4,), "n")],
    ),
    "aten::einsum": (lambda a, b: torch.einsum("bij,bjk->bik", a, b), [((2, 3, 4), "n"), ((2, 4, 5), "n")]),
}

_X = [((3, 8), "n")]
_P = [((3, 8), "p")]
_U = [((3, 8), "u")]
_IMG1, _IMG2, _IMG3 = [((1, 2, 4), "n")], [((1, 2, 4, 4), "n")], [((1, 1, 2, 2, 2), "n")]

FP32: dict[str, Case] = {
    "aten::acos": (torch.acos, _U),
    "aten::asin": (torch.asin, _U),
    "aten::cosh": (torch.cosh, _X),
    "aten::erfinv": (torch.erfinv, _U),
    "aten::exp": (torch.exp, _X),
    "aten::expm1": (torch.expm1, _X),
    "aten::log": (torch.log, _P),
    "aten::log10": (torch.log10, _P),
    "aten::log2": (torch.log2, _P),
    "aten::log1p": (torch.log1p, _P),
    "aten::reciprocal": (torch.reciprocal, _P),
    "aten::rsqrt": (torch.rsqrt, _P),
    "aten::sinh": (torch.sinh, _X),
    "aten::tan": (torch.tan, _U),
    "aten::pow.Tensor_Tensor": (aten.pow.Tensor_Tensor, _P + _X),
    "aten::pow.Scalar": (lambda x: aten.pow.Scalar(2.0, x), _X),
    "aten::softplus": (F.softplus, _X),
    "aten::layer_norm": (lambda x, w, b: F.layer_norm(x, (8,), w, b), _X + [((8,), "n"), ((8,), "n")]),
    "aten::native_layer_norm": (
        lambda x, w, b: aten.native_layer_norm(x, [8], w, b, 1e-5)[0],
        _X + [((8,), "n"), ((8,), "n")],
    ),
    "aten::group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b), [((2, 4, 3), "n"), ((4,), "n"), ((4,), "n")]),
    "aten::frobenius_norm.dim": (lambda x: aten.frobenius_norm.dim(x, [1]), _X),
    "aten::nuclear_norm": (aten.nuclear_norm, [((4, 3), "n")]),
    "aten::nuclear_norm.dim": (lambda x: aten.nuclear_norm.dim(x, [0, 1]), [((4, 3), "n")]),
    "aten::cosine_similarity": (F.cosine_similarity, _X + _X),
    "aten::poisson_nll_loss": (F.poisson_nll_loss, _X + _P),
    "aten::huber_loss": (F.huber_loss, _X + _X),
    "aten::dist": (torch.dist, _X + _X),
    "aten::pdist": (F.pdist, [((5, 3), "n")]),
    "aten::renorm": (lambda x: torch.renorm(x, 2, 0, 1.0), _X),
    "aten::logsumexp": (lambda x: torch.logsumexp(x, 1), _X),
    "aten::upsample_nearest1d": (lambda x: aten.upsample_nearest1d(x, [8]), _IMG1),
    "aten::_upsample_nearest_exact1d": (lambda x: aten._upsample_nearest_exact1d(x, [8]), _IMG1),
    "aten::upsample_nearest2d": (lambda x: aten.upsample_nearest2d(x, [8, 8]), _IMG2),
    "aten::_upsample_nearest_exact2d": (lambda x: aten._upsample_nearest_exact2d(x, [8, 8]), _IMG2),
    "aten::upsample_nearest3d": (lambda x: aten.upsample_nearest3d(x, [4, 4, 4]), _IMG3),
    "aten::_upsample_nearest_exact3d": (lambda x: aten._upsample_nearest_exact3d(x, [4, 4, 4]), _IMG3),
    "aten::upsample_linear1d": (lambda x: aten.upsample_linear1d(x, [8], False), _IMG1),
    "aten::upsample_bilinear2d": (lambda x: aten.upsample_bilinear2d(x, [8, 8], False), _IMG2),
    "aten::_upsample_bilinear2d_aa": (lambda x: aten._upsample_bilinear2d_aa(x, [8, 8], False), _IMG2),
    "aten::upsample_trilinear3d": (lambda x: aten.upsample_trilinear3d(x, [4, 4, 4], False), _IMG3),
    "aten::upsample_bicubic2d": (lambda x: aten.upsample_bicubic2d(x, [8, 8], False), _IMG2),
    "aten::_upsample_bicubic2d_aa": (lambda x: aten._upsample_bicubic2d_aa(x, [8, 8], False), _IMG2),
    "aten::cumprod": (lambda x: torch.cumprod(x, 1), _P),
    "aten::cumsum": (lambda x: torch.cumsum(x, 1), _X),
    "aten::linalg_vector_norm": (torch.linalg.vector_norm, _X),
    "aten::linalg_matrix_norm": (lambda x: torch.linalg.matrix_norm(x, ord=1), _X),
    "aten::linalg_matrix_norm.str_ord": (lambda x: torch.linalg.matrix_norm(x, ord="fro"), _X),
    "aten::sum": (torch.sum, _X),
    "aten::sum.dim_IntList": (lambda x: x.sum(1), _X),
    "aten::norm.Scalar": (lambda x: aten.norm.Scalar(x, 2), _X),
    "aten::norm.ScalarOpt_dim": (lambda x: aten.norm.ScalarOpt_dim(x, 2, [1]), _X),
}

# Named tensors are not implemented for XLA tensors ("NYI: named tensors only support CPU,
# CUDA, XPU or privateuseone"), so these overloads cannot run on an XLA device at all.
UNREACHABLE_ON_XLA = {
    "aten::cumprod.dimname",
    "aten::cumsum.dimname",
    "aten::sum.dim_DimnameList",
    "aten::norm.names_ScalarOpt_dim",
}

PROMOTE: dict[str, Case] = {
    "aten::addcdiv": (lambda a, b, c: torch.addcdiv(a, b, c, value=0.5), _X + _X + _P),
    "aten::addcmul": (lambda a, b, c: torch.addcmul(a, b, c, value=0.5), _X + _X + _X),
    "aten::atan2": (torch.atan2, _X + _X),
    "aten::bilinear": (F.bilinear, [((2, 3), "n"), ((2, 4), "n"), ((5, 3, 4), "n"), ((5,), "n")]),
    "aten::cross": (lambda a, b: torch.cross(a, b, dim=1), [((4, 3), "n"), ((4, 3), "n")]),
    "aten::dot": (torch.dot, [((7,), "n"), ((7,), "n")]),
    "aten::vdot": (torch.vdot, [((7,), "n"), ((7,), "n")]),
    "aten::grid_sampler": (
        lambda x, g: torch.grid_sampler(x, g, 0, 0, False),
        [((1, 1, 4, 4), "n"), ((1, 3, 3, 2), "u")],
    ),
    "aten::index_put": (
        lambda x, v: torch.index_put(x, (torch.tensor([0, 2], device=x.device),), v),
        [((5, 3), "n"), ((2, 3), "n")],
    ),
    "aten::tensordot": (lambda a, b: torch.tensordot(a, b, dims=1), [((3, 4), "n"), ((4, 5), "n")]),
    "aten::scatter_add": (
        lambda x, s: torch.scatter_add(x, 1, torch.tensor([[0, 1], [2, 3], [4, 0]], device=x.device), s),
        [((3, 5), "n"), ((3, 2), "n")],
    ),
}
