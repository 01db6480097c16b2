"""``Packing.DECODE`` on CPU and the XLA device: what the CUDA decode kernels make of a ``DECODE``
word (emulated here in NumPy from their operations, not from ``_fp4_packing``) against the NumPy
model of the spec (``tests/mx/_reference.py``), and every public path giving a ``DECODE`` weight
exactly its ``SPEC`` twin's results.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from tests.conftest import requires_xla
from tests.mx._reference import dequantize_fp4_reference, e2m1_values, unpack_nibbles
from xlabridge import mx

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def random_bytes(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def every_byte_at_every_place(rows: int = 64, seed: int = 300, width: int = 80) -> torch.Tensor:
    """``[256 + rows, width]`` bytes (80: a whole span of 128 elements, then one 32-element block
    of a span K ends inside): each of the 256 values at every byte of every 32-bit word (row ``v`` is
    ``v`` throughout), then random rows that mix them within words and across words."""
    exhaustive = torch.arange(256, dtype=torch.uint8)[:, None].expand(256, width)
    return torch.cat([exhaustive, random_bytes((rows, width), seed)])


def random_weight(shape: tuple[int, ...], seed: int, nan_block: bool = True) -> mx.MXFP4Tensor:
    """Random data bytes (``SPEC``) and scales over a range that keeps float16 finite, with the
    extreme bytes 0xFF (the first block, where ``nan_block``), 0 and 1 among them."""
    *lead, k = shape
    data = random_bytes((*lead, k // 2), seed)
    scale = torch.randint(118, 136, (*lead, k // 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed + 1))
    flat = scale.view(-1)
    flat[:3] = torch.tensor([0xFF if nan_block else 127, 0, 1], dtype=torch.uint8)
    return mx.MXFP4Tensor(data, scale, 32, torch.float32)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(BITS[t.dtype])


# ------------------------------------------------------------------ the kernels' decode of a DECODE word


def _rotr(w: np.ndarray, r: int) -> np.ndarray:
    return ((w >> r) | (w << (32 - r))) & 0xFFFFFFFF


def kernel_decode(data: np.ndarray) -> np.ndarray:
    """What the CUDA decode kernels compute from ``DECODE`` bytes ``[..., K/2]``, before the scale:
    the float64 values ``[..., K]`` (each a bfloat16 of the element times 2**-126, times 2**126).

    Which elements a word holds: in a whole span of 128 elements (64 bytes), thread ``t`` of a quad
    loads the 16 bytes at ``16 t`` and multiplies its word ``q`` (bytes ``16 t + 4 q ..``) with
    ``x``'s elements ``32 q + 8 t .. 32 q + 8 t + 7``; in the span K ends inside, thread ``t`` loads
    block ``t`` and its word ``q`` goes with elements ``32 t + 8 q ..``, as in memory order.

    What a little-endian 32-bit word ``w`` decodes to: pair ``k`` (0 .. 3) is
    ``rotr(w, 0/3/6) & 0x81C081C0`` for ``k < 3``, and ``((w & 0x001B001B) * 0x4108 mod 2**32) &
    0x81C081C0`` for ``k = 3``; its low 16 bits are the bfloat16 of the word's element ``2k``, its
    high 16 bits element ``2k + 1``."""
    b = data.astype(np.uint64).reshape(*data.shape[:-1], -1, 4)
    whole = data.shape[-1] // 64
    spans = b[..., :16 * whole, :].reshape(*data.shape[:-1], whole, 4, 4, 4)  # [span, t, q, byte]
    b = np.concatenate([spans.swapaxes(-3, -2).reshape(*data.shape[:-1], 16 * whole, 4), b[..., 16 * whole:, :]], axis=-2)
    w = b[..., 0] | b[..., 1] << 8 | b[..., 2] << 16 | b[..., 3] << 24  # in the elements' order
    mask = 0x81C081C0
    pairs = [_rotr(w, 0) & mask, _rotr(w, 3) & mask, _rotr(w, 6) & mask,
             (((w & 0x001B001B) * 0x4108) & 0xFFFFFFFF) & mask]
    halves = []
    for pair in pairs:
        halves += [pair & 0xFFFF, pair >> 16]  # elements 2k, 2k + 1
    bf16 = np.stack(halves, axis=-1).astype(np.uint32)  # [..., words, 8]
    values = (bf16 << 16).view(np.float32).astype(np.float64) * 2.0**126
    return values.reshape(*data.shape[:-1], 2 * data.shape[-1])


def assert_same_values(got: np.ndarray, expected: np.ndarray) -> None:
    same = (got == expected) & (np.signbit(got) == np.signbit(expected))
    assert same.all(), f"{(~same).sum()} values differ, first at {np.argwhere(~same)[0]}"


def test_the_kernels_decode_of_decode_words_is_the_spec_s_elements():
    spec = every_byte_at_every_place()
    for place in range(4):  # every byte value at every byte of a word
        assert set(spec[:, place::4].flatten().tolist()) == set(range(256))
    w = mx.MXFP4Tensor(spec, torch.zeros(spec.shape[0], 1, dtype=torch.uint8)).repack("decode")
    assert w.packing is mx.Packing.DECODE and w.data.shape == spec.shape and w.data.dtype == torch.uint8
    assert not torch.equal(w.data, spec)  # a real permutation
    expected = e2m1_values(unpack_nibbles(spec.numpy())).astype(np.float64)  # element 2i: low nibble of byte i
    assert_same_values(kernel_decode(w.data.numpy()), expected)


def test_the_emulation_does_not_decode_spec_bytes():
    """The emulation is not the identity on spec bytes (so the test above can fail)."""
    spec = every_byte_at_every_place()
    expected = e2m1_values(unpack_nibbles(spec.numpy())).astype(np.float64)
    assert not ((kernel_decode(spec.numpy()) == expected) & (np.signbit(kernel_decode(spec.numpy())) == np.signbit(expected))).all()


def test_the_emulation_needs_each_span_s_words_where_the_kernels_read_them():
    """With the words of the whole span put back in memory order (the bits still permuted), the
    emulation decodes the random rows' span wrong and their last block (a span K ends inside) right:
    the test above checks where words go, not only their bits."""
    spec = every_byte_at_every_place()
    words = mx.MXFP4Tensor(spec, torch.zeros(spec.shape[0], 1, dtype=torch.uint8)).repack("decode").data.numpy()
    untransposed = words.copy()
    untransposed[:, :64] = words[:, :64].reshape(-1, 4, 4, 4).swapaxes(1, 2).reshape(-1, 64)
    got, expected = kernel_decode(untransposed), e2m1_values(unpack_nibbles(spec.numpy())).astype(np.float64)
    assert_same_values(got[:, 128:], expected[:, 128:])
    assert not (got[256:, :128] == expected[256:, :128]).all()


# ------------------------------------------------------------------ MXFP4Tensor


@pytest.mark.parametrize("shape", [(4, 64), (2, 3, 96), (256,), (2, 320)])
def test_round_trip_is_bit_exact(shape):
    w = random_weight(shape, seed=310)
    decode = w.repack("decode")
    assert decode.scale is w.scale and decode.block_size == 32 and decode.orig_dtype == torch.float32
    assert decode.shape == w.shape and decode.data.shape == w.data.shape
    back = decode.repack(mx.Packing.SPEC)
    assert back.packing is mx.Packing.SPEC and torch.equal(back.data, w.data)
    assert w.repack("spec") is w and decode.repack("decode") is decode


def test_packing_is_normalised_and_defaults_to_spec():
    data, scale = torch.zeros(2, 16, dtype=torch.uint8), torch.zeros(2, 1, dtype=torch.uint8)
    assert mx.MXFP4Tensor(data, scale).packing is mx.Packing.SPEC
    assert mx.MXFP4Tensor(data, scale, 32, torch.bfloat16, "decode").packing is mx.Packing.DECODE
    assert mx.MXFP4Tensor(data, scale, packing=mx.Packing.DECODE).packing is mx.Packing.DECODE
    assert mx.to_mxfp4(torch.randn(2, 32)).packing is mx.Packing.SPEC
    assert mx.MXFP4Tensor.from_checkpoint(data.reshape(2, 1, 16), scale).packing is mx.Packing.SPEC


@pytest.mark.parametrize("dtype", DTYPES)
def test_dequantize_of_decode_is_spec_s_bit_for_bit(dtype):
    w = random_weight((8, 128), seed=320)
    decode = w.repack("decode")
    got = mx.from_mxfp4(decode, dtype)
    assert torch.equal(bits(got), bits(mx.from_mxfp4(w, dtype)))
    assert torch.equal(bits(decode.dequantize(dtype)), bits(got))
    assert got[0, :32].isnan().all()  # the 0xFF block
    expected = dequantize_fp4_reference(w.data.numpy(), w.scale.numpy(), 32)
    finite = ~np.isnan(expected)
    assert_same_values(got.double().numpy()[finite], torch.from_numpy(expected).to(dtype).double().numpy()[finite])


def test_to_checkpoint_of_decode_is_the_checkpoint():
    g = torch.Generator().manual_seed(330)
    blocks = torch.randint(0, 256, (2, 4, 3, 16), dtype=torch.uint8, generator=g)
    scales = torch.randint(120, 130, (2, 4, 3), dtype=torch.uint8, generator=g)
    w = mx.MXFP4Tensor.from_checkpoint(blocks, scales).repack("decode")
    back_blocks, back_scales = w.to_checkpoint()
    assert torch.equal(back_blocks, blocks) and back_scales is scales
    assert torch.equal(blocks, torch.randint(0, 256, (2, 4, 3, 16), dtype=torch.uint8,
                                             generator=torch.Generator().manual_seed(330)))  # not repacked in place


# ------------------------------------------------------------------ the MXFP4 linear


def reference_weight(w: mx.MXFP4Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The weight from the NumPy model of the spec, ``w`` in ``SPEC``."""
    return torch.from_numpy(dequantize_fp4_reference(w.data.numpy(), w.scale.numpy(), 32)).to(dtype)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_linear_with_decode_equals_spec(bias, dtype):
    g = torch.Generator().manual_seed(340)
    w = random_weight((16, 128), seed=341, nan_block=False)
    b = torch.randn(16, generator=g) if bias else None
    x = torch.randn(3, 5, 128, generator=g).to(dtype)
    got = mx.mxfp4_linear(x, w.repack("decode"), b)
    assert torch.equal(got, mx.mxfp4_linear(x, w, b))
    expected = torch.nn.functional.linear(x, reference_weight(w, dtype), None if b is None else b.to(dtype))
    assert torch.equal(got, expected)


