"""How an MXFP4 tensor's E2M1 elements are laid out in its bytes (``Packing``), and the one
permutation between the two layouts (``repack``).

``Packing.SPEC`` is the OCP layout, gpt-oss checkpoints' too: element ``2i`` of a row in the low
nibble of byte ``i``, so a little-endian 32-bit word holds elements ``8q .. 8q+7``, element ``j`` at
bits ``4j .. 4j+3`` (bit ``4j+3`` the sign, then two exponent bits, then the mantissa bit).

``Packing.DECODE`` moves two things, each within a row's span of 128 elements (64 bytes, four
32-element blocks of four words), where the CUDA decode kernels (``_cuda/fp4_common.cuh`` built with
``PACKING=1``) read them:

- The words of a whole span: thread ``t`` of a quad of those kernels reads the span's 16 bytes at
  ``16 t`` and takes its word ``q`` with ``x``'s elements ``32 q + 8 t .. 32 q + 8 t + 7``, so that
  the quad's loads of ``x`` for word ``q`` are one 64-byte run of a token's row. ``DECODE`` therefore
  holds at word ``4 t + q`` of the span what ``SPEC`` holds at word ``4 q + t`` (a 4 x 4 transpose of
  words, its own inverse). A span ``K`` ends inside (``K % 128``, a row's last 16 to 48 bytes)
  keeps its words in place, as those kernels read it block by block.
- The bits of each word: to where the kernels turn the word into four bfloat16 pairs of
  consecutive elements, ``(e[8q+2k], e[8q+2k+1])`` for ``k = 0 .. 3``, in eight integer operations:
  pair ``k`` is ``extract(word)[k]``, each value times ``2**-126`` with its sign at bit 15 (31) and
  its exponent and mantissa bits at bits 6 .. 8 (22 .. 24), as the spec layout's decoder makes
  them in thirteen operations and pairs ``(e[j], e[j+4])``. Consecutive pairs are also ``x``'s own
  bfloat16 pairs, so the MMA takes ``x`` as it is in memory, with no byte permutes.

The bit permutation is defined by ``extract``'s constants alone (``decode_map`` derives which stored
bit lands where); the kernels spell the same operations out. The scales stay as they are: a
thread's four words belong to the span's four blocks, so it reads the span's four scale bytes.
"""

from __future__ import annotations

import enum
import functools

import torch

PAIR_MASK = 0x81C081C0
"""The bits of a bfloat16 pair that an E2M1 value times ``2**-126`` can set: the sign and the two
exponent bits above and the mantissa bit below bit 7, in each half."""
ROTATIONS = (0, 3, 6)
"""Pairs 0, 1, 2: the word rotated right by this many bits, then ``PAIR_MASK``."""
PAIR3_BITS = 0x001B001B
"""Pair 3: the word's bits at ``PAIR3_BITS`` times ``PAIR3_TIMES`` (three shifted copies that do not
overlap, so the product carries nothing), then ``PAIR_MASK``."""
PAIR3_TIMES = (1 << 3) | (1 << 8) | (1 << 14)


class Packing(str, enum.Enum):
    """The bit layout of an ``MXFP4Tensor``'s ``data``."""

    SPEC = "spec"
    """The OCP layout (element ``2i`` in the low nibble of byte ``i``), as checkpoints store it."""
    DECODE = "decode"
    """The words of each whole span of 128 elements transposed and each word's bits permuted, in the
    order the CUDA decode kernels (Hopper and newer) read with eight integer operations per eight
    elements and ``x`` in one 64-byte run per quad of threads; the same scales and row bytes as
    ``SPEC``."""


def _rotr(word: int, r: int) -> int:
    return ((word >> r) | (word << (32 - r))) & 0xFFFFFFFF if r else word


def extract(word: int) -> tuple[int, int, int, int]:
    """The four bfloat16 pairs a ``DECODE`` word decodes to before its scale (Python ints): the
    kernels' operations, one after another."""
    pairs = [_rotr(word, r) & PAIR_MASK for r in ROTATIONS]
    pairs.append(((word & PAIR3_BITS) * PAIR3_TIMES) & PAIR_MASK & 0xFFFFFFFF)
    return tuple(pairs)


