"""The MXFP4 matmul on CUDA tensors: one launch of ``fp4_matmul_kernel`` per call, the weight
read as MXFP4 bytes and dequantized tile by tile inside the kernel.

Which dequantization (``MODE``) and tile a shape gets is measured, not guessed: the first call for
a key (``x``'s row tile, ``N``, ``K``, the number of weight groups, bias, expert ids, dtype)
times every candidate of ``CONFIGS`` that compiles and agrees with the exact ``"triton"`` mode on
that call's own tensors (``triton.testing.do_bench``, which empties the L2 cache between runs, so
each is timed reading its weight from HBM, as decode does), and keeps the fastest; ``TUNING``
records every candidate's time or error (``tools/bench/mx4_linear.py`` writes it out). A call
while a CUDA graph is being captured cannot time anything: it takes the key's choice if there is
one, else ``DEFAULT``. Under Triton's CPU interpreter the kernel runs ``INTERPRET``.

``SPLIT_K`` is chosen per shape (``split_k``): enough programs for two per SM, each still
covering at least two ``BK`` steps of ``K``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging

import torch

from xlabridge import _optional
from xlabridge.mx._triton.fp4 import device_guard

logger = logging.getLogger(__name__)

_FEATURE = "xlabridge.mx MXFP4 matmul on CUDA"


@dataclasses.dataclass(frozen=True)
class Config:
    """One candidate: dequantization mode, weight rows (``bn``) and elements of ``K`` (``bk``) per
    step, warps, pipeline stages."""

    mode: str
    bn: int
    bk: int
    warps: int
    stages: int


CONFIGS = (
    Config("ptx", 32, 256, 4, 4),
    Config("ptx", 64, 256, 4, 3),
    Config("ptx", 64, 512, 8, 3),
    Config("ptx", 128, 256, 8, 3),
    Config("dot_scaled", 64, 256, 4, 3),
    Config("dot_scaled", 128, 256, 8, 3),
    Config("triton", 32, 256, 4, 3),
    Config("triton", 64, 256, 4, 3),
)
"""What the first call of a key times (``ptx`` and ``dot_scaled`` for bfloat16 inputs only)."""
DEFAULT = Config("triton", 64, 256, 4, 3)
INTERPRET = Config("triton", 16, 64, 4, 1)
TUNING: dict[tuple, list[dict]] = {}
"""Per key: each candidate's config and median ms (or why it was left out), as timed."""
_CHOSEN: dict[tuple, Config] = {}
_LOCKS: dict[torch.device, torch.Tensor] = {}


def supports(x: torch.Tensor, block_size: int) -> bool:
    """Whether the kernel takes ``x`` (bfloat16 or float16: tensor-core inputs) and ``block_size`` (32)."""
    return block_size == 32 and x.dtype in (torch.bfloat16, torch.float16)


@functools.cache
def _kernel():
    _optional.require("triton", _FEATURE)
    from xlabridge.mx._triton import fp4_matmul_kernel

    return fp4_matmul_kernel.mxfp4_matmul_kernel


def row_tile(m: int) -> int:
    """``BM``: the MMA's smallest tile (16) for decode rows, 64 above (one tile up to 64 rows)."""
    return 16 if m <= 16 else 64


def split_k(programs: int, k: int, bk: int, sms: int) -> int:
    """A power of two that brings ``programs`` to at least two per SM, leaving each split two ``bk`` steps."""
    split = 1
    while programs * split < 2 * sms and k >= 4 * bk * split:
        split *= 2
    return split


def _sms(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


def _locks(device: torch.device, count: int) -> torch.Tensor:
    """Zeroed per-tile arrival counters (the kernel leaves them zeroed); one buffer per device, so
    split-K launches on one device must not run concurrently on several streams."""
    locks = _LOCKS.get(device)
    if locks is None or locks.numel() < count:
        locks = torch.zeros(max(count, 4096), dtype=torch.int32, device=device)
        _LOCKS[device] = locks
    return locks


def _launch(config: Config, x, data, scale, ids, bias, y):
    A, M, K = x.shape
    N = data.shape[-2]
    bm = row_tile(M)
    tiles = -(-M // bm) * -(-N // config.bn)
    split = split_k(tiles * A, K, config.bk, _sms(x.device))
    workspace = torch.empty(A * tiles * split * config.bn * bm if split > 1 else 1, dtype=torch.float32, device=x.device)
    locks = _locks(x.device, A * tiles)
    dummy = y
    with device_guard(x):
        _kernel()[(tiles, split, A)](
            x, data, scale, dummy if bias is None else bias, dummy if ids is None else ids, y, workspace, locks,
            M, N, K, split, -(-K // (split * config.bk)) * config.bk,
            x.stride(0), x.stride(1), data.stride(0), data.stride(1), scale.stride(0), scale.stride(1),
            y.stride(0), y.stride(1), 0 if bias is None else bias.stride(0),
            HAS_BIAS=bias is not None, HAS_IDS=ids is not None, MODE=config.mode,
            BM=bm, BN=config.bn, BK=config.bk, num_warps=config.warps, num_stages=config.stages,
        )
    return y


def _candidates(x: torch.Tensor) -> list[Config]:
    return [c for c in CONFIGS if c.mode == "triton" or x.dtype == torch.bfloat16]


def _tune(key, x, data, scale, ids, bias, y) -> Config:
    """Time every candidate on this call's tensors; keep the fastest that agrees with the exact mode."""
    from triton.testing import do_bench

    reference = _launch(DEFAULT, x, data, scale, ids, bias, torch.empty_like(y)).float()
    tolerance = 2.0**-6 * reference.abs() + 2.0**-10 * reference.abs().amax().clamp_min(1e-30)
    table, best = [], None
    for config in _candidates(x):
        entry = dataclasses.asdict(config)
        try:
            out = _launch(config, x, data, scale, ids, bias, torch.empty_like(y))
            if not bool(((out.float() - reference).abs() <= tolerance).all()):
                entry["left_out"] = "results differ from the exact mode's"
            else:
                entry["ms"] = do_bench(lambda: _launch(config, x, data, scale, ids, bias, y), warmup=5, rep=25)
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
           bias: torch.Tensor | None) -> torch.Tensor:
    """``y[a] = x[a] @ dequantize(data[e], scale[e]).T (+ bias[e])`` with ``e = ids[a]`` (or ``a``):
    ``x`` ``[A, M, K]``, ``data`` ``[E, N, K/2]``, ``scale`` ``[E, N, K/32]``, ``y`` ``[A, M, N]`` in ``x``'s dtype."""
    x = x if x.stride(-1) == 1 else x.contiguous()
    data, scale = data.contiguous(), scale.contiguous()
    A, M, K = x.shape
    y = torch.empty(A, M, data.shape[-2], dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    if x.device.type != "cuda":
        return _launch(INTERPRET, x, data, scale, ids, bias, y)
    key = (row_tile(M), data.shape[-2], K, A, bias is not None, ids is not None, x.dtype, x.device)
    config = _CHOSEN.get(key)
    if config is None:
        if torch.cuda.is_current_stream_capturing():
            config = DEFAULT
        else:
            config = _CHOSEN[key] = _tune(key, x, data, scale, ids, bias, y)
    return _launch(config, x, data, scale, ids, bias, y)