def test_expert_linear_with_decode_equals_spec():
    g = torch.Generator().manual_seed(350)
    w = random_weight((4, 16, 64), seed=351, nan_block=False)
    bias = torch.randn(4, 16, generator=g)
    x = torch.randn(3, 2, 64, generator=g).bfloat16()
    ids = torch.tensor([3, 0, 3])
    got = mx.mxfp4_expert_linear(x, w.repack("decode"), ids, bias)
    assert torch.equal(got, mx.mxfp4_expert_linear(x, w, ids, bias))
    ref = reference_weight(w, torch.bfloat16)
    for a, e in enumerate(ids.tolist()):
        assert torch.equal(got[a], torch.nn.functional.linear(x[a], ref[e], bias[e].bfloat16()))
    assert torch.equal(mx.mxfp4_expert_linear(x[:1].expand(4, 2, 64), w.repack("decode")),
                       mx.mxfp4_expert_linear(x[:1].expand(4, 2, 64), w))


def test_module_repack_keeps_results_and_leaves_its_source_alone():
    g = torch.Generator().manual_seed(360)
    linear = torch.nn.Linear(128, 24).bfloat16()
    layer = mx.MXFP4Linear.from_linear(linear)
    spec_data = layer.weight_data.clone()
    x = torch.randn(4, 128, generator=g).bfloat16()
    before = layer(x)
    assert layer.packing is mx.Packing.SPEC and "packing=spec" in repr(layer)
    assert layer.repack("decode") is layer
    assert layer.packing is mx.Packing.DECODE and layer.weight.packing is mx.Packing.DECODE
    assert "packing=decode" in repr(layer) and "in_features=128, out_features=24, bias=True" in repr(layer)
    assert torch.equal(layer.weight_data, mx.MXFP4Tensor(spec_data, layer.weight_scale).repack("decode").data)
    assert torch.equal(layer(x), before)
    expected = torch.nn.functional.linear(x, reference_weight(mx.MXFP4Tensor(spec_data, layer.weight_scale),
                                                              torch.bfloat16), linear.bias)
    assert torch.equal(layer(x), expected)
    assert layer.repack(mx.Packing.DECODE) is layer and layer.packing is mx.Packing.DECODE
    assert torch.equal(layer.repack("spec").weight_data, spec_data)

    # a layer built on a checkpoint's tensors repacks a copy, not the checkpoint
    blocks = spec_data.reshape(24, 4, 16).clone()
    kept = blocks.clone()
    on_checkpoint = mx.MXFP4Linear(mx.MXFP4Tensor.from_checkpoint(blocks, layer.weight_scale)).repack("decode")
    assert torch.equal(blocks, kept) and on_checkpoint.packing is mx.Packing.DECODE