@functools.cache
def decode_map() -> tuple[int, ...]:
    """For each element ``j`` (0 .. 7) of a word and each of its bits ``b`` (0: mantissa, 1 and 2:
    exponent, 3: sign), entry ``4j + b``: the bit of the ``DECODE`` word that holds it (what
    ``extract`` moves to that element's place in pair ``j // 2``)."""
    place = {}  # (pair, bit of the pair) -> stored bit
    for stored in range(32):
        lit = [(k, b) for k, pair in enumerate(extract(1 << stored)) for b in range(32) if pair >> b & 1]
        if len(lit) != 1:
            raise AssertionError(f"DECODE packing: stored bit {stored} lands at {lit}, not one place")
        place[lit[0]] = stored
    out = []
    for j in range(8):
        half = 16 * (j % 2)
        for b, target in enumerate((6, 7, 8, 15)):
            out.append(place[(j // 2, half + target)])
    if sorted(out) != list(range(32)):
        raise AssertionError("DECODE packing: not a permutation of the word's bits")
    return tuple(out)


def _moves(to: Packing) -> dict[int, int]:
    """Bit moves from the other layout into ``to``, grouped by rotation: {right rotation: mask of
    the source bits}."""
    moves: dict[int, int] = {}
    for spec_bit, decode_bit in enumerate(decode_map()):
        src, dst = (spec_bit, decode_bit) if to is Packing.DECODE else (decode_bit, spec_bit)
        r = (src - dst) % 32
        moves[r] = moves.get(r, 0) | (1 << src)
    return moves


def repack(data: torch.Tensor, to: Packing | str, frm: Packing | str) -> torch.Tensor:
    """``data`` (uint8 ``[..., K/2]``, ``K/2`` a multiple of 4) laid out as ``frm``, in ``to``'s
    layout: a new tensor on ``data``'s device (``data`` itself where the two are the same). The words
    are assembled from the bytes with shifts, not read through a dtype view, so that the same ops run
    on every device, XLA's lazy tensors inside a custom op included."""
    to, frm = Packing(to), Packing(frm)
    if to is frm:
        return data
    if data.dtype != torch.uint8 or data.shape[-1] % 4:
        raise ValueError(f"repack: data must be uint8 with a last dimension that is a multiple of 4 (whole "
                         f"32-bit words), got {data.dtype} {tuple(data.shape)}")
    moves = _moves(to)
    rows = data.reshape(-1, 4)  # a word a row
    if rows.shape[0] <= _CHUNK_WORDS:
        return transposed_spans(_repacked_words(rows, moves).reshape(data.shape))
    out = torch.empty_like(rows)
    for start in range(0, rows.shape[0], _CHUNK_WORDS):  # int64 words: bounded memory
        out[start:start + _CHUNK_WORDS] = _repacked_words(rows[start:start + _CHUNK_WORDS], moves)
    return transposed_spans(out.reshape(data.shape))


SPAN_BYTES = 64
"""A span of 128 elements: four blocks of 32, four 32-bit words each."""


def transposed_spans(data: torch.Tensor, span: int = SPAN_BYTES) -> torch.Tensor:
    """``data`` (``[..., L]``) with each whole ``span`` of its last dimension seen as 4 x 4 groups
    and transposed, group ``4 t + q`` to ``4 q + t`` (its own inverse); a last partial span where it
    was. ``span=SPAN_BYTES``: a ``Packing.DECODE`` row's words; 128: ``x``'s elements in the same order."""
    whole = data.shape[-1] // span
    if not whole:
        return data
    lead, cut = data.shape[:-1], whole * span
    spans = data[..., :cut].reshape(*lead, whole, 4, 4, span // 16).transpose(-3, -2).reshape(*lead, cut)
    return spans if cut == data.shape[-1] else torch.cat([spans, data[..., cut:]], dim=-1)


_CHUNK_WORDS = 1 << 22
"""Words repacked at once: their int64 copies take a few times 32 MiB, whatever the weight's size."""


def _repacked_words(rows: torch.Tensor, moves: dict[int, int]) -> torch.Tensor:
    b = rows.to(torch.int64)
    words = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16) | (b[:, 3] << 24)  # little-endian
    out = torch.zeros_like(words)
    for r, mask in moves.items():
        bits = words & mask
        out = out | ((((bits >> r) | (bits << (32 - r))) & 0xFFFFFFFF) if r else bits)
    return torch.stack([(out >> (8 * i)) & 0xFF for i in range(4)], dim=-1).to(torch.uint8)
