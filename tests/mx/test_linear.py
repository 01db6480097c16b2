"""The MXFP8 linear layer (``xlabridge.mx.MXLinear``): its three matmuls against a NumPy model of
the same recipe (operands cast by the spec model, blocked along the contraction as torchao's
MXLinear blocks them, multiplied in float64), torchao's own accuracy thresholds against bf16, and
a short training run whose loss curve stays with bf16's."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from tests.conftest import requires_cuda
from tests.mx import _training
from tests.mx._reference import dequantize_reference, mxfp8_reference
from xlabridge import mx

DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]


def _mx_values(a: np.ndarray) -> np.ndarray:
    """float64 values of the spec model's MXFP8 cast of ``a`` along its last dimension."""
    data, scale = mxfp8_reference(a, 32, "floor")
    return dequantize_reference(data, scale, 32)


@pytest.mark.parametrize("device", DEVICES)
def test_matmuls_follow_the_recipe(device):
    """float32 operands, so the emulated matmuls are exact up to float32 accumulation: y, grad_x
    and grad_w each equal the float64 product of the model's casts along the contraction."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(64, 96, generator=g)
    w = torch.randn(128, 96, generator=g) * 0.1
    grad_y = torch.randn(64, 128, generator=g)
    xd, wd = x.to(device).clone().requires_grad_(), w.to(device).clone().requires_grad_()
    y = mx.mx_linear(xd, wd)
    y.backward(grad_y.to(device))
    X, W, G = (t.double().numpy() for t in (x, w, grad_y))
    expected = {
        "y": _mx_values(X) @ _mx_values(W).T,  # along K
        "grad_x": _mx_values(G) @ _mx_values(W.T.copy()).T,  # along N
        "grad_w": _mx_values(G.T.copy()) @ _mx_values(X.T.copy()).T,  # along M
    }
    for name, got in (("y", y), ("grad_x", xd.grad), ("grad_w", wd.grad)):
        np.testing.assert_allclose(got.detach().cpu().double().numpy(), expected[name], rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("device", DEVICES)
def test_torchaos_thresholds_against_bf16(device):
    """torchao's test_mx_linear (test_linear_eager_vs_hp, mxfp8): SQNR of the output >= 18 dB, of
    the weight gradient >= 18 dB, of the input gradient >= 12 dB, bias gradient as bf16's."""
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(256, 512)).to(device, torch.bfloat16)
    mxm = mx.MXLinear.swap(copy.deepcopy(ref))
    assert isinstance(mxm[0], mx.MXLinear)
    x_ref = torch.randn(4, 32, 256, device=device, dtype=torch.bfloat16, requires_grad=True)
    x = x_ref.detach().clone().requires_grad_()
    g = torch.randn(4, 32, 512, device=device, dtype=torch.bfloat16)
    y_ref, y = ref(x_ref), mxm(x)
    y_ref.backward(g)
    y.backward(g)
    assert y.dtype == torch.bfloat16
    assert _training.sqnr_db(y_ref, y) >= 18.0
    assert _training.sqnr_db(ref[0].weight.grad, mxm[0].weight.grad) >= 18.0
    assert _training.sqnr_db(x_ref.grad, x.grad) >= 12.0
    torch.testing.assert_close(ref[0].bias.grad, mxm[0].bias.grad)


def test_short_training_follows_bf16():
    """A one-block transformer, 12 AdamW steps under bf16 autocast: the MX loss curve against the
    bf16 one at torchao's output threshold (18 dB), and every step within 3%."""
    small = {"d": 64, "heads": 2, "layers": 1, "seq": 32}
    torch.manual_seed(0)
    base = _training.TinyLM(**small)
    batches = _training.markov_batches(12, seed=1, batch=8, seq=32)
    mx_model = mx.MXLinear.swap(copy.deepcopy(base))
    assert sum(isinstance(m, mx.MXLinear) for m in mx_model.modules()) == 5
    bf16, mxfp8 = _training.train(base, batches), _training.train(mx_model, batches)
    assert bf16[-1] < bf16[0] - 0.5  # it learns
    assert _training.sqnr_db(torch.tensor(bf16), torch.tensor(mxfp8)) >= 18.0
    assert max(abs(a - b) / a for a, b in zip(bf16, mxfp8)) <= 0.03, (bf16, mxfp8)