def test_a_decode_layer_built_from_a_decode_tensor():
    w = random_weight((8, 64), seed=365, nan_block=False).repack("decode")
    layer = mx.MXFP4Linear(w)
    assert layer.packing is mx.Packing.DECODE and layer.weight_data is w.data
    x = torch.randn(2, 64).bfloat16()
    assert torch.equal(layer(x), mx.mxfp4_linear(x, w.repack("spec")))


# ------------------------------------------------------------------ state dicts


def _layers(seed: int) -> tuple[mx.MXFP4Linear, torch.Tensor]:
    torch.manual_seed(seed)
    return mx.MXFP4Linear.from_linear(torch.nn.Linear(64, 16).bfloat16()), torch.randn(3, 64).bfloat16()


def test_state_dict_round_trip_keeps_the_packing():
    layer, x = _layers(370)
    expected = layer(x)
    layer.repack("decode")
    state = layer.state_dict()
    assert state["_extra_state"] == {"packing": "decode"}
    assert torch.equal(state["weight_data"], layer.weight_data)  # saved as it is
    saved = io.BytesIO()
    torch.save(state, saved)
    saved.seek(0)
    loaded = torch.load(saved, weights_only=True)

    other, _ = _layers(371)  # a spec layer of other weights
    other.load_state_dict(loaded)
    assert other.packing is mx.Packing.DECODE and torch.equal(other(x), expected)

    model = torch.nn.Sequential(layer)
    nested = torch.nn.Sequential(_layers(372)[0])
    nested.load_state_dict(model.state_dict())
    assert model.state_dict()["0._extra_state"] == {"packing": "decode"}
    assert nested[0].packing is mx.Packing.DECODE and torch.equal(nested(x), expected)

    back = mx.MXFP4Linear.from_linear(torch.nn.Linear(64, 16).bfloat16()).repack("decode")
    back.load_state_dict(_layers(370)[0].state_dict())  # a spec state dict into a decode layer
    assert back.packing is mx.Packing.SPEC and torch.equal(back(x), expected)


