"""``to_mxfp8`` on TPU over many shapes, as torch_xla builds it and libtpu compiles it: one
kernel at the ideal bytes, or a ``MosaicRelayoutWarning`` that names the shape, the generation
and the kernel count libtpu makes (compiled for TPU, not run). And the kernel's storage variants
and float16 inputs bit for bit in interpret mode.

The sweep is sampled, not a full cross product (44 shapes x 3 dtypes x 2 roundings x 4
generations would be 1056 compiles): shape ``i`` is compiled once, for generation ``i % 4``,
dtype ``(i // 4) % 3`` and rounding ``(i // 12) % 2``, so every shape is covered, every
(generation, dtype) pair 3 or 4 times, and both roundings with each. One TPU worker serves them
all.
"""

from __future__ import annotations

import itertools
import re
import warnings

import numpy as np
import pytest
import torch

from xlabridge import _optional
from xlabridge.errors import MosaicRelayoutWarning

pytestmark = pytest.mark.skipif(not _optional.is_available("jax"), reason="needs jax (pip install 'xlabridge[xla]')")

from tests.mx._cases import ROUNDINGS, make_input  # noqa: E402
from tests.mx.test_mosaic import _assert_exact, _interpret_on_xla_cpu, _jax_input  # noqa: E402, F401

