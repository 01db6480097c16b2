"""The CUDA MXFP4 decode kernels (``xlabridge/mx/_cuda``: ``fp4_decode`` and the warpgroup kernel
``fp4_wgmma``): their sources compiled by NVRTC for Hopper in every environment (a compiler, no GPU
needed); on a Hopper GPU, every candidate the tuning times, and the warpgroup kernel with K split
across CTAs and not, against the float64 product of the NumPy model of the OCP MX spec, with the
scale bytes at their extremes, expert ids and both bias dtypes; and the operands they refuse, with why.
"""

from __future__ import annotations

import pytest
import torch

from tests.mx._cases import assert_within_bf16_of, mxfp4_extreme_scales
from tests.mx._reference import dequantize_fp4_reference
from xlabridge.mx._cuda import _runtime, fp4_decode, fp4_wgmma, x_order
from xlabridge.mx._cuda.dispatch import kernel_of
from xlabridge.mx._fp4_packing import Packing, repack
from xlabridge.mx._triton import fp4_matmul


def _nvrtc_or_skip() -> None:
    try:
        _runtime.nvrtc()
    except _runtime.CudaError as error:
        pytest.skip(str(error))


HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)
requires_hopper = pytest.mark.skipif(not HOPPER, reason="needs a CUDA GPU of compute capability 9.0 or newer (the device machine)")
CANDIDATES = [(key, config.decode) for key, configs in fp4_matmul.DECODE.items() for config in configs]
WARPGROUP = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def _name(config, nt, bias=0, ids=False) -> str:
    return kernel_of(config)._name(config, nt, bias, ids)


# ---------------------------------------------------------------- any machine


@pytest.mark.parametrize("config, nt, bias, ids", [
    (fp4_decode.Config(1, 1, 8, 1), 1, 0, False),  # registers, one span a step
    (fp4_decode.Config(2, 1, 16, 1, True), 2, 1, True),  # registers, the next step's loads first
    (fp4_decode.Config(2, 1, 8, 2, min_blocks=2), 4, 2, False),  # two spans a step, budgeted registers
    (fp4_decode.Config(2, 1, 8, 1, stages=3, x_async=True), 2, 2, True),  # the ring, x through it
    (fp4_decode.Config(1, 1, 8, 1, stages=3, x_paired=True), 8, 1, False),  # the ring, x paired by the host
    (fp4_decode.Config(2, 2, 2, 1, True, k_spans=8), 2, 1, True),  # K split across CTAs
    (fp4_decode.Config(1, 4, 1, 1, k_spans=4), 8, 0, False),
    (fp4_decode.Config(1, 2, 2, 1, stages=4, k_spans=8), 4, 2, True),
    (fp4_decode.Config(2, 1, 4, 1, True, acc_sets=2), 2, 0, False),  # two sets of accumulators
], ids=["registers", "double", "two-spans", "ring-x", "ring-paired", "split-double", "split-64-tokens", "split-ring",
        "two-accumulator-sets"])
def test_each_code_path_compiles_for_hopper_with_nvrtc(config, nt, bias, ids):
    """The source, with each way of keeping loads in flight, is valid CUDA for ``sm_90`` to the NVRTC
    this environment's torch brings: a GPU binary (ELF) whose symbol is the kernel's name."""
    _nvrtc_or_skip()
    binary = fp4_decode.binary(config, nt, bias, ids, (9, 0), cached=False)
    assert binary[:4] == b"\x7fELF" and fp4_decode._name(config, nt, bias, ids).encode() in binary


@pytest.mark.parametrize("config, nt, bias, ids", [
    (fp4_wgmma.Config(1), 1, 0, False),
    (fp4_wgmma.Config(2, 8, min_blocks=2), 3, 1, True),
    (fp4_wgmma.Config(1, 2), 8, 2, False),
    (fp4_wgmma.Config(2, 4, pipeline=fp4_wgmma.Pipeline.PAIRS, slots=2), 8, 0, True),
], ids=["n8", "n24-two-warpgroups", "n64", "n64-pairs"])
def test_the_warpgroup_kernel_compiles_for_sm90a_with_its_mma_shape(config, nt, bias, ids):
    """``fp4_wgmma.cu`` with the host's ``wgmma_chunk`` for ``nt`` token tiles is valid CUDA for
    ``sm_90a``: a binary with the kernel's symbol, whose text holds the m64n(8 nt)k16 MMA."""
    _nvrtc_or_skip()
    binary = fp4_wgmma.binary(config, nt, bias, ids, cached=False)
    assert binary[:4] == b"\x7fELF" and fp4_wgmma._name(config, nt, bias, ids).encode() in binary
    assert f"m64n{8 * nt}k16" in fp4_wgmma.source(nt)


def _ptxas_report_or_skip(config: fp4_wgmma.Config, nt: int) -> _runtime.PtxasReport:
    """``fp4_wgmma.report``, skipped where this machine's NVRTC logs no ptxas report."""
    _nvrtc_or_skip()
    try:
        return fp4_wgmma.report(config, nt, 0, False)
    except _runtime.NoPtxasReport as error:
        pytest.skip(str(error)[:300])


@pytest.mark.parametrize("key, config", [pytest.param(key, config, id=_name(config, key)) for key, config in CANDIDATES
                                         if isinstance(config, fp4_wgmma.Config)])
def test_no_warpgroup_candidate_spills_or_has_its_mmas_serialized_by_ptxas(key, config):
    """``ptxas``'s own report (``-v``) on every warpgroup candidate the tuning times: nothing spilled
    to local memory, and no MMA serialized (its ``C751x`` warnings: each MMA waited for before the
    next is issued, which undoes the kernel's pipelining)."""
    report = _ptxas_report_or_skip(config, key)
    assert (report.spill_stores, report.spill_loads, report.warnings) == (0, 0, ()), report


