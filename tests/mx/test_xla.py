"""The MXFP8 cast on the XLA device (lazy tensors and torch.compile(backend="openxla")).

XLA:CPU flushes float32 subnormals to zero, so results are compared with the reference's
``ftz`` model (see xlabridge.mx's docstring); everything else is the same bit-exact check.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from tests.conftest import requires_xla
from tests.mx._cases import DTYPES, ROUNDINGS, make_input
from tests.mx._reference import dequantize_reference, mxfp8_reference
from xlabridge import hlo, mx

pytestmark = requires_xla


def _assert_exact(data, scale, x, rounding, block_size=32):
    data_ref, scale_ref = mxfp8_reference(x.double().numpy(), block_size, rounding, ftz=True)
    np.testing.assert_array_equal(scale.cpu().numpy(), scale_ref)
    np.testing.assert_array_equal(data.cpu().view(torch.uint8).numpy(), data_ref)


@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_lazy_cast_is_bit_exact(xla_device, dtype, rounding):
    x = make_input((4, 8, 128), dtype, seed=31)
    q = mx.to_mxfp8(x.to(xla_device), rounding=rounding)
    assert q.data.device.type == "xla" and q.orig_dtype == dtype
    _assert_exact(q.data, q.scale, x, rounding)


@pytest.mark.parametrize("strategy", ["recompute", "recompute_wide"])
def test_other_strategies_agree(xla_device, strategy):
    from xlabridge.mx import _xla

    x = make_input((16, 256), torch.float16, seed=32)
    data, scale = _xla.to_mxfp8(x.to(xla_device), 32, "floor", strategy)
    _assert_exact(data, scale, x, "floor")


def test_block_size_16_and_dequantize(xla_device):
    x = make_input((8, 64), torch.float32, seed=33, block_size=16)
    q = mx.to_mxfp8(x.to(xla_device), block_size=16)
    _assert_exact(q.data, q.scale, x, "floor", block_size=16)
    expected = dequantize_reference(q.data.cpu().view(torch.uint8).numpy(), q.scale.cpu().numpy(), 16, ftz=True)
    np.testing.assert_array_equal(mx.from_mxfp8(q, torch.float32).cpu().numpy(), expected.astype(np.float32))


def test_under_torch_compile_openxla(xla_device):
    x = make_input((32, 256), torch.bfloat16, seed=34)

    @torch.compile(backend="openxla", fullgraph=True)
    def cast(t):
        q = mx.to_mxfp8(t, rounding="rceil")
        return q.data, q.scale

    data, scale = cast(x.to(xla_device))
    _assert_exact(data, scale, x, "rceil")


MULTI_OUTPUT_FUSION = "--xla_backend_extra_options=xla_cpu_use_multi_output_fusion"


@pytest.mark.parametrize("multi_output_fusion", [False, True], ids=["default", "multi_output_fusion"])
def test_xla_cpu_kernel_count(xla_device, monkeypatch, multi_output_fusion):
    """XLA:CPU compiles the cast to two kernels, one per output, with or without its
    multi-output fusion pass (off by default, on with the backend option above). That pass
    merges only fusions whose outputs have the same shape: the same-shape control pair becomes
    one kernel with it, while an elementwise output beside a reduction's stays two kernels, as
    do the cast's data [..., K] and scale [..., K/32]."""
    import torch_xla.runtime as xr

    if xr.device_type() != "CPU":
        pytest.skip("the expected counts are XLA:CPU's")
    if multi_output_fusion:
        monkeypatch.setenv("XLA_FLAGS", f"{os.environ.get('XLA_FLAGS', '')} {MULTI_OUTPUT_FUSION}".strip())
    x = torch.randn(64, 256, dtype=torch.bfloat16)
    same_shape = hlo.kernel_count(lambda t: (torch.sin(t) * 2, torch.cos(t) + 1), x)
    assert same_shape.count == (1 if multi_output_fusion else 2), same_shape
    with_reduction = hlo.kernel_count(lambda t: (torch.sin(t) * 2, torch.cos(t).reshape(64, 8, 32).amax(-1)), x)
    assert with_reduction.count == 2, with_reduction
    cast = hlo.kernel_count(lambda t: mx.to_mxfp8(t), x)
    assert all(k.startswith("fusion/") for k in cast.kernels)
    if multi_output_fusion:
        assert cast.count >= 2, cast
    else:
        assert cast.count == 2, cast