GENERATIONS = ("v4", "v5e", "v5p", "v6e")
DTYPES = (torch.bfloat16, torch.float32, torch.float16)
SHAPES = [
    # 1-D
    (32,), (96,), (4096,), (16384,),
    # 2-D: K from 32 to 16384, rows 1 to 4099, odd and prime sizes
    (1, 32), (7, 64), (13, 96), (31, 160), (64, 8192), (127, 128), (129, 160), (256, 1024), (509, 224),
    (4099, 32), (4099, 96), (1021, 352), (2, 16384), (3, 16384), (17, 2048), (97, 4064), (257, 480), (1021, 64),
    (8, 32), (3, 320),
    # 3-D
    (3, 40, 96), (1, 1, 32), (5, 7, 64), (2, 4099, 32), (1000, 3, 32), (3, 5, 96), (11, 13, 256), (4, 127, 1024),
    (1, 97, 8192), (7, 1, 160), (2, 3, 16384), (4099, 1, 64), (37, 41, 32),
    # 4-D
    (2, 3, 5, 64), (1, 1, 1, 32), (3, 5, 7, 128), (2, 2, 131, 96), (5, 7, 11, 32), (1, 2, 4099, 32), (2, 3, 1, 1024),
]
CASES = [
    (shape, GENERATIONS[i % 4], DTYPES[(i // 4) % 3], ROUNDINGS[(i // 12) % 2]) for i, shape in enumerate(SHAPES)
]
_BOTH = (torch.bfloat16, torch.float32)
EXPECTED_EXCEPTIONS = {
    # XLA:TPU's default layouts of the input, data and scale pair K with different dimensions
    # (tiles of 8-bit arrays take at least 4 rows, of 32-bit ones 1: small dimensions go elsewhere)
    **dict.fromkeys([(5, 7, 64), (1000, 3, 32), (3, 5, 96), (2, 3, 5, 64), (5, 7, 11, 32), (2, 2, 131, 96),
                     (4, 127, 1024), (2, 3, 1, 1024), (2, 3, 16384)], _BOTH),
    (1, 97, 8192): (torch.float32,), (7, 1, 160): (torch.float32,),
    # a scale with one block per row (K = 32) takes a layout with its size-1 dimension major
    **dict.fromkeys([(2, 4099, 32), (37, 41, 32), (1, 2, 4099, 32)], _BOTH),
    # one-dimensional arrays over 128 elements are tiled several rows of 128 at a time
    **dict.fromkeys([(4096,), (16384,)], _BOTH),
}
"""Shapes, and for which input dtypes, the cast still takes more than one kernel (float16 has
bfloat16's layouts, and always one kernel more: XLA's conversion of its bits to bfloat16)."""


def _shape_exception(shape, dtype) -> bool:
    return (torch.bfloat16 if dtype == torch.float16 else dtype) in EXPECTED_EXCEPTIONS.get(shape, ())


requires_libtpu = pytest.mark.skipif(
    not _optional.is_available("libtpu"), reason="needs libtpu for TPU compiles (pip install 'xlabridge[tpu-compile]')"
)
requires_xla = pytest.mark.skipif(not _optional.is_available("torch_xla"), reason="needs torch_xla")


@pytest.fixture(scope="module")
def compiler():
    from xlabridge import tpu

    with tpu.TpuCompiler("tpu:v5e") as session:
        yield session


def test_sweep_covers_every_rank_size_generation_dtype_and_rounding():
    assert len(SHAPES) >= 40 and len(set(SHAPES)) == len(SHAPES)
    assert {len(s) for s in SHAPES} == {1, 2, 3, 4}
    assert min(s[-1] for s in SHAPES) == 32 and max(s[-1] for s in SHAPES) == 16384
    assert all(s[-1] % 32 == 0 for s in SHAPES)
    leading = {d for s in SHAPES for d in s[:-1]}
    assert min(leading) == 1 and max(leading) == 4099 and {7, 13, 31, 127, 509, 1021} <= leading
    assert {(g, d) for _, g, d, _ in CASES} == set(itertools.product(GENERATIONS, DTYPES))
    assert {(d, r) for _, _, d, r in CASES} == set(itertools.product(DTYPES, ROUNDINGS))


@requires_xla
@requires_libtpu
@pytest.mark.parametrize(("shape", "generation", "dtype", "rounding"), CASES, ids=[str(c) for c in CASES])
def test_one_kernel_or_a_warning(xla_device, compiler, shape, generation, dtype, rounding):
    """One ``tpu_custom_call`` and nothing else, its buffers the input and the two outputs only;
    or else the warning, whose kernel count is libtpu's."""
    from xlabridge.tpu import _lowering
    from xlabridge import mx
    from xlabridge.mx._mosaic import lowering as _tpu

    _tpu._warn_relayouts.cache_clear()  # once per shape and process: forget other tests' warnings
    x = torch.randn(shape).to(dtype).to(xla_device)
    tpu_lowering = _lowering.override_lowering(_lowering.LoweringTarget.TPU, generation=generation)
    with tpu_lowering, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        q = mx.to_mxfp8(x, rounding=rounding)
    result = compiler.compile_tensors([q.data, q.scale], topology=f"tpu:{generation}")
    del q
    said = [w for w in caught if issubclass(w.category, MosaicRelayoutWarning)]
    expect_warning = dtype == torch.float16 or _shape_exception(shape, dtype)
    if not said:
        assert not expect_warning, f"expected a MosaicRelayoutWarning, libtpu made {result.kernels}"
        kernels = result.kernels
        if int(np.prod(shape)) * x.element_size() <= 1024:
            # an input this small XLA:TPU may prefetch into VMEM (copy-start, v5p): not a relayout
            kernels = tuple(k for k in kernels if k != "copy-start")
        assert kernels == ("custom-call/tpu_custom_call",), result.kernels
        numel = int(np.prod(shape))
        ideal = numel * x.element_size() + numel + numel // 32
        buffers = result.memory.argument_bytes + result.memory.output_bytes
        # HBM holds arrays in whole tiles: each array once, padded to tiles of its default layout
        scale_shape = shape[:-1] + (shape[-1] // 32,)
        padded = sum(_padded_bytes(s, n) for s, n in ((shape, x.element_size()), (shape, 1), (scale_shape, 1)))
        assert ideal <= buffers <= padded, (buffers, ideal, padded, result.memory)
        assert result.memory.temp_bytes <= 64 * 1024, result.memory
        return
    assert expect_warning, f"unexpected warning: {said[0].message}"
    message = str(said[0].message)
    assert len(said) == 1
    assert str(shape) in message and generation in message and str(dtype).removeprefix("torch.") in message
    count = int(re.search(r"is at least (\d+) kernels", message).group(1))
    assert result.kernel_count >= count > 1, (message, result.kernels)
    if not _shape_exception(shape, dtype):  # float16 alone: its conversion, then the kernel
        assert "float16 input to bfloat16" in message
        assert len(result.kernels) == 2 and result.kernels[1] == "custom-call/tpu_custom_call", result.kernels


def _padded_bytes(shape: tuple[int, ...], itemsize: int) -> int:
    """Bytes of an array of ``shape`` in its default layout's two minor dimensions
    (``xlabridge.tpu._layout``, checked against libtpu in tests/tpu/test_layout.py), rounded up to
    the largest tiles XLA:TPU uses: 128 lanes by 32 / itemsize * 4 rows (v6e tiles 8-bit arrays
    by 32 rows), 1024 elements for one dimension."""
    from xlabridge.tpu._layout import default_minor_to_major

    if len(shape) == 1:
        return -(-shape[0] // 1024) * 1024 * itemsize
    minor, second = default_minor_to_major(shape, itemsize)[:2]
    rows = 32 // itemsize
    others = int(np.prod([d for i, d in enumerate(shape) if i not in (minor, second)]))
    return others * -(-shape[second] // rows) * rows * -(-shape[minor] // 128) * 128 * itemsize


@requires_xla
def test_warns_once_per_shape(xla_device):
    from xlabridge.tpu import _lowering
    from xlabridge import mx
    from xlabridge.mx._mosaic import lowering as _tpu

    _tpu._warn_relayouts.cache_clear()
    x = torch.randn(5, 7, 11, 32).to(xla_device)
    tpu_lowering = _lowering.override_lowering(_lowering.LoweringTarget.TPU, generation="v5e")
    with tpu_lowering, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            mx.to_mxfp8(x)
        mx.to_mxfp8(torch.randn(64, 256).to(xla_device))
    said = [w for w in caught if issubclass(w.category, MosaicRelayoutWarning)]
    assert len(said) == 1 and "(5, 7, 11, 32)" in str(said[0].message)


# ------------------------------------------------------------------ interpret mode, bit for bit


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("stored", list(itertools.product([False, True], repeat=3)), ids=lambda s: "".join("RT"[b] for b in s))
def test_every_storage_variant_is_exact(dtype, stored):
    """Input, data and scale each row-major or rows-minor, on a shape with a partial lane chunk
    (K = 96) and a partial row strip (R = 40)."""
    from xlabridge.mx._mosaic import rows as _mosaic

    x = make_input((3, 40, 96), dtype, seed=60)
    result = _mosaic.to_mxfp8(_jax_input(x), 32, "rceil", interpret=True, rows_minor=_mosaic.RowsMinor(*stored))
    _assert_exact(result, x, "rceil")


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_every_float16_bit_pattern(rounding):
    """All 65536 float16 bit patterns (subnormals, infinities, NaNs) through the kernel's widening."""
    from xlabridge.mx._mosaic import rows as _mosaic

    bits = np.arange(1 << 16, dtype=np.uint16).reshape(512, 128)
    x = torch.from_numpy(bits.view(np.float16))
    _assert_exact(_mosaic.to_mxfp8(_jax_input(x), 32, rounding, interpret=True), x, rounding)


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((1000, 3, 32), torch.bfloat16), ((5, 7, 11, 32), torch.float16), ((200, 32), torch.float32), ((3, 5, 96), torch.bfloat16)],
)
def test_planned_views_are_exact(shape, dtype):
    """The plan's views: dimensions reordered ((1000, 3, 32): R is the first, stored rows-minor;
    (5, 7, 11, 32): R is the second of four) and put back, bit for bit in interpret mode."""
    from xlabridge.mx._mosaic import rows as _mosaic

    p = _mosaic.plan(shape, torch.finfo(dtype).bits // 8)
    assert p.order != tuple(range(len(shape))) or p.rows_minor != _mosaic.RowsMinor(), p
    x = make_input(shape, dtype, seed=61)
    _assert_exact(_mosaic.to_mxfp8(_jax_input(x), 32, "floor", interpret=True), x, "floor")