def test_pairs_keeps_the_split_sums_in_fewer_registers_than_span_at_64_tokens():
    """At 64 tokens ``Pipeline.SPAN``'s registers are set by its split-K epilogue (an address per
    sum); ``PAIRS`` keeps the sums in its threads' order: fewer registers, room for four CTAs an SM
    (128 a thread) without a spill, where ``SPAN`` spills there."""
    span, pairs = (_ptxas_report_or_skip(fp4_wgmma.Config(1, 4, pipeline=p), 8) for p in fp4_wgmma.Pipeline)
    assert pairs.registers < span.registers, (span, pairs)
    four = dict(min_blocks=4, slots=2)
    span4, pairs4 = (_ptxas_report_or_skip(fp4_wgmma.Config(1, 4, pipeline=p, **four), 8) for p in fp4_wgmma.Pipeline)
    assert span4.spill_stores > 0 and (pairs4.spill_stores, pairs4.spill_loads, pairs4.warnings) == (0, 0, ()), (span4, pairs4)


@pytest.mark.parametrize("tiles, k, per_sm", [(8, 1952, 2), (224, 4096, 2), (64, 14336, 4), (1, 128, 8), (300, 4096, 2)])
def test_split_k_fills_the_sms_and_keeps_a_span_per_split(tiles, k, per_sm):
    """``splits``: every span of K in exactly one split, none empty; split (in twos) only while the
    grid is short of ``per_sm`` CTAs per SM on 132 SMs."""
    split, per = fp4_wgmma.splits(fp4_wgmma.Config(per_sm=per_sm), tiles, k, 132)
    spans = -(-k // 128)
    assert (split - 1) * per < spans <= split * per
    assert split == 1 or tiles * (split // 2) < per_sm * 132 or per == 1
    assert tiles * split >= per_sm * 132 or per <= 2


@pytest.mark.parametrize("tiles, k", [(8, 1952), (1, 14336), (45, 2880)])
def test_splits_added_in_a_cluster_stay_within_the_portable_cluster(tiles, k):
    """``Sums.CLUSTER`` launches a row tile's splits as one cluster: never more than ``MAX_CLUSTER``
    (8, what every Hopper GPU launches), where the global sums split as far as the SMs ask."""
    config = dict(per_sm=8)
    split, per = fp4_wgmma.splits(fp4_wgmma.Config(**config, sums="cluster"), tiles, k, 132)
    unbounded, _ = fp4_wgmma.splits(fp4_wgmma.Config(**config), tiles, k, 132)
    assert split == min(unbounded, 8) and fp4_wgmma.MAX_CLUSTER == 8
    assert (split - 1) * per < -(-k // 128) <= split * per


_ON = [pytest.param("cpu", id="torch"),
       pytest.param("cuda", id="kernel", marks=pytest.mark.skipif(not HOPPER, reason="x_order.cu needs a CUDA GPU of "
                                                                  "compute capability 9.0 or newer (the device machine)"))]


def _k_parts(k: int, packing: Packing, K: int) -> tuple[int, ...]:
    """``(s, t, q, h, d, j)`` of element ``k`` of ``K``: ``128 s + 32 t + 8 q + 4 j + 2 h + d`` for
    the spec layout's pairs; for a ``Packing.DECODE`` weight's (consecutive elements),
    ``128 s + 32 q + 8 t + 4 h + 2 d + j`` in a whole span (thread ``t``'s word ``q``) and
    ``128 s + 32 t + 8 q + 4 h + 2 d + j`` in the span ``K`` ends inside."""
    s, t, q = k // 128, k % 128 // 32, k % 32 // 8
    if packing is Packing.DECODE:
        if 128 * (s + 1) <= K:
            t, q = q, t
        return s, t, q, k % 8 // 4, k % 4 // 2, k % 2
    return s, t, q, k % 4 // 2, k % 2, k % 8 // 4


@pytest.mark.parametrize("device", _ON)
@pytest.mark.parametrize("tokens, nt", [(5, 1), (61, 8)])
@pytest.mark.parametrize("packing", list(Packing), ids=[p.value for p in Packing])
def test_mma_order_x_puts_each_element_where_the_kernel_s_descriptors_read_it(device, tokens, nt, packing):
    """``mma_order_x`` (PyTorch's off a GPU, ``x_order.cu`` on one) against the layout worked out
    element by element: tokens padded to ``8 nt``, K = 224 to two spans, with zeros; element ``k`` of
    token ``8 g + r`` (``_k_parts``: the spec's pairs, or a packed weight's, which are ``x``'s own,
    each whole span's words transposed) lands in span ``s``'s chunk ``2q + h``, core matrix ``d``,
    token tile ``g``, row ``r``, position ``2t + j``."""
    x = torch.randn(2, tokens, 224).bfloat16()
    got = fp4_wgmma.mma_order_x(x.to(device), nt, packing).cpu()
    assert got.shape == (2, 2 * nt * 1024)
    expected = torch.zeros(2, 2 * nt * 1024, dtype=torch.bfloat16)
    for k in range(224):
        s, t, q, h, d, j = _k_parts(k, packing, 224)
        for token in range(tokens):
            g, r = divmod(token, 8)
            expected[:, nt * 1024 * s + nt * 128 * (2 * q + h) + nt * 64 * d + 64 * g + 8 * r + 2 * t + j] = x[:, token, k]
    assert torch.equal(got, expected)


@pytest.mark.parametrize("kwargs, message", [
    ({"wg": 0}, "wg must be a positive int"),
    ({"group": 0}, "group must be a positive int"),
    ({"wg": 5}, "at most 4"),
    ({"per_sm": 1.5}, "per_sm must be a positive int"),
    ({"stages": 1}, "stages must be at least 2"),
    ({"wg": 4, "stages": 12}, "must fit"),
    ({"pipeline": "chunks"}, "pipeline must be one of"),
    ({"slots": 1}, "slots must be at least 2"),
    ({"slots": True}, "slots must be a positive int"),
    ({"sums": "shared"}, "sums must be one of \\['global', 'cluster'\\]"),
    ({"wg": 4, "stages": 4, "slots": 12}, "must fit"),
])
def test_bad_warpgroup_configurations_say_which_field_and_what_was_expected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        fp4_wgmma.Config(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"rt": 0}, "rt must be a positive int"),
    ({"stages": 1}, "stages must be 0"),
    ({"x_async": True}, "x_async needs stages"),
    ({"wn": 8, "wk": 8}, "at most 1024"),
    ({"stages": 4, "x_early": True}, "x_early must be None, or a bool on the registers path"),
    ({"x_early": 1}, "x_early must be None, or a bool"),
    ({"k_spans": -1}, "k_spans must be an int >= 0"),
    ({"k_spans": 2.0}, "k_spans must be an int >= 0"),
    ({"acc_sets": 3}, "acc_sets must be 1 or 2"),
])
def test_bad_configurations_say_which_field_and_what_was_expected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        fp4_decode.Config(**kwargs)


