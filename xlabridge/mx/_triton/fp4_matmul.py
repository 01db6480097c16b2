"""The MXFP4 matmul on CUDA tensors: one launch of ``fp4_matmul_kernel`` per call, the weight
read as MXFP4 bytes and dequantized tile by tile inside the kernel; for up to 64 rows of bfloat16
``x`` on Hopper and newer, the CUDA decode kernel (``xlabridge.mx._cuda.fp4_decode``,
``mode="cuda"``); or, where that is faster for a shape, the weight dequantized to ``x``'s dtype and
multiplied by PyTorch (``mode="dequantize"``).

Which path, dequantization (``MODE``) and tile a shape gets is measured, not guessed: the first
call for a key (``x``'s row tile, ``N``, ``K``, the number of weight groups, bias, expert ids,
dtype; and the token tiles of 8 rows the decode kernel takes) times every candidate of ``CONFIGS``
for that row tile (and of ``DECODE`` for that number of token tiles) that compiles and agrees with the
exact ``"triton"`` mode on that call's own tensors (``_gpu_time``: CUDA-graph replays, so that the
host's launch overhead, which differs between launchers, is not counted, with the L2 cache
refilled by a read before each call, so each is timed reading its weight from HBM, as decode does), and
keeps the fastest; ``TUNING`` records every candidate's time or error (``tools/bench/mx4_linear.py`` writes
it out). A call while a CUDA graph is being captured cannot time anything: it takes the key's
choice if there is one, else ``DEFAULT``. Under Triton's CPU interpreter the kernel runs
``INTERPRET``.

``SPLIT_K`` is chosen per shape (``split_k``): enough programs for ``per_sm`` of them per SM (a
field of the config, so the tuning picks it too), each still covering at least one ``BK`` step of
``K``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging

import torch

from xlabridge import _optional
from xlabridge.mx._fp4_packing import Packing, repack
from xlabridge.mx._cuda import fp4_decode, fp4_wgmma
from xlabridge.mx._cuda._counts import arrival_counts
from xlabridge.mx._cuda.dispatch import kernel_of
from xlabridge.mx._triton.fp4 import device_guard

logger = logging.getLogger(__name__)

_FEATURE = "xlabridge.mx MXFP4 matmul on CUDA"


@dataclasses.dataclass(frozen=True)
class Config:
    """One candidate: dequantization mode (or ``"dequantize"``: dequantize, then PyTorch's matmul),
    weight rows (``bn``) and elements of ``K`` (``bk``, a multiple of 128) per step, warps,
    pipeline stages, the programs per SM that split-K aims at, how many steps ahead the scale
    bytes are prefetched (0 on Triton's interpreter, which runs no PTX), and whether ``x`` is put
    in the kernel's ``K`` order first, by a launch of its own (``x_in_order``: then every program's
    every step copies it to the MMA as it is, instead of permuting it through registers)."""

    mode: str
    bn: int = 64
    bk: int = 128
    warps: int = 4
    stages: int = 3
    per_sm: int = 2
    ahead: int = 1
    x_in_order: bool = False
    decode: fp4_decode.Config | fp4_wgmma.Config | None = None
    """``mode="cuda"``: the CUDA decode kernel's configuration, ``fp4_decode``'s or ``fp4_wgmma``'s
    (the other fields unused)."""


def _grid(mode, tiles, warps, stages, per_sms, orders=(False,)):
    return tuple(Config(mode, bn, bk, warps, stages, per_sm, 1, order)
                 for bn, bk in tiles for per_sm in per_sms for order in orders)


_BOTH = (False, True)


DEQUANTIZE = Config("dequantize")
CONFIGS: dict[int, tuple[Config, ...]] = {
    16: (_grid("asm", ((64, 256), (64, 128), (128, 128)), 4, 3, (1, 2, 4, 8), _BOTH)
         + _grid("asm", ((64, 256),), 4, 4, (1, 2, 4)) + _grid("triton", ((64, 128),), 4, 3, (2, 4), _BOTH)
         + (DEQUANTIZE,)),
    32: (_grid("asm", ((64, 128), (64, 256)), 4, 3, (1, 2, 4), _BOTH) + _grid("asm", ((128, 128),), 8, 3, (1, 2, 4), _BOTH)
         + _grid("triton", ((64, 128),), 4, 3, (2,), _BOTH) + (DEQUANTIZE,)),
    64: (_grid("asm", ((64, 128),), 4, 3, (1, 2, 4), _BOTH) + _grid("asm", ((128, 128), (256, 128)), 8, 3, (1, 2, 4), _BOTH)
         + _grid("triton", ((64, 128),), 4, 3, (2,), _BOTH) + (DEQUANTIZE,)),
}
"""What the first call of a key times, per row tile (``row_tile``): the ``asm`` configs for
bfloat16 inputs, the ``triton`` ones for float16, the dequantizing path for both. Configs that
differ only in ``per_sm`` share one compiled kernel."""


def _decode(*configs: fp4_decode.Config | fp4_wgmma.Config) -> tuple[Config, ...]:
    return tuple(Config("cuda", decode=c) for c in configs)


_D, _W, _PAIRS, _C = fp4_decode.Config, fp4_wgmma.Config, fp4_wgmma.Pipeline.PAIRS, fp4_wgmma.Sums.CLUSTER
DECODE: dict[int, tuple[Config, ...]] = {
    1: _decode(_D(1, 1, 8, 1, min_blocks=4), _D(1, 1, 16, 1, min_blocks=2), _D(2, 1, 4, 1, True), _D(2, 1, 4, 1),
               _D(2, 2, 4, 1, True), _D(2, 1, 4, 1, True, x_early=False), _D(1, 1, 8, 1, True, x_early=False),
               _D(1, 1, 8, 1), _D(1, 1, 4, 1), _D(1, 1, 4, 2, x_early=False),
               _D(1, 1, 8, 1, True, min_blocks=4, x_early=False)),
    2: _decode(_D(1, 1, 4, 1, True, x_paired=True), _D(2, 1, 16, 1), _D(2, 1, 4, 1, x_paired=True),
               _D(2, 1, 8, 1, True), _D(2, 1, 8, 1), _W(2, 4, 1, 2), _D(1, 1, 4, 1, True, x_paired=True, x_early=False),
               _D(2, 1, 4, 1, True, x_early=False), _D(1, 1, 8, 1, True, x_early=False),
               _D(2, 1, 4, 1, min_blocks=3), _D(1, 1, 8, 1, min_blocks=3, x_early=False)),
    4: _decode(_W(2, 4, 1, 1, _PAIRS, 2), _D(2, 1, 8, 1, True), _D(1, 1, 4, 1, True, x_paired=True), _D(2, 1, 8, 4),
               _W(1, 8, 2, 2, _PAIRS, 3), _D(4, 1, 4, 1), _W(1, 8, 2, 1, sums=_C), _W(2, 4, 1, 2, sums=_C),
               _W(2, 4, 1, 2, _PAIRS, 3)),
    8: _decode(_W(1, 4, 1, 1, sums=_C), _D(1, 2, 4, 1, True, x_paired=True), _D(2, 1, 4, 1, True, x_paired=True),
               _W(1, 4, 2, 1, _PAIRS, 3), _W(2, 4, 1, 1, _PAIRS, 2), _D(1, 1, 4, 1, True, x_paired=True),
               _W(1, 4, 1, 1, _PAIRS, 4), _W(2, 4, 1, 2, _PAIRS, 3)),
}
"""The CUDA decode kernels' candidates per number of 8-row token tiles, rounded up to a key here
(3 takes 4's, 5 to 7 take 8's): the fewest configurations that come near the fastest on every shape
of ``tools/bench/mx4_decode_sweep.py``'s sweeps (``fp4_decode``'s; from 17 tokens ``fp4_wgmma``'s
too, on Hopper alone), for a weight in either packing (``x_paired`` ones read a ``Packing.DECODE``
weight's ``x`` as it is: ``_without_x_order``)."""

DEFAULT = Config("triton", 64, 256, 4, 2, 2)
INTERPRET = Config("triton", 16, 128, 4, 1, 1, 0)
X_ORDER_BLOCK = 1024
PERMUTE = True
"""Whether the kernel presents ``K`` to the MMA in its permuted order (``fp4_matmul_kernel``'s
docstring); False only to test the permutation against memory order."""
TUNING: dict[tuple, list[dict]] = {}
"""Per key: each candidate's config and median ms (or why it was left out), as timed."""
_CHOSEN: dict[tuple, Config] = {}


def supports(x: torch.Tensor, block_size: int) -> bool:
    """Whether the kernel takes ``x`` (bfloat16 or float16: tensor-core inputs) and ``block_size`` (32)."""
    return block_size == 32 and x.dtype in (torch.bfloat16, torch.float16)


@functools.cache
def _kernel():
    _optional.require("triton", _FEATURE)
    from xlabridge.mx._triton import fp4_matmul_kernel

    return fp4_matmul_kernel.mxfp4_matmul_kernel


def decode_tiles(m: int) -> int:
    """The key of ``DECODE`` for ``m`` rows of ``x``: its 8-row token tiles, rounded up to 1, 2, 4 or 8."""
    tiles = fp4_decode.token_tiles(m)
    return next(key for key in sorted(DECODE) if key >= tiles)


def row_tile(m: int) -> int:
    """``BM``: the MMA's smallest tile (16) for up to 16 rows, 32 up to 32, 64 above (64-row tiles)."""
    return 16 if m <= 16 else 32 if m <= 32 else 64


def split_k(programs: int, k: int, bk: int, sms: int, per_sm: int) -> int:
    """A power of two that brings ``programs`` to at least ``per_sm`` per SM, leaving each split a ``bk`` step."""
    split = 1
    while programs * split < per_sm * sms and k >= 2 * bk * split:
        split *= 2
    return split


def _sms(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


def _dequantized(config: Config, x, data, scale, ids, bias, y):
    """``mode="dequantize"``: the weights that ``ids`` names (all where None) dequantized to ``x``'s
    dtype, then one batched matmul (PyTorch's), written into ``y``."""
    from xlabridge.mx._triton.fp4 import from_mxfp4

    if ids is not None:
        data, scale = data[ids.long()], scale[ids.long()]
    w = from_mxfp4(data, scale, 32, x.dtype)  # [A or E, N, K]
    out = torch.nn.functional.linear(x[0], w[0])[None] if w.shape[0] == 1 else torch.bmm(x, w.transpose(1, 2))
    if bias is None:
        y.copy_(out)
    else:  # added in float32, as the kernel adds it, then rounded
        y.copy_(out.float() + (bias if ids is None else bias[ids.long()]).float()[:, None, :])
    return y


def _x_in_order(x: torch.Tensor) -> torch.Tensor:
    """``x`` (``[A, M, K]``) in the kernel's ``K`` order, ``K`` padded with zeros to a multiple of 128:
    one launch of ``x_in_order_kernel``."""
    A, M, K = x.shape
    kx = -(-K // 128) * 128
    rows = x.reshape(A * M, K)
    out = torch.empty(A, M, kx, dtype=x.dtype, device=x.device)
    from xlabridge.mx._triton import fp4_matmul_kernel

    with device_guard(x):
        fp4_matmul_kernel.x_in_order_kernel[(A * M, -(-kx // X_ORDER_BLOCK))](
            rows, out, K, kx, rows.stride(0), BLOCK=X_ORDER_BLOCK, num_warps=4)
    return out


def _launch(config: Config, x, data, scale, ids, bias, y, packing: Packing = Packing.SPEC):
    if config.mode == "cuda":
        kernel = kernel_of(config.decode)
        refusal = kernel.refusal(x, data, scale, ids, bias)
        if refusal is not None:
            raise ValueError(f"the CUDA decode kernel does not take these operands: {refusal}")
        return kernel.launch(config.decode, x, data, scale, ids, bias, y, packing)
    # the other paths read the spec's layout: a Packing.DECODE weight is repacked (one pass over it)
    data = repack(data, Packing.SPEC, packing)
    if config.mode == "dequantize":
        return _dequantized(config, x, data, scale, ids, bias, y)
    A, M, K = x.shape
    N = data.shape[-2]
    words = data.view(torch.int16)  # the kernel reads the weight as 16-bit words of four elements
    x_in_order = config.x_in_order and PERMUTE
    if x_in_order:
        x = _x_in_order(x)
    kx = x.shape[-1]
    bm = row_tile(M)
    tiles = -(-M // bm) * -(-N // config.bn)
    split = split_k(tiles * A, K, config.bk, _sms(x.device), config.per_sm)
    k_per_split = -(-K // (split * config.bk)) * config.bk
    split = -(-K // k_per_split)  # no split left with nothing to add
    workspace = torch.empty(A * tiles * split * config.bn * bm if split > 1 else 1, dtype=torch.float32, device=x.device)
    locks = arrival_counts(x.device, A * tiles)
    dummy = y
    with device_guard(x):
        _kernel()[(tiles, split, A)](
            x, words, scale, dummy if bias is None else bias, dummy if ids is None else ids, y, workspace, locks,
            M, N, K, kx, split, k_per_split,
            x.stride(0), x.stride(1), words.stride(0), words.stride(1), scale.stride(0), scale.stride(1),
            y.stride(0), y.stride(1), 0 if bias is None else bias.stride(0),
            HAS_BIAS=bias is not None, HAS_IDS=ids is not None, MODE=config.mode, PERMUTE=PERMUTE,
            X_IN_ORDER=x_in_order, BM=bm, BN=config.bn, BK=config.bk, EVEN_N=N % config.bn == 0, AHEAD=config.ahead,
            num_warps=config.warps, num_stages=config.stages,
        )
    return y


def _without_x_order(config: Config) -> Config:
    if isinstance(config.decode, fp4_decode.Config) and config.decode.x_paired:
        return dataclasses.replace(config, decode=dataclasses.replace(config.decode, x_paired=False))
    return config


def _candidates(x: torch.Tensor, packing: Packing = Packing.SPEC) -> list[Config]:
    """What the tuning times for ``x`` (``[..., M, K]``): its row tile's configs for its dtype, and
    the CUDA decode kernel's for its token tiles where it runs (bfloat16, up to 64 rows, Hopper); for
    a ``Packing.DECODE`` weight there, the decode kernels' alone and the dequantizing path, as the
    others would repack the weight at each call."""
    kernel_mode = "asm" if x.dtype == torch.bfloat16 else "triton"
    out = [c for c in CONFIGS[row_tile(x.shape[-2])] if c.mode in (kernel_mode, "dequantize")]
    m = x.shape[-2]
    if x.dtype == torch.bfloat16 and m <= fp4_decode.MAX_ROWS and fp4_decode.available(x.device):
        packed = packing is Packing.DECODE
        decode = [c for c in DECODE[decode_tiles(m)] if kernel_of(c.decode).available(x.device)]
        if packed:  # x_paired's order is what a DECODE weight's kernel reads of x as it is
            decode = list(dict.fromkeys(_without_x_order(c) for c in decode))
        out = ([DEQUANTIZE] if packed else out) + decode
    return out


def _replay_ms(graph) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def _gpu_time(fn, reps: int = 8, rounds: int = 5) -> float:
    """Median ms of one ``fn()`` reading its operands from HBM: a CUDA graph of ``reps`` times (L2
    refilled, then ``fn``) replayed, less a graph of the refills alone, in ``rounds`` pairs. The refill
    reads twice L2's size: written instead, it would leave L2 full of lines that must be written back
    while ``fn`` reads its weight, twice the HBM traffic a decode step sees, which misranks
    candidates whose times are close."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    flush = torch.ones(2 * max(props.L2_cache_size, 1 << 20) // 4, dtype=torch.int32, device="cuda")
    both, alone = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(both):
        for _ in range(reps):
            flush.sum()
            fn()
    with torch.cuda.graph(alone):
        for _ in range(reps):
            flush.sum()
    _replay_ms(both), _replay_ms(alone)
    times = sorted((_replay_ms(both) - _replay_ms(alone)) / reps for _ in range(rounds))
    return times[len(times) // 2]


def _tune(key, x, data, scale, ids, bias, y, packing: Packing = Packing.SPEC) -> Config:
    """Time every candidate on this call's tensors; keep the fastest that agrees with the exact mode."""
    reference = _launch(DEFAULT, x, data, scale, ids, bias, torch.empty_like(y), packing).float()
    tolerance = 2.0**-6 * reference.abs() + 2.0**-10 * reference.abs().amax().clamp_min(1e-30)
    table, best = [], None
    for config in _candidates(x, packing):
        entry = dataclasses.asdict(config)
        try:
            out = _launch(config, x, data, scale, ids, bias, torch.empty_like(y), packing)
            if not bool(((out.float() - reference).abs() <= tolerance).all()):
                entry["left_out"] = "results differ from the exact mode's"
            else:
                entry["ms"] = _gpu_time(lambda: _launch(config, x, data, scale, ids, bias, y, packing))
                if best is None or entry["ms"] < best[0]:
                    best = (entry["ms"], config)
        except Exception as error:  # noqa: BLE001 - a candidate that does not build is left out, with why
            entry["left_out"] = f"{type(error).__name__}: {str(error)[:300]}"
        table.append(entry)
    TUNING[key] = table
    chosen = best[1] if best else DEFAULT
    logger.info("MXFP4 matmul %s: %s", key, chosen)
    return chosen


def matmul(x: torch.Tensor, data: torch.Tensor, scale: torch.Tensor, ids: torch.Tensor | None,
           bias: torch.Tensor | None, packing: Packing = Packing.SPEC) -> torch.Tensor:
    """``y[a] = x[a] @ dequantize(data[e], scale[e]).T (+ bias[e])`` with ``e = ids[a]`` (or ``a``):
    ``x`` ``[A, M, K]``, ``data`` ``[E, N, K/2]`` laid out as ``packing``, ``scale`` ``[E, N, K/32]``,
    ``y`` ``[A, M, N]`` in ``x``'s dtype."""
    packing = Packing(packing)
    x = x if x.stride(-1) == 1 else x.contiguous()
    data, scale = data.contiguous(), scale.contiguous()
    if data.data_ptr() % 2:  # an odd view: the kernel reads 16-bit words
        data = data.clone()
    A, M, K = x.shape
    y = torch.empty(A, M, data.shape[-2], dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    if x.device.type != "cuda":
        return _launch(INTERPRET, x, data, scale, ids, bias, y, packing)
    key = (row_tile(M), data.shape[-2], K, A, bias is not None, ids is not None, x.dtype, x.device,
           decode_tiles(M) if M <= fp4_decode.MAX_ROWS else None) + ((packing.value,) if packing is Packing.DECODE else ())
    config = _CHOSEN.get(key)
    if config is None:
        if torch.cuda.is_current_stream_capturing():
            config = DEFAULT
        else:
            config = _CHOSEN[key] = _tune(key, x, data, scale, ids, bias, y, packing)
    if config.mode == "cuda" and kernel_of(config.decode).refusal(x, data, scale, ids, bias) is not None:
        config = DEFAULT  # operands the tuning's did not have (a view off 16-byte alignment, a bias dtype)
    return _launch(config, x, data, scale, ids, bias, y, packing)