@pytest.mark.parametrize("strict", [True, False])
def test_a_state_dict_without_the_packing_loads_as_spec(strict):
    """As saved before layers had a packing: the buffers, no extra state."""
    layer, x = _layers(380)
    expected = layer(x)
    old = {k: v for k, v in layer.state_dict().items() if k != "_extra_state"}
    assert set(old) == {"weight_data", "weight_scale", "bias"}

    target = mx.MXFP4Linear.from_linear(torch.nn.Linear(64, 16).bfloat16()).repack("decode")
    result = target.load_state_dict(old, strict=strict)
    assert not result.missing_keys and not result.unexpected_keys
    assert target.packing is mx.Packing.SPEC and torch.equal(target(x), expected)

    model = torch.nn.Sequential(torch.nn.Identity(), _layers(381)[0].repack("decode"))
    model.load_state_dict({f"1.{k}": v for k, v in old.items()}, strict=strict)
    assert model[1].packing is mx.Packing.SPEC and torch.equal(model(x), expected)


def test_strict_loading_still_reports_other_keys():
    layer, _ = _layers(385)
    state = layer.state_dict()
    del state["weight_scale"]
    state["stray"] = torch.zeros(1)
    with pytest.raises(RuntimeError, match=r"Missing key\(s\).*weight_scale.*\n.*Unexpected key\(s\).*stray"):
        layer.load_state_dict(state)