@pytest.mark.parametrize("k, k_spans", [(1952, 4), (2880, 8), (14336, 16), (128, 4), (4096, 32)])
def test_a_split_of_k_covers_its_spans_with_only_the_last_split_short(k, k_spans):
    """``k_spans``: ``splits`` CTAs along K cover its spans, the last one the only one cut short; no
    dynamic shared memory is added (the splits' sums go through global memory)."""
    config = fp4_decode.Config(2, 2, 2, k_spans=k_spans)
    spans = -(-k // 128)
    split = config.splits(k)
    assert (split - 1) * k_spans < spans <= split * k_spans
    assert fp4_decode.Config().splits(k) == 1
    assert config.dynamic_bytes(8) == 0 and config.fits(8)


def test_a_split_s_last_split_flag_counts_against_the_static_shared_memory():
    """Partial sums of exactly 48 KiB (three warps along K past the first, two along N, two row tiles,
    64 tokens) leave no room for the split's flag: ``fits`` says no, and so does NVRTC's ptxas (static
    shared memory past 48 KiB); without ``k_spans`` the same sums compile."""
    config = fp4_decode.Config(2, 2, 4, k_spans=4)
    assert not config.fits(8) and fp4_decode.Config(2, 2, 4).fits(8)
    _nvrtc_or_skip()
    with pytest.raises(_runtime.CudaError, match="smem|shared"):
        fp4_decode.binary(config, 8, 0, False, (9, 0), cached=False)
    assert fp4_decode.binary(fp4_decode.Config(2, 2, 4), 8, 0, False, (9, 0), cached=False)[:4] == b"\x7fELF"


def test_every_candidate_fits_a_hopper_sm_at_its_token_tiles():
    for key, config in CANDIDATES:
        assert isinstance(config, fp4_wgmma.Config) or config.fits(key), (key, config)


def test_operands_off_a_hopper_gpu_are_refused_with_why():
    x = torch.zeros(1, 4, 64, dtype=torch.bfloat16)
    data, scale = torch.zeros(1, 16, 32, dtype=torch.uint8), torch.zeros(1, 16, 2, dtype=torch.uint8)
    assert "float32" in fp4_decode.refusal(x.float(), data, scale, None, None)
    if not HOPPER:
        assert "not a CUDA GPU of compute capability 9.0" in fp4_decode.refusal(x, data, scale, None, None)
        assert "not a CUDA GPU of compute capability 9.0" in fp4_wgmma.refusal(x, data, scale, None, None)


# ---------------------------------------------------------------- on a Hopper GPU


def _operands(rows: int, seed: int):
    """``mxfp4_extreme_scales`` for three experts' weights of 200 rows (not a multiple of 16), scale
    bytes around 2**-4, and 129 and 130 planted too (past the one-multiplication decode); experts 1
    and 0 chosen for x's two groups of rows."""
    g = torch.Generator().manual_seed(seed)
    planted = ((0, slice(40, 48), 7, 129), (1, slice(40, 48), 60, 130))
    return (*mxfp4_extreme_scales(g, 200, rows, 118, 128, planted), torch.tensor([1, 0], dtype=torch.int32))


def _exact(x, data, scale, ids, bias):
    w = torch.from_numpy(dequantize_fp4_reference(data.numpy(), scale.numpy(), 32))[ids.long()]
    out = x.double() @ w.transpose(-1, -2)
    return out if bias is None else out + bias.double()[ids.long()][:, None, :]


@requires_hopper
@pytest.mark.parametrize("key, config", CANDIDATES, ids=[f"{k}-{_name(c, k)}" for k, c in CANDIDATES])
def test_each_candidate_against_the_spec_with_extreme_scales(key, config):
    """Every configuration the tuning may choose, at the most rows of its token tiles less three
    (a partial tile), with expert ids and a bias (bf16 for odd keys, float32 for even)."""
    rows = 8 * key - 3
    x, data, scale, ids = _operands(rows, 400 + key)
    bias = torch.randn(3, 200, generator=torch.Generator().manual_seed(key)).to(torch.bfloat16 if key % 2 else torch.float32)
    y = torch.empty(2, rows, 200, dtype=torch.bfloat16, device="cuda")
    assert fp4_decode.refusal(x.cuda(), data.cuda(), scale.cuda(), ids.cuda(), bias.cuda()) is None
    kernel_of(config).launch(config, x.cuda(), data.cuda(), scale.cuda(), ids.cuda(), bias.cuda(), y)
    assert_within_bf16_of(y.cpu(), _exact(x, data, scale, ids, bias))


@pytest.mark.skipif(not WARPGROUP,
                    reason="needs a Hopper GPU (compute capability 9.0: the warpgroup MMA; the device machine)")
@pytest.mark.parametrize("wg, stages, nt, blocks, per_sm",
                         [(1, 4, 1, 61, 2), (2, 8, 2, 61, 8), (1, 2, 3, 4, 1), (2, 4, 8, 61, 4), (1, 8, 8, 5, 1)],
                         ids=["n8-split", "n16-two-warpgroups-split", "n24-one-span", "n64-split", "n64-two-spans"])
@pytest.mark.parametrize("pipeline", list(fp4_wgmma.Pipeline), ids=[p.value for p in fp4_wgmma.Pipeline])
@pytest.mark.parametrize("sums", list(fp4_wgmma.Sums), ids=[s.value for s in fp4_wgmma.Sums])
def test_the_warpgroup_kernel_against_the_spec_split_and_not(wg, stages, nt, blocks, per_sm, pipeline, sums):
    """The warpgroup kernel at ``8 nt - 3`` rows (a partial token tile), K cut to ``blocks`` blocks
    (61: sixteen spans, the last of one block; 5: two spans, the second of one block: both split across
    CTAs at this N; 4: one span, not split), with expert ids and a bias, the MMAs fed a span or two
    chunks at a time (``Pipeline``), the splits' sums added through global memory or a cluster's
    shared memory (``Sums``); run twice, so that the split's arrival counts are seen back at zero,
    and the two results bitwise equal (a fixed order of sums)."""
    rows = 8 * nt - 3
    x, data, scale, ids = _operands(rows, 500 + nt)
    x, data, scale = x[..., :32 * blocks], data[..., :16 * blocks].contiguous(), scale[..., :blocks].contiguous()
    bias = torch.randn(3, 200, generator=torch.Generator().manual_seed(nt)).to(torch.bfloat16 if nt % 2 else torch.float32)
    config = fp4_wgmma.Config(wg, stages, per_sm, pipeline=pipeline, slots=2 if pipeline is fp4_wgmma.Pipeline.PAIRS else 4,
                              sums=sums)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    split, _ = fp4_wgmma.splits(config, 2 * -(-200 // config.rows), 32 * blocks, sms)
    assert (split > 1) == (blocks > 4)
    args = (x.cuda(), data.cuda(), scale.cuda(), ids.cuda(), bias.cuda())
    assert fp4_wgmma.refusal(*args) is None
    first = fp4_wgmma.launch(config, *args, torch.empty(2, rows, 200, dtype=torch.bfloat16, device="cuda"))
    again = fp4_wgmma.launch(config, *args, torch.empty(2, rows, 200, dtype=torch.bfloat16, device="cuda"))
    if blocks > 4:
        assert_within_bf16_of(first.cpu(), _exact(x, data, scale, ids, bias))
    else:  # block 4's NaN rows cut off
        exact = _exact(x, data, scale, ids, bias)
        tolerance = torch.finfo(torch.bfloat16).eps * exact.abs() + 2**-16 * exact.abs().amax(dim=1, keepdim=True)
        assert bool(((first.cpu().double() - exact).abs() <= tolerance).all())
    assert torch.equal(first.view(torch.int16), again.view(torch.int16))


@pytest.mark.skipif(not WARPGROUP,
                    reason="needs a Hopper GPU (compute capability 9.0: the warpgroup MMA; the device machine)")
@pytest.mark.parametrize("nt, per_sm", [(8, 4), (2, 8), (8, 1)], ids=["n64-split", "n16-split", "n64-one-split"])
def test_both_pipelines_give_the_same_bits(nt, per_sm):
    """``PAIRS`` issues the same MMAs in the same order into the same accumulators as ``SPAN``, and
    adds a split's sums in the same order from another layout: bitwise the same ``y``."""
    x, data, scale, ids = _operands(8 * nt - 1, 600 + nt)
    args = (x.cuda(), data.cuda(), scale.cuda(), ids.cuda(), None)
    out = [fp4_wgmma.launch(fp4_wgmma.Config(1, 4, per_sm, pipeline=p, slots=3), *args,
                            torch.empty(2, 8 * nt - 1, 200, dtype=torch.bfloat16, device="cuda")) for p in fp4_wgmma.Pipeline]
    assert torch.equal(out[0].view(torch.int16), out[1].view(torch.int16))


@pytest.mark.skipif(not WARPGROUP,
                    reason="needs a Hopper GPU (compute capability 9.0: the warpgroup MMA; the device machine)")
@pytest.mark.parametrize("pipeline", list(fp4_wgmma.Pipeline))
@pytest.mark.parametrize("nt, blocks, split", [(8, 29, 8), (2, 13, 4), (8, 5, 2)],
                         ids=["n64-eight-splits", "n16-four-splits", "n64-two-splits"])
def test_splits_summed_in_a_cluster_give_the_global_sums_bits(pipeline, nt, blocks, split):
    """The cluster's CTA 0 adds the splits' sums from their shared memory in the order the global
    path adds them from L2: bitwise the same ``y`` (K cut to ``blocks`` blocks: as many splits both
    ways, the last span partial), the cluster as many CTAs as the splits."""
    x, data, scale, ids = _operands(8 * nt - 1, 640 + nt)
    x, data, scale = x[..., :32 * blocks], data[..., :16 * blocks].contiguous(), scale[..., :blocks].contiguous()
    args = (x.cuda(), data.cuda(), scale.cuda(), ids.cuda(), None)
    configs = [fp4_wgmma.Config(1, 4, 8, pipeline=pipeline, slots=3, sums=s) for s in fp4_wgmma.Sums]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert [fp4_wgmma.splits(c, 2 * 4, 32 * blocks, sms)[0] for c in configs] == [split, split]
    out = [fp4_wgmma.launch(c, *args, torch.empty(2, 8 * nt - 1, 200, dtype=torch.bfloat16, device="cuda"))
           for c in configs]
    assert_within_bf16_of(out[1].cpu(), _exact(x, data, scale, ids, None))
    assert torch.equal(out[0].view(torch.int16), out[1].view(torch.int16))


@pytest.mark.skipif(not WARPGROUP,
                    reason="needs a Hopper GPU (compute capability 9.0: the warpgroup MMA; the device machine)")
@pytest.mark.parametrize("pipeline", list(fp4_wgmma.Pipeline))
@pytest.mark.parametrize("nt, per_sm", [(2, 8), (8, 1)], ids=["n16-split", "n64-sixteen-spans"])
def test_spans_copied_in_groups_give_the_same_bits(pipeline, nt, per_sm):
    """A ring of stages of three spans each (copied together; the last group of a split short)
    hands the decoder the same bytes as one span a stage: bitwise the same ``y``."""
    x, data, scale, ids = _operands(8 * nt - 1, 620 + nt)
    args = (x.cuda(), data.cuda(), scale.cuda(), ids.cuda(), None)
    out = [fp4_wgmma.launch(fp4_wgmma.Config(1, 3, per_sm, pipeline=pipeline, slots=3, group=group), *args,
                            torch.empty(2, 8 * nt - 1, 200, dtype=torch.bfloat16, device="cuda")) for group in (1, 3)]
    assert torch.equal(out[0].view(torch.int16), out[1].view(torch.int16))


@pytest.mark.skipif(not WARPGROUP,
                    reason="needs a Hopper GPU (compute capability 9.0: the warpgroup MMA; the device machine)")
def test_pairs_with_two_slots_of_x_fits_four_ctas_an_sm_where_span_fits_two():
    """By the driver's count at 64 tokens: ``SPAN`` (192 registers, 80 KB of shared memory) two CTAs
    an SM; ``PAIRS`` cut to 128 registers with ``x`` in two slots (48 KB), four."""
    span = fp4_wgmma.Config(1, 4)
    pairs = fp4_wgmma.Config(1, 4, min_blocks=4, pipeline=fp4_wgmma.Pipeline.PAIRS, slots=2)
    resident = [fp4_wgmma.kernel(c, 8, 0, False, 0).resident(c.threads, fp4_wgmma.shared_bytes(c, 8)) for c in (span, pairs)]
    assert resident == [2, 4]


@requires_hopper
@pytest.mark.parametrize("config, nt, blocks", [
    (fp4_decode.Config(1, 4, 1, k_spans=4), 2, 61),  # four splits, the last of one span of one block
    (fp4_decode.Config(2, 2, 2, 1, True, k_spans=8), 8, 61),  # two splits, warps along K in each
    (fp4_decode.Config(1, 2, 4, k_spans=16), 1, 61),  # one split: K's sixteen spans in one CTA
    (fp4_decode.Config(2, 8, 1, k_spans=1), 4, 5),  # two splits, the second of one block; rows past N
    (fp4_decode.Config(1, 2, 2, stages=4, k_spans=4), 2, 61),  # the ring, split
    (fp4_decode.Config(1, 4, 1, 1, True, x_early=True, k_spans=3), 2, 61),  # x loaded with the weight
    (fp4_decode.Config(2, 1, 4, 1, True, acc_sets=2), 2, 61),  # two sets of accumulators, no split
    (fp4_decode.Config(1, 2, 2, stages=4, acc_sets=2, k_spans=4), 4, 61),
], ids=["n16-four-splits", "n64-two-splits", "n8-one-split", "n32-short-k", "n16-ring", "n16-x-early", "n16-two-sets",
        "n32-ring-two-sets"])
@pytest.mark.parametrize("packing", list(Packing), ids=[p.value for p in Packing])
def test_k_split_across_ctas_against_the_spec_and_bitwise_the_same_twice(config, nt, blocks, packing):
    """``K`` split across CTAs (``k_spans``), or one split, on each way of keeping loads in flight,
    at ``8 nt - 3`` rows (a partial token tile) with expert ids and a bias: against the
    float64 product of the spec's NumPy dequantization; run twice, so that the splits' arrival counts
    are seen back at zero, and the two results bitwise equal (the splits added in a fixed order)."""
    rows = 8 * nt - 3
    x, data, scale, ids = _operands(rows, 600 + nt)
    x, data, scale = x[..., :32 * blocks], data[..., :16 * blocks].contiguous(), scale[..., :blocks].contiguous()
    bias = torch.randn(3, 200, generator=torch.Generator().manual_seed(nt)).to(torch.bfloat16 if nt % 2 else torch.float32)
    laid = repack(data, packing, Packing.SPEC)
    ys = []
    for _ in range(2):
        y = torch.empty(2, rows, 200, dtype=torch.bfloat16, device="cuda")
        fp4_decode.launch(config, x.cuda(), laid.cuda(), scale.cuda(), ids.cuda(), bias.cuda(), y, packing)
        ys.append(y.cpu())
    assert_within_bf16_of(ys[0], _exact(x, data, scale, ids, bias))
    assert torch.equal(ys[0].view(torch.int16), ys[1].view(torch.int16))  # bits: the operands make NaNs


@requires_hopper
def test_one_token_without_ids_or_bias_matches_and_writes_only_its_row():
    x, data, scale, _ = _operands(1, 7)
    y = torch.full((1, 1, 200), 7.0, dtype=torch.bfloat16, device="cuda")
    config = fp4_matmul.DECODE[1][0].decode
    fp4_decode.launch(config, x[:1].cuda(), data[:1].cuda(), scale[:1].cuda(), None, None, y)
    assert_within_bf16_of(y.cpu(), _exact(x[:1], data[:1], scale[:1], torch.tensor([0]), None))


@requires_hopper
def test_the_product_times_the_decode_kernel_and_falls_back_for_what_it_refuses():
    """``mxfp4_linear`` at 4 tokens: the tuning timed the decode kernel's candidates beside the
    Triton kernel's (each timed or left out with why); an operand the kernel refuses (``x`` a view
    off 16-byte alignment) still gets the right result, from the Triton kernel."""
    from xlabridge import mx

    g = torch.Generator().manual_seed(9)
    weight = mx.to_mxfp4(torch.randn(1024, 2048, generator=g).cuda())
    x = torch.randn(4, 2048, generator=g).bfloat16().cuda()
    exact = x.double() @ weight.dequantize(torch.float32).double().t()
    bound = torch.finfo(torch.bfloat16).eps * exact.abs() + 2**-16 * exact.abs().amax()
    assert bool(((mx.mxfp4_linear(x, weight).double() - exact).abs() <= bound).all())
    key = next(k for k in fp4_matmul.TUNING if k[1:3] == (1024, 2048) and k[8] == 1)
    decode_rows = [row for row in fp4_matmul.TUNING[key] if row["mode"] == "cuda"]
    assert len(decode_rows) == len(fp4_matmul.DECODE[1]) and all("ms" in row for row in decode_rows), decode_rows
    shifted = torch.empty(4 * 2048 + 1, dtype=torch.bfloat16, device="cuda")[1:].view(4, 2048)
    shifted.copy_(x)
    assert fp4_decode.refusal(shifted[None], weight.data[None], weight.scale[None], None, None) is not None
    assert bool(((mx.mxfp4_linear(shifted, weight).double() - exact).abs() <= bound).all())


@requires_hopper
def test_under_a_cuda_graph_the_launch_is_captured_and_replayed():
    x, data, scale, ids = _operands(5, 11)
    x, data, scale, ids = x.cuda(), data.cuda(), scale.cuda(), ids.cuda()
    config = fp4_matmul.DECODE[1][0].decode
    y = torch.zeros(2, 5, 200, dtype=torch.bfloat16, device="cuda")
    fp4_decode.launch(config, x, data, scale, ids, None, y)  # loaded before the capture
    graph = torch.cuda.CUDAGraph()
    y.zero_()
    with torch.cuda.graph(graph):
        fp4_decode.launch(config, x, data, scale, ids, None, y)
    assert bool((y == 0).all())  # captured, not run
    graph.replay()
    torch.cuda.synchronize()
    assert_within_bf16_of(y.cpu(), _exact(x.cpu(), data.cpu(), scale.cpu(), ids.cpu(), None))


@requires_hopper
@pytest.mark.parametrize("key, config", [(1, fp4_matmul.DECODE[1][0].decode), (8, fp4_wgmma.Config(1, 4, 8)),
                                         (2, fp4_wgmma.Config(1, 4, 2))], ids=["decode", "warpgroup-split", "warpgroup-n16"])
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_a_dependent_launch_reads_what_the_kernel_just_before_wrote(key, config, graph):
    """Launched to overlap the previous kernel, a kernel must still see that kernel's writes: each of
    six launches in a row takes x, the weight's bytes and scales, and the expert ids just copied into
    the same buffers (different each time) by the kernels right before it, and writes a y whose memory
    a kernel before it wrote; every result is bitwise the plain launch's, and within the spec's bound."""
    if isinstance(config, fp4_wgmma.Config) and not WARPGROUP:
        pytest.skip("the warpgroup MMA is Hopper's (compute capability 9.0)")
    rows = 8 * key - 3
    cases = [_operands(rows, 600 + i) for i in range(6)]
    for i, case in enumerate(cases):  # a different expert order each time, so ids matter
        case[3][:] = torch.tensor([i % 2, (i + 1) % 2], dtype=torch.int32)
    gpu = [tuple(t.cuda() for t in case) for case in cases]
    buffers = [torch.empty_like(t) for t in gpu[0]]
    ys = [torch.full((2, rows, 200), 3.0, dtype=torch.bfloat16, device="cuda") for _ in cases]

    def run(dependent):
        for operands, y in zip(gpu, ys):
            for buffer, source in zip(buffers, operands):
                buffer.copy_(source)
            y.fill_(-1.0)
            kernel_of(config).launch_loaded(kernel_of(config).kernel(config, fp4_decode.token_tiles(rows), 0, True, 0),
                                            config, *buffers, None, y, dependent)
        return [y.clone() for y in ys]

    plain = run(False)
    if graph:
        run(True)  # loaded before the capture
        captured = torch.cuda.CUDAGraph()
        for y in ys:
            y.zero_()
        with torch.cuda.graph(captured):
            run(True)
        captured.replay()
        torch.cuda.synchronize()
        dependent = [y.clone() for y in ys]
    else:
        dependent = run(True)
    for i, ((x, data, scale, ids), want, got) in enumerate(zip(cases, plain, dependent)):
        assert_within_bf16_of(want.cpu(), _exact(x, data, scale, ids, None))
        assert torch.equal(want.view(torch.int16), got.view(torch.int16)), (
            i, int((want != got).sum()), float((want.float() - got.float()).abs().nan_to_num().max()))


@pytest.mark.parametrize("device", _ON)
@pytest.mark.parametrize("tokens", [3, 64])
def test_paired_x_puts_each_element_where_the_kernel_s_loads_take_it(device, tokens):
    """``paired_x`` (PyTorch's off a GPU, ``x_order.cu`` on one) against the layout worked out element
    by element: K (200) padded to two spans with zeros; element ``128 s + 32 t + 8 q + e`` of a row
    lands at ``128 s + 32 q + 8 t + p``, where ``p`` is the MMA's pair order ``e`` = 0, 4, 1, 5, 2, 6, 3, 7."""
    x = torch.randn(2, tokens, 200).bfloat16()
    got = fp4_decode.paired_x(x.to(device)).cpu()
    assert got.shape == (2, tokens, 256)
    expected = torch.zeros(2, tokens, 256, dtype=torch.bfloat16)
    order = (0, 4, 1, 5, 2, 6, 3, 7)
    for k in range(200):
        s, t, q, e = k // 128, k % 128 // 32, k % 32 // 8, k % 8
        expected[:, :, 128 * s + 32 * q + 8 * t + order.index(e)] = x[:, :, k]
    assert torch.equal(got, expected)


def test_x_order_says_when_x_has_more_rows_than_its_token_tiles():
    with pytest.raises(ValueError, match=r"x_order.order: x has 9 rows, more than nt=1 tiles of 8"):
        x_order.order(torch.zeros(1, 9, 32, dtype=torch.bfloat16), x_order.Layout.WGMMA, 1)


def test_the_launch_attributes_are_laid_out_as_the_driver_reads_them():
    """``CUlaunchAttribute`` and ``CUlaunchConfig`` as cuda.h lays them out on x86-64: the id, 4 bytes
    of padding, a 64-byte value (the dependent launch's int 1; a cluster's dimensions, three uints);
    seven uints, the stream at 32, the attributes at 40, their count at 48, 56 bytes in all."""
    import ctypes
    import struct

    assert bytes(_runtime._attribute(6, 1)) == struct.pack("<III", 6, 0, 1) + bytes(60)
    assert bytes(_runtime._attribute(4, 1, 1, 4)) == struct.pack("<IIIII", 4, 0, 1, 1, 4) + bytes(52)
    assert ctypes.sizeof(_runtime._LaunchConfig) == 56
    assert (_runtime._LaunchConfig.stream.offset, _runtime._LaunchConfig.attributes.offset,
            _runtime._LaunchConfig.count.offset) == (32, 40, 48)


# ---------------------------------------------------------------- a Packing.DECODE weight

PACKED = Packing.DECODE


def test_a_packed_weight_s_kernel_refuses_x_paired_and_odd_alignments():
    """A ``Packing.DECODE`` weight's kernel reads ``x`` in ``x_paired``'s order as it lies in memory:
    the host order is refused for it, as is a scale alignment other than 4, 2 or 1 bytes, or one for
    the spec layout (whose kernels read one scale byte a thread)."""
    paired = fp4_decode.Config(1, 1, 4, 1, True, x_paired=True)
    with pytest.raises(ValueError, match="x_paired is for the spec layout"):
        fp4_decode.binary(paired, 2, 0, False, (9, 0), cached=False, packing=PACKED)
    with pytest.raises(ValueError, match="align must be 4, 2 or 1"):
        fp4_decode.binary(fp4_decode.Config(), 2, 0, False, (9, 0), cached=False, packing=PACKED, align=3)
    with pytest.raises(ValueError, match="align must be 4, 2 or 1 \\(1 for the spec layout\\)"):
        fp4_wgmma.binary(fp4_wgmma.Config(), 2, 0, False, cached=False, align=4)


@pytest.mark.parametrize("shape, stride, offset, align", [
    ((3, 200, 61), None, 0, 1), ((1, 320, 90), None, 0, 2), ((2, 64, 32), None, 0, 4),
    ((2, 64, 32), None, 2, 2), ((2, 64, 32), None, 1, 1)])
def test_scale_alignment_is_where_every_span_s_scale_bytes_start(shape, stride, offset, align):
    """A span's four scale bytes start ``4 s`` into a row: aligned to what the pointer, the rows'
    stride and the experts' stride all are."""
    scale = torch.zeros(shape[0] * shape[1] * shape[2] + offset, dtype=torch.uint8)[offset:].view(shape)
    assert fp4_decode.scale_alignment(scale) == align
    assert fp4_decode.scale_alignment(scale, Packing.SPEC) == 1


@pytest.mark.parametrize("build", ["decode", "warpgroup"])
def test_the_packed_decoder_compiles_and_differs_from_the_spec_one(build):
    """``PACKING=1`` is its own binary (its own name, other code than the spec layout's) for both
    kernels, valid CUDA for Hopper."""
    _nvrtc_or_skip()
    if build == "decode":
        config = fp4_decode.Config(1, 1, 8, 1)
        binary = fp4_decode.binary(config, 2, 0, False, (9, 0), cached=False, packing=PACKED)
        spec = fp4_decode.binary(config, 2, 0, False, (9, 0), cached=False)
        name = fp4_decode._name(config, 2, 0, False, PACKED)
    else:
        config = fp4_wgmma.Config(1, pipeline=fp4_wgmma.Pipeline.PAIRS, slots=3)
        binary = fp4_wgmma.binary(config, 4, 0, False, cached=False, packing=PACKED)
        spec = fp4_wgmma.binary(config, 4, 0, False, cached=False)
        name = fp4_wgmma._name(config, 4, 0, False, packing=PACKED)
    assert binary[:4] == b"\x7fELF" and name.encode() in binary and "packed" in name
    assert name.encode() not in spec and len(binary) != len(spec)


PACKED_CANDIDATES = list(dict.fromkeys(
    (key, fp4_matmul._without_x_order(config).decode) for key, configs in fp4_matmul.DECODE.items() for config in configs))


@requires_hopper
@pytest.mark.parametrize("key, config", PACKED_CANDIDATES, ids=[f"{k}-{_name(c, k)}" for k, c in PACKED_CANDIDATES])
def test_each_packed_candidate_against_the_spec_with_extreme_scales(key, config):
    """Every configuration the tuning may choose for a ``Packing.DECODE`` weight, on the spec test's
    operands repacked (61 blocks: scale rows 1-byte aligned, a last span of one block): against the
    float64 product of the spec layout's NumPy dequantization."""
    rows = 8 * key - 3
    x, data, scale, ids = _operands(rows, 400 + key)
    bias = torch.randn(3, 200, generator=torch.Generator().manual_seed(key)).to(torch.bfloat16 if key % 2 else torch.float32)
    packed = repack(data, PACKED, Packing.SPEC)
    assert not torch.equal(packed, data)
    y = torch.empty(2, rows, 200, dtype=torch.bfloat16, device="cuda")
    kernel_of(config).launch(config, x.cuda(), packed.cuda(), scale.cuda(), ids.cuda(), bias.cuda(), y, PACKED)
    assert_within_bf16_of(y.cpu(), _exact(x, data, scale, ids, bias))


@requires_hopper
@pytest.mark.parametrize("k, align", [(1216, 2), (1024, 4)], ids=["k1216-align2", "k1024-align4"])
@pytest.mark.parametrize("key, config", PACKED_CANDIDATES, ids=[f"{k}-{_name(c, k)}" for k, c in PACKED_CANDIDATES])
def test_each_packed_candidate_with_its_scale_words_aligned(key, config, k, align):
    """Every packed candidate where a span's four scale bytes are read as two 16-bit loads (38 blocks
    a row: 2-byte aligned rows, a last span of two blocks) or one 32-bit load (whole spans alone),
    scale bytes from 112 to 140 (some past the one-multiplication decode), against the float64
    product of the spec layout's NumPy dequantization."""
    if isinstance(config, fp4_wgmma.Config) and not WARPGROUP:
        pytest.skip("the warpgroup MMA is Hopper's (compute capability 9.0)")
    g = torch.Generator().manual_seed(key * k)
    rows, n = 8 * key - 1, 96
    data = torch.randint(0, 256, (2, n, k // 2), dtype=torch.uint8, generator=g)
    scale = torch.randint(112, 141, (2, n, k // 32), dtype=torch.uint8, generator=g)
    x = torch.randn(2, rows, k, generator=g).bfloat16()
    ids = torch.tensor([1, 0], dtype=torch.int32)
    assert fp4_decode.scale_alignment(scale.cuda()) == align
    y = torch.empty(2, rows, n, dtype=torch.bfloat16, device="cuda")
    kernel_of(config).launch(config, x.cuda(), repack(data, PACKED, Packing.SPEC).cuda(), scale.cuda(), ids.cuda(),
                             None, y, PACKED)
    exact = _exact(x, data, scale, ids, None)
    tolerance = torch.finfo(torch.bfloat16).eps * exact.abs() + 2**-16 * exact.abs().amax(dim=1, keepdim=True)
    assert bool(((y.cpu().double() - exact).abs() <= tolerance).all())


@pytest.mark.skipif(not WARPGROUP,
                    reason="needs a Hopper GPU (compute capability 9.0: the warpgroup MMA; the device machine)")
@pytest.mark.parametrize("pipeline", list(fp4_wgmma.Pipeline), ids=[p.value for p in fp4_wgmma.Pipeline])
@pytest.mark.parametrize("nt, per_sm", [(2, 8), (8, 4), (8, 1)], ids=["n16-split", "n64-split", "n64-one-split"])
def test_the_warpgroup_kernel_reads_a_packed_weight(pipeline, nt, per_sm):
    """The warpgroup kernel on a ``Packing.DECODE`` weight, ``x`` in that layout's MMA order, both
    pipelines, split across CTAs and not, against the float64 product of the spec layout's NumPy
    dequantization."""
    rows = 8 * nt - 3
    x, data, scale, ids = _operands(rows, 700 + nt)
    config = fp4_wgmma.Config(1, 4, per_sm, pipeline=pipeline, slots=3 if pipeline is fp4_wgmma.Pipeline.PAIRS else 4)
    y = torch.empty(2, rows, 200, dtype=torch.bfloat16, device="cuda")
    fp4_wgmma.launch(config, x.cuda(), repack(data, PACKED, Packing.SPEC).cuda(), scale.cuda(), ids.cuda(), None, y,
                     PACKED)
    assert_within_bf16_of(y.cpu(), _exact(x, data, scale, ids, None))


@requires_hopper
@pytest.mark.parametrize("tokens", [3, 16, 40, 100])
def test_the_product_of_a_packed_weight_tunes_its_own_candidates_and_repacks_past_them(tokens):
    """``fp4_matmul.matmul`` with a ``Packing.DECODE`` weight: up to 64 tokens the tuning times the
    packed candidates (and the dequantizing path, which repacks) under a key of its own; past 64 the
    Triton kernel takes the weight repacked to the spec's layout. Every result within the bound of
    the float64 product."""
    g = torch.Generator().manual_seed(tokens)
    data = torch.randint(0, 256, (1, 320, 512), dtype=torch.uint8, generator=g)
    scale = torch.randint(118, 128, (1, 320, 32), dtype=torch.uint8, generator=g)
    x = torch.randn(1, tokens, 1024, generator=g).bfloat16()
    y = fp4_matmul.matmul(x.cuda(), repack(data, PACKED, Packing.SPEC).cuda(), scale.cuda(), None, None, PACKED)
    exact = _exact(x, data, scale, torch.tensor([0]), None)
    tolerance = torch.finfo(torch.bfloat16).eps * exact.abs() + 2**-16 * exact.abs().amax()
    assert bool(((y.cpu().double() - exact).abs() <= tolerance).all())
    keys = [k for k in fp4_matmul.TUNING if k[1:3] == (320, 1024) and k[-1] == "decode" and k[0] == fp4_matmul.row_tile(tokens)]
    if tokens <= fp4_decode.MAX_ROWS:
        (key,) = [k for k in keys if k[8] == fp4_matmul.decode_tiles(tokens)]
        modes = [row["mode"] for row in fp4_matmul.TUNING[key]]
        assert set(modes) == {"cuda", "dequantize"} and modes.count("cuda") == len(
            fp4_matmul.DECODE[fp4_matmul.decode_tiles(tokens)])
