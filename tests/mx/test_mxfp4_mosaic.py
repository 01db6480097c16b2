"""The MXFP4 Mosaic kernels: bit for bit in interpret mode (XLA:CPU arithmetic, so the spec model's
``ftz`` variant), one kernel at the ideal bytes when libtpu compiles them for TPU v5e and v6e (and
v7, where libtpu is 0.0.50 or later: ``make test-torchtpu`` runs those tests), the matmul reading the
weight at 0.53 bytes per parameter, and what reaches torch_xla's graph. TPU figures are compiled
here by libtpu's compile-only client; nothing runs on a TPU.

Shapes stay a few MB (the 1 MB to 1 GB sweep is ``tools/bench/mx4_cast_tpu.py``'s).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from tests.conftest import requires_xla
from tests.mx._cases import ROUNDINGS, make_input
from tests.mx._reference import dequantize_fp4_reference, mxfp4_reference
from xlabridge import _optional

pytestmark = pytest.mark.skipif(not _optional.is_available("jax"), reason="needs jax (pip install 'xlabridge[xla]')")
requires_libtpu = pytest.mark.skipif(
    not _optional.is_available("libtpu"), reason="needs libtpu for TPU compiles (pip install 'xlabridge[tpu-compile]')"
)
MB = 1 << 20
HIDDEN = 2880


@pytest.fixture(autouse=True)
def _interpret_on_xla_cpu():
    import jax

    with jax.default_device(jax.devices("cpu")[0]):
        yield


def _jax(x: torch.Tensor):
    import jax.numpy as jnp

    dtype = {torch.float32: jnp.float32, torch.bfloat16: jnp.bfloat16, torch.float16: jnp.float16}[x.dtype]
    return jnp.asarray(x.float().numpy()).astype(dtype)


def _all_layouts():
    from xlabridge.mx._mosaic import fp4

    return [None, fp4.Layouts(True, True, True), fp4.Layouts(False, True, False)]


# ------------------------------------------------------------------ interpret mode, bit for bit


@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize(("shape", "dtype"), [((64, 256), torch.float32), ((3, 5, 96), torch.bfloat16),
                                              ((16, HIDDEN), torch.float16)])
def test_cast_interpret_is_bit_exact(shape, dtype, rounding):
    """Each array in each storage the kernel has (row-major, K-major), K = 2880 (chunks of 256 and a
    tail of 64), 40% special blocks."""
    from xlabridge.mx._mosaic import fp4

    x = make_input(shape, dtype, seed=400, elem="e2m1")
    data_ref, scale_ref = mxfp4_reference(x.double().numpy(), 32, rounding, ftz=True)
    for layouts in _all_layouts():
        data, scale = (np.asarray(a) for a in fp4.to_mxfp4(_jax(x), rounding, layouts=layouts, interpret=True))
        assert (scale == scale_ref).all(), (layouts, int((scale != scale_ref).sum()))
        assert (data == data_ref).all(), (layouts, int((data != data_ref).sum()))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_dequantize_interpret_is_exact(dtype):
    import jax.numpy as jnp

    from xlabridge.mx._mosaic import fp4

    x = make_input((300, 256), torch.float32, seed=401, elem="e2m1")  # 300 rows: a partial row tile
    data, scale = mxfp4_reference(x.double().numpy(), 32, "rceil")
    expected = torch.from_numpy(dequantize_fp4_reference(data, scale, 32, ftz=True)).to(getattr(torch, dtype)).float().numpy()
    for layouts in _all_layouts():
        got = np.asarray(fp4.from_mxfp4(jnp.asarray(data), jnp.asarray(scale), dtype, layouts=layouts,
                                        interpret=True).astype(jnp.float32))
        same = ((got == expected) & (np.signbit(got) == np.signbit(expected))) | (np.isnan(got) & np.isnan(expected))
        assert same.all(), (layouts, int((~same).sum()))


@pytest.mark.parametrize(("experts", "groups", "rows", "n", "k", "storage"), [
    (1, 1, 3, 256, 512, None),  # a linear's weight, XLA's default storage
    (4, 2, 5, 160, HIDDEN, ("rows", "rows")),  # K = 2880: chunks and a tail; N = 160, one partial tile
    (2, 2, 4, 384, 320, ("k_major", "outer")),  # scale bytes stored experts-second-minor
    (3, 2, 2, 300, 256, ("k_major", "k_major")),
])
def test_matmul_interpret(experts, groups, rows, n, k, storage):
    """Within bfloat16 rounding of the float64 product of the dequantized weight; NaN blocks stay NaN."""
    import jax.numpy as jnp

    from xlabridge.mx import _eager
    from xlabridge.mx._mosaic import fp4_matmul as fm

    g = torch.Generator().manual_seed(402)
    data = torch.randint(0, 256, (experts, n, k // 2), dtype=torch.uint8, generator=g)
    scale = torch.randint(118, 130, (experts, n, k // 32), dtype=torch.uint8, generator=g)
    scale[0, 0, 0] = 255
    x = torch.randn(groups, rows, k, generator=g).bfloat16()
    ids = torch.tensor([experts - 1, 0][:groups], dtype=torch.int32)
    bias = torch.randn(experts, n, generator=g)
    layouts = fm.weight_layouts(n, k, experts) if storage is None else fm.WeightLayouts(*map(fm.Storage, storage))
    y = fm.matmul(_jax(x), fm.stored(jnp.asarray(data.numpy()), layouts.data), fm.stored(jnp.asarray(scale.numpy()), layouts.scale),
                  jnp.asarray(ids.numpy()), jnp.asarray(bias.numpy()), layouts=layouts, interpret=True)
    y = torch.from_numpy(np.array(y.astype(jnp.float32))).double()
    w = _eager.from_mxfp4(data, scale, 32, torch.bfloat16).double()[ids.long()]
    exact = x.double() @ w.transpose(-1, -2) + bias.double()[ids.long()][:, None, :]
    finite = exact.isfinite()
    assert (y.isnan() == exact.isnan()).all()
    off = (y - exact).abs()[finite]
    assert bool((off <= 2**-8 * exact.abs()[finite] + 2**-14 * exact.abs()[finite].max()).all())


def test_storage_follows_xlas_default_layouts():
    """gpt-oss's expert weights: bytes K-major, scale bytes experts-second-minor; a square Llama-like
    weight row-major (``xlabridge.tpu._layout``'s rule, which tests/tpu checks against libtpu)."""
    from xlabridge.mx._mosaic import fp4_matmul as fm

    assert fm.weight_layouts(5760, HIDDEN, 32) == fm.WeightLayouts(fm.Storage.K_MAJOR, fm.Storage.OUTER)
    assert fm.weight_layouts(HIDDEN, HIDDEN, 32) == fm.WeightLayouts(fm.Storage.K_MAJOR, fm.Storage.OUTER)
    assert fm.weight_layouts(4096, 4096, None) == fm.WeightLayouts(fm.Storage.ROWS, fm.Storage.ROWS)


# ------------------------------------------------------------------ compiled for TPU by libtpu


@pytest.fixture(scope="module")
def compiler():
    from xlabridge import tpu

    with tpu.TpuCompiler("tpu:v6e") as session:
        yield session


@requires_libtpu
@pytest.mark.parametrize("generation", ["v5e", "v6e"])
@pytest.mark.parametrize(("shape", "dtype"), [((256, 8192), "bfloat16"), ((5760, HIDDEN), "bfloat16"), ((512, 1024), "float32")])
def test_cast_and_dequantize_compile_to_one_kernel_at_ideal_bytes(compiler, generation, shape, dtype):
    import jax

    from xlabridge import tpu
    from xlabridge.mx._mosaic import fp4

    vmem = tpu.CHIPS[generation].vmem_bytes
    n = shape[0] * shape[1]
    itemsize = jax.numpy.dtype(dtype).itemsize
    cast = compiler.compile_jax(functools.partial(fp4.to_mxfp4, rounding="floor", vmem_bytes=vmem),
                                jax.ShapeDtypeStruct(shape, dtype), topology=f"tpu:{generation}")
    assert cast.kernels == ("custom-call/tpu_custom_call",), cast.kernels
    assert cast.memory.argument_bytes == n * itemsize
    # the outputs' buffers: the bytes themselves and the tile padding of XLA's layout (90 scale bytes
    # a row, K-major, fill 96 sublanes)
    assert n // 2 + n // 32 <= cast.memory.output_bytes <= (n // 2 + n // 32) * 1.01 + 4096
    packed = (shape[0], shape[1] // 2)
    back = compiler.compile_jax(functools.partial(fp4.from_mxfp4, dtype=dtype, vmem_bytes=vmem),
                                jax.ShapeDtypeStruct(packed, "uint8"), jax.ShapeDtypeStruct((shape[0], shape[1] // 32), "uint8"),
                                topology=f"tpu:{generation}")
    assert back.kernels == ("custom-call/tpu_custom_call",), back.kernels
    assert n // 2 + n // 32 <= back.memory.argument_bytes <= (n // 2 + n // 32) * 1.01 and back.memory.output_bytes == n * itemsize


@requires_libtpu
@pytest.mark.parametrize("generation", ["v5e", "v6e"])
def test_gpt_oss_expert_matmul_compiles_and_reads_mxfp4(compiler, generation):
    """gpt-oss-20b's gate_up projection, 32 experts, 8 rows in each of the 32 groups: one kernel,
    whose declared traffic is the MXFP4 weight (0.53 bytes per parameter), the activations (read once
    per column tile) and the result."""
    import jax

    from xlabridge.mx._mosaic import fp4_matmul as fm

    E, A, M, N, K = 32, 32, 8, 5760, HIDDEN
    S = jax.ShapeDtypeStruct
    result = compiler.compile_jax(fm.expert_linear, S((A, M, K), "bfloat16"), S((E, N, K // 2), "uint8"),
                                  S((E, N, K // 32), "uint8"), S((A,), "int32"), S((E, N), "float32"),
                                  topology=f"tpu:{generation}")
    assert result.kernels == ("custom-call/tpu_custom_call",), result.kernels
    weight_bytes = E * N * (K // 2 + K // 32)
    assert result.memory.argument_bytes >= weight_bytes
    assert weight_bytes / (E * N * K) == pytest.approx(0.53125)
    tn, _ = fm.tiles_for(N, K)
    activations = A * M * K * 2 * -(-N // tn) + A * M * N * 2
    assert result.bytes_accessed == weight_bytes + activations


def _memory_colors(fn, *args) -> list[str]:
    """The memory-space colors in the backend config of ``fn``'s lowering for TPU (no libtpu needed):
    jax 0.10's ``input_memory_space_colors`` and ``output_memory_space_colors``, jax 0.7's
    ``output_memory_colors``."""
    import re

    import jax

    text = jax.jit(fn).trace(*args).lower(lowering_platforms=("tpu",)).as_text().replace("\\22", '"')
    return re.findall(r'"(input_memory_space_colors|output_memory_space_colors|output_memory_colors)"', text)


def test_arrays_are_pinned_to_hbm_only_for_v7():
    """``hbm.pins``: v7's XLA colors a custom call's arrays itself, so every kernel pins each operand
    and result to HBM there; for the other generations the backend config carries no color, the
    kernels compile as before."""
    import jax

    from xlabridge.mx._mosaic import fp4, fp4_matmul, hbm

    assert [g for g in ("v4", "v5e", "v5p", "v6e", "v7") if hbm.pins(g)] == ["v7"] and not hbm.pins(None)
    S = jax.ShapeDtypeStruct
    x, data, scale = S((64, 512), "bfloat16"), S((64, 256), "uint8"), S((64, 16), "uint8")
    for pin in (False, True):
        calls = [(functools.partial(fp4.to_mxfp4, pin_hbm=pin), x), (functools.partial(fp4.from_mxfp4, pin_hbm=pin), data, scale),
                 (functools.partial(fp4_matmul.linear, pin_hbm=pin), S((8, 512), "bfloat16"), S((256, 256), "uint8"),
                  S((256, 16), "uint8"))]
        for fn, *args in calls:
            colors = _memory_colors(fn, *args)
            assert (len(colors) == 2) if pin else not colors, (fn, colors)


@requires_libtpu
def test_v7_compiles_each_operation_to_one_kernel(compiler):
    """For v7 (libtpu 0.0.50 and later) XLA:TPU's ``TpuCustomCallMemorySpacePolicy`` colors a
    kernel's arrays VMEM where they fit (``hbm.py``): unpinned, a 1 MB cast reaches its kernel
    through a ``copy-start`` prefetch of its input. Pinned to HBM, the cast, its inverse and the
    MXFP4 linear (gpt-oss's gate_up at decode) are one kernel each, at the cast's ideal bytes."""
    import jax

    from xlabridge import tpu
    from xlabridge.mx._mosaic import fp4, fp4_matmul

    if compiler.versions["libtpu"] < "0.0.50":
        pytest.skip(f"libtpu {compiler.versions['libtpu']} builds no TPU7x topology (0.0.50 and later do: make test-torchtpu)")
    S = jax.ShapeDtypeStruct
    vmem = tpu.CHIPS["v7"].vmem_bytes
    shape, packed, scale = (64, 8192), (64, 4096), (64, 256)
    cast = functools.partial(fp4.to_mxfp4, rounding="floor", vmem_bytes=vmem)
    unpinned = compiler.compile_jax(cast, S(shape, "bfloat16"), topology="tpu:v7")
    assert unpinned.kernels == ("copy-start", "custom-call/tpu_custom_call"), unpinned.kernels
    one = ("custom-call/tpu_custom_call",)
    pinned = compiler.compile_jax(functools.partial(cast, pin_hbm=True), S(shape, "bfloat16"), topology="tpu:v7")
    assert pinned.kernels == one, pinned.kernels
    assert pinned.memory.argument_bytes == 2 * shape[0] * shape[1]
    back = compiler.compile_jax(functools.partial(fp4.from_mxfp4, dtype="bfloat16", vmem_bytes=vmem, pin_hbm=True),
                                S(packed, "uint8"), S(scale, "uint8"), topology="tpu:v7")
    assert back.kernels == one, back.kernels
    linear = compiler.compile_jax(functools.partial(fp4_matmul.linear, pin_hbm=True), S((1, HIDDEN), "bfloat16"),
                                  S((5760, HIDDEN // 2), "uint8"), S((5760, HIDDEN // 32), "uint8"), topology="tpu:v7")
    assert linear.kernels == one, linear.kernels


# ------------------------------------------------------------------ through torch_xla


@pytest.fixture
def tpu_lowering():
    from xlabridge.tpu import _lowering

    with _lowering.override_lowering(_lowering.LoweringTarget.TPU, generation="v6e"):
        yield


@requires_xla
def test_lazy_graph_holds_one_tpu_custom_call_each(xla_device, tpu_lowering):
    """Cast, dequantize and linear each put one ``tpu_custom_call`` into torch_xla's graph, lowered
    without loading libtpu into this process."""
    import torch_xla

    from xlabridge import mx

    x = torch.randn(64, 512, dtype=torch.bfloat16).to(xla_device)
    q = mx.to_mxfp4(x, rounding="rceil")
    weight = mx.to_mxfp4(torch.randn(256, 512)).data.to(xla_device), mx.to_mxfp4(torch.randn(256, 512)).scale.to(xla_device)
    outputs = {"cast": [q.data, q.scale], "dequantize": [mx.from_mxfp4(q)],
               "linear": [mx.mxfp4_linear(x, mx.MXFP4Tensor(*weight))]}
    for name, tensors in outputs.items():
        text = torch_xla._XLAC._get_xla_tensors_hlo(tensors)
        assert text.count('custom_call_target="tpu_custom_call"') == (2 if name == "dequantize" else 1), (name, text)
    del q, outputs  # never executed: XLA:CPU has no tpu_custom_call
    with open("/proc/self/maps") as maps:
        assert "libtpu" not in maps.read()


@requires_xla
def test_lazy_graph_pins_the_arrays_for_v7(xla_device):
    """Traced for v7, each ``tpu_custom_call``'s backend config pins its operands and results to HBM
    (``hbm.py``); for v6e it pins nothing."""
    import torch_xla

    from xlabridge import mx
    from xlabridge.tpu import _lowering

    x = torch.randn(64, 512, dtype=torch.bfloat16).to(xla_device)
    w = mx.to_mxfp4(torch.randn(256, 512))
    weight = mx.MXFP4Tensor(w.data.to(xla_device), w.scale.to(xla_device))
    for generation, pinned in (("v6e", False), ("v7", True)):
        with _lowering.override_lowering(_lowering.LoweringTarget.TPU, generation=generation):
            q = mx.to_mxfp4(x)
            y = mx.mxfp4_linear(x, weight)
            tensors = [q.data, q.scale, mx.from_mxfp4(q), y]
        text = torch_xla._XLAC._get_xla_tensors_hlo(tensors)
        assert text.count("input_memory_space_colors") == (3 if pinned else 0), generation
        assert text.count("output_memory_colors") + text.count("output_memory_space_colors") == (3 if pinned else 0), generation
        del q, y, tensors  # never executed: XLA:CPU has no tpu_custom_call


@requires_xla
@requires_libtpu
def test_kernel_count_through_torch_xla(xla_device):
    """``hlo.kernel_count(..., target="tpu:v6e")`` of what torch_xla builds: one kernel each."""
    from xlabridge import hlo, mx

    x = torch.randn(256, 8192, dtype=torch.bfloat16)
    assert hlo.kernel_count(lambda t: mx.to_mxfp4(t), x, target="tpu:v6e").kernels == ("custom-call/tpu_custom_call",)
    weight = mx.to_mxfp4(torch.randn(5760, HIDDEN))
    report = hlo.kernel_count(lambda t, d, s: mx.mxfp4_linear(t, mx.MXFP4Tensor(d, s)),
                              torch.randn(8, HIDDEN, dtype=torch.bfloat16), weight.data, weight.scale, target="tpu:v6e")
    assert report.kernels == ("custom-call/tpu_custom_call",), report.kernels