# ------------------------------------------------------------------ torch.compile and the custom op


def test_torch_compile_with_a_decode_weight_keeps_one_graph():
    w = random_weight((16, 64), seed=390, nan_block=False)
    decode = w.repack("decode")
    layer = mx.MXFP4Linear(w).repack("decode")

    def f(t):
        q = mx.to_mxfp4(t.float(), rounding="rceil").repack("decode")
        return (mx.mxfp4_linear(t, decode), layer(t), decode.dequantize(torch.bfloat16), q.data,
                q.to_checkpoint()[0])

    x = torch.randn(4, 64).bfloat16()
    explained = torch._dynamo.explain(f)(x)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    got = torch.compile(f, fullgraph=True)(x)
    expected = mx.mxfp4_linear(x, w)
    assert torch.equal(got[0], expected) and torch.equal(got[1], expected)
    assert torch.equal(bits(got[2]), bits(w.dequantize(torch.bfloat16)))
    q = mx.to_mxfp4(x.float(), rounding="rceil")
    assert torch.equal(got[3], q.repack("decode").data) and torch.equal(got[4], q.to_checkpoint()[0])


def test_the_custom_ops_pass_opcheck_with_either_packing():
    w = random_weight((2, 8, 64), seed=395, nan_block=False)
    x = torch.randn(2, 3, 64).bfloat16()
    for packing in ("spec", "decode"):
        weight = w.repack(packing)
        torch.library.opcheck(torch.ops.xlabridge.mxfp4_matmul.default,
                              (x, weight.data, weight.scale, None, None, 32, packing))
    for to, frm in (("decode", "spec"), ("spec", "decode")):
        torch.library.opcheck(torch.ops.xlabridge.mxfp4_repack.default, (w.repack(frm).data, to, frm))
    y = torch.ops.xlabridge.mxfp4_matmul(x, w.data, w.scale, None, None, 32)  # the default: spec
    assert torch.equal(y, torch.ops.xlabridge.mxfp4_matmul(x, w.repack("decode").data, w.scale, None, None, 32, "decode"))


# ------------------------------------------------------------------ arguments


def _odd() -> mx.MXFP4Tensor:
    """Rows of 6 bytes (block size 12): not a whole number of 32-bit words."""
    return mx.MXFP4Tensor(torch.zeros(2, 6, dtype=torch.uint8), torch.zeros(2, 1, dtype=torch.uint8), 12)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: mx.MXFP4Tensor(torch.zeros(2, 16, dtype=torch.uint8), torch.zeros(2, 1, dtype=torch.uint8), packing="SPEC"),
         ValueError, r"packing must be one of \('spec', 'decode'\).*got 'SPEC'"),
        (lambda: mx.MXFP4Tensor(torch.zeros(2, 16, dtype=torch.uint8), torch.zeros(2, 1, dtype=torch.uint8), packing=1),
         ValueError, "packing must be one of"),
        (lambda: mx.to_mxfp4(torch.zeros(2, 32)).repack("fast"), ValueError, "packing must be one of .*got 'fast'"),
        (lambda: mx.MXFP4Linear.from_linear(torch.nn.Linear(32, 8)).repack(None), ValueError, "packing must be one of"),
        (lambda: _odd().repack("decode"), ValueError, r"data's last dimension \(6 bytes\) must be a multiple of 4"),
        (lambda: mx.from_mxfp4(mx.MXFP4Tensor(_odd().data, _odd().scale, 12, packing="decode")),
         ValueError, r"data's last dimension \(6 bytes\) must be a multiple of 4"),
        (lambda: mx.MXFP4Tensor(_odd().data, _odd().scale, 12, packing="decode").to_checkpoint(),
         ValueError, r"data's last dimension \(6 bytes\)"),
        (lambda: mx.MXFP4Tensor(torch.zeros(2, 16), torch.zeros(2, 1, dtype=torch.uint8)).repack("decode"),
         TypeError, "data must be a uint8 tensor"),
        (lambda: mx.MXFP4Linear.from_linear(torch.nn.Linear(32, 8)).set_extra_state("decode"),
         ValueError, "extra state must be a dict with a 'packing' entry"),
        (lambda: mx.MXFP4Linear.from_linear(torch.nn.Linear(32, 8)).set_extra_state({"packing": "fast"}),
         ValueError, "the state dict's packing must be one of"),
    ],
)
def test_bad_arguments_are_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_odd_rows_still_work_in_spec():
    q = _odd()
    assert q.repack("spec") is q and mx.from_mxfp4(q).shape == (2, 12)


# ------------------------------------------------------------------ the XLA device


@requires_xla
def test_xla_repacks_every_byte_at_every_place(xla_device):
    """On XLA the repack makes words of the bytes itself (a dtype view crashes inside a custom op)."""
    spec = every_byte_at_every_place()
    decode = mx.MXFP4Tensor(spec.to(xla_device), torch.zeros(spec.shape[0], 1, dtype=torch.uint8).to(xla_device)).repack("decode")
    assert torch.equal(decode.data.cpu(), mx.MXFP4Tensor(spec, torch.zeros(spec.shape[0], 1, dtype=torch.uint8)).repack("decode").data)
    assert_same_values(kernel_decode(decode.data.cpu().numpy()), e2m1_values(unpack_nibbles(spec.numpy())).astype(np.float64))
    assert torch.equal(decode.repack("spec").data.cpu(), spec)


@requires_xla
def test_xla_decode_equals_spec(xla_device):
    g = torch.Generator().manual_seed(400)
    w = random_weight((4, 16, 64), seed=401, nan_block=False)
    x = torch.randn(3, 2, 64, generator=g).bfloat16()
    ids = torch.tensor([3, 0, 3])
    on_xla = mx.MXFP4Tensor(w.data.to(xla_device), w.scale.to(xla_device), 32, torch.float32)
    decode = on_xla.repack("decode")
    assert decode.data.device.type == "xla"
    assert torch.equal(decode.data.cpu(), w.repack("decode").data)
    assert torch.equal(decode.repack("spec").data.cpu(), w.data)

    expected = mx.mxfp4_expert_linear(x, w, ids)
    got = mx.mxfp4_expert_linear(x.to(xla_device), decode, ids.to(xla_device)).cpu()
    assert torch.equal(got, mx.mxfp4_expert_linear(x.to(xla_device), on_xla, ids.to(xla_device)).cpu())
    assert torch.equal(got, expected)
    assert torch.equal(bits(mx.from_mxfp4(decode, torch.bfloat16).cpu()), bits(mx.from_mxfp4(on_xla, torch.bfloat16).cpu()))

    layer = mx.MXFP4Linear(mx.MXFP4Tensor(w.data[1], w.scale[1])).to(xla_device).repack("decode")
    assert layer.weight_data.device.type == "xla" and layer.packing is mx.Packing.DECODE
    assert torch.equal(layer(x[1].to(xla_device)).cpu(), mx.mxfp4_linear(x[1], mx.MXFP4Tensor(w.data[1], w.scale[1])))


@requires_xla
def test_xla_torch_compile_openxla_with_a_decode_weight(xla_device):
    g = torch.Generator().manual_seed(410)
    w = random_weight((16, 64), seed=411, nan_block=False)
    x = torch.randn(4, 64, generator=g).bfloat16()
    on_xla = mx.MXFP4Tensor(w.data.to(xla_device), w.scale.to(xla_device))
    decode = on_xla.repack("decode")

    @torch.compile(backend="openxla", fullgraph=True)
    def f(t):
        return mx.mxfp4_linear(t, decode), decode.dequantize(torch.bfloat16)

    y, weight = f(x.to(xla_device))
    assert torch.equal(y.cpu(), mx.mxfp4_linear(x, w))
    # XLA on CPU flushes subnormals (scale bytes 0 and 1): compared with the XLA device's own SPEC
    assert torch.equal(bits(weight.cpu()), bits(on_xla.dequantize(torch.bfloat16).cpu()))
