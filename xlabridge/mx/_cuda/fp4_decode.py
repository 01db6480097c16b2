"""The MXFP4 decode matmul on Hopper and newer: ``fp4_decode.cu``, compiled at run time by the NVRTC
that torch's CUDA build ships (``_runtime``), for up to ``MAX_ROWS`` rows of bfloat16 ``x`` (decode:
a few tokens against a weight read once).

Each configuration (``Config``) and token tile count is its own compiled kernel: the source is
compiled with ``-D`` macros for the GPU's architecture, the binary kept on disk so
that a later process skips NVRTC (``_runtime.cached_cubin``). Which
configuration a shape gets is measured by ``xlabridge.mx._triton.fp4_matmul``'s tuning, among its
``DECODE`` candidates (``fp4_wgmma`` is the other decode kernel).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import torch

from xlabridge.mx._cuda import COMMON, _counts, _runtime, x_order
from xlabridge.mx._fp4_packing import Packing

SOURCE = Path(__file__).with_name("fp4_decode.cu")
"""What both decode kernels share (loads, the E2M1 decoder), put before each one's source."""
MAX_ROWS = 64
"""The most rows of ``x`` (tokens) a launch takes: eight tiles of 8, the MMA's ``n`` side."""
BIAS_KINDS = {torch.bfloat16: 1, torch.float32: 2}
"""The bias dtypes the kernel reads (its ``HAS_BIAS``; 0 is none)."""
_INT32 = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class Config:
    """One compiled kernel's shape: ``rt`` row tiles of 16 weight rows per warp, ``wn`` warps along
    ``N`` (they share ``x`` through L1), ``wk`` warps splitting ``K`` (summed in shared memory), and
    how loads stay in flight: ``stages`` > 1 streams each warp's spans of 128 elements of ``K``
    through a ring of that many stages in shared memory (``x_async``: ``x``'s elements too);
    ``stages`` = 0 holds them in registers, ``spans`` a step (``double``: the next step's loads
    issued before this step's arithmetic). ``x_paired``: ``x`` is first copied (``paired_x``) with
    each 8 elements in the order the MMA pairs them and each span's chunks in the order its loads
    take them (one or two more launches; no byte permutes, half the L1 wavefronts per load of
    ``x``): the spec layout's, as a ``Packing.DECODE`` weight's kernel reads ``x`` in such runs as
    it lies in memory (refused there). ``min_blocks``: CTAs per SM the register budget is cut for (``__launch_bounds__``).
    ``x_early`` (registers path): ``x``'s words of a span loaded with the weight's, into registers
    (``double``: two spans' worth), or not (read through L1 as the arithmetic reaches them); None:
    early up to two token tiles, where they take the fewest registers.
    ``k_spans``: 0, each CTA takes the whole of ``K``; n > 0, each takes n spans of it (the launch
    splits ``K`` across CTAs, ``splits``), and the splits of a row tile add their float32 sums in
    split order: a CTA of many rows (``rt``, ``wn``) then reads ``x`` from L2 for all of them while
    the grid still fills the SMs. ``acc_sets``: 1, or 2 (each K chunk pair's two MMAs into one set of
    accumulators each, added at the end: chains of dependent MMAs half as long, twice the registers)."""

    rt: int = 1
    wn: int = 1
    wk: int = 4
    spans: int = 1
    double: bool = False
    stages: int = 0
    x_async: bool = False
    x_paired: bool = False
    min_blocks: int = 1
    x_early: bool | None = None
    k_spans: int = 0
    acc_sets: int = 1

    def __post_init__(self) -> None:
        if self.acc_sets not in (1, 2) or not isinstance(self.acc_sets, int):
            raise ValueError(f"fp4_decode.Config: acc_sets must be 1 or 2, got {self.acc_sets!r}")
        if not isinstance(self.k_spans, int) or self.k_spans < 0:
            raise ValueError(f"fp4_decode.Config: k_spans must be an int >= 0 (0: no split of K), "
                             f"got {self.k_spans!r}")
        for name in ("rt", "wn", "wk", "spans", "min_blocks"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"fp4_decode.Config: {name} must be a positive int, got {value!r}")
        if self.stages == 1 or self.stages < 0:
            raise ValueError(f"fp4_decode.Config: stages must be 0 (registers) or at least 2, got {self.stages!r}")
        if self.x_early is not None and (self.stages or not isinstance(self.x_early, bool)):
            raise ValueError(f"fp4_decode.Config: x_early must be None, or a bool on the registers path (stages=0), "
                             f"got {self.x_early!r} with stages={self.stages}")
        if self.x_async and not self.stages:
            raise ValueError("fp4_decode.Config: x_async needs stages (the ring in shared memory)")
        if self.threads > 1024:
            raise ValueError(f"fp4_decode.Config: wn * wk * 32 threads must be at most 1024, got {self.threads}")

    @property
    def threads(self) -> int:
        return self.wn * self.wk * 32

    @property
    def rows(self) -> int:
        """Weight rows per CTA."""
        return 16 * self.rt * self.wn

    def shared_bytes(self, nt: int) -> int:
        """Static shared memory: the partial sums the CTA adds, one set per warp along ``K`` past the
        first; with ``k_spans``, the flag of a row tile's last split too (its 16-byte slot)."""
        return (self.wk - 1) * self.wn * self.rt * nt * 4 * 32 * 4 + (16 if self.k_spans else 0)

    def ring_bytes(self, nt: int) -> int:
        """The stages' shared memory (dynamic), for all the CTA's warps."""
        return self.wn * self.wk * self.stages * (self.rt * 2 + (nt * 4 if self.x_async else 0)) * 32 * 16

    def dynamic_bytes(self, nt: int) -> int:
        """The dynamic shared memory a launch for ``nt`` token tiles takes (the ring's)."""
        return self.ring_bytes(nt)

    def splits(self, K: int) -> int:
        """CTAs along ``K`` (``k_spans``; 1 without)."""
        spans = -(-K // 128)
        return -(-spans // self.k_spans) if self.k_spans else 1

    def fits(self, nt: int) -> bool:
        """Whether a CTA's shared memory fits a Hopper SM (227 KiB, static part 48 KiB)."""
        return self.shared_bytes(nt) <= 48 * 1024 and self.shared_bytes(nt) + self.dynamic_bytes(nt) <= 227 * 1024


def token_tiles(m: int) -> int:
    """The MMA's 8-token tiles that ``m`` rows of ``x`` need."""
    return -(-m // 8)


def compute_capability(device: torch.device) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device)


def available(device: torch.device) -> bool:
    """Whether ``device`` runs the kernel: a CUDA GPU of compute capability 9.0 or newer (the
    decoder's ``mul.rn.bf16x2`` is Hopper's)."""
    return device.type == "cuda" and compute_capability(device) >= (9, 0)


def refusal(x: torch.Tensor, data: torch.Tensor, scale: torch.Tensor, ids: torch.Tensor | None,
            bias: torch.Tensor | None) -> str | None:
    """Why the kernel does not take these operands (``x`` ``[A, M, K]``, ``data`` ``[E, N, K/2]``,
    ``scale`` ``[E, N, K/32]``), or None if it does."""
    A, M, K = x.shape
    if x.dtype != torch.bfloat16:
        return f"x is {x.dtype}, the kernel takes bfloat16"
    if not available(x.device):
        return f"{x.device} is not a CUDA GPU of compute capability 9.0 or newer"
    if M > MAX_ROWS:
        return f"{M} rows of x, the kernel takes at most {MAX_ROWS}"
    if K % 32:
        return f"K={K} is not a multiple of 32"
    if x.stride(-1) != 1 or x.stride(-2) % 8 or x.data_ptr() % 16:
        return "x's rows are not contiguous and 16-byte aligned"
    if not data.is_contiguous() or data.data_ptr() % 16 or not scale.is_contiguous():
        return "the weight's data or scales are not contiguous (data 16-byte aligned)"
    if bias is not None and (bias.dtype not in BIAS_KINDS or bias.stride(-1) != 1):
        return f"bias is {bias.dtype} or strided; the kernel takes contiguous bfloat16 or float32"
    if max(x.stride(0), data.stride(0), scale.stride(0), A * M * data.shape[-2]) > _INT32:
        return "a stride past 32 bits"
    return None


PREFETCH_SPANS = 2
"""Spans of each row's range a CTA brings into L2 before the previous kernel's end (``fp4_common.cuh``'s
``prefetch_row``): the first loads' latency spent while that kernel finishes."""


def scale_alignment(scale: torch.Tensor, packing: Packing = Packing.DECODE) -> int:
    """The bytes (4, 2 or 1) that every span's scale bytes of ``scale`` (``[E, N, K/32]``) start on,
    for a ``Packing.DECODE`` weight's kernel, which loads a span's four together (``SCALE_ALIGN``);
    1 for the spec layout, whose kernels load one byte a thread."""
    if Packing(packing) is not Packing.DECODE:
        return 1
    for align in (4, 2):
        if scale.data_ptr() % align == 0 and all(stride % align == 0 for stride in scale.stride()[:-1]):
            return align
    return 1


def check_align(packing: Packing, align: int, kernel: str = "fp4_decode") -> None:
    """Either kernel's ``align`` argument: 4, 2 or 1 for a ``Packing.DECODE`` weight, 1 for the spec's."""
    if align not in (1, 2, 4) or (align != 1 and packing is not Packing.DECODE):
        raise ValueError(f"{kernel}: align must be 4, 2 or 1 (1 for the spec layout), got {align!r}")


def _check_packing(config: Config, packing: Packing, align: int) -> None:
    if config.x_paired and packing is Packing.DECODE:
        raise ValueError("fp4_decode: x_paired is for the spec layout; a Packing.DECODE weight's kernel takes x as it is")
    check_align(packing, align)


def _options(config: Config, nt: int, bias: int, has_ids: bool, name: str, probe: int = 0,
             packing: Packing = Packing.SPEC, align: int = 1) -> list[str]:
    _check_packing(config, packing, align)
    macros = {"PACKING": int(packing is Packing.DECODE), "SCALE_ALIGN": align, "NT": nt, "RT": config.rt, "WN": config.wn,
              "WK": config.wk, "U": config.spans,
              "DB": int(config.double), "ASYNC": int(config.stages > 0), "S": max(config.stages, 2),
              "X_ASYNC": int(config.x_async), "X_PAIRED": int(config.x_paired),
              "X_EARLY": int(x_early(config, nt)), "PROBE": probe, "MINB": config.min_blocks,
              "KS": config.k_spans, "AS": config.acc_sets, "HAS_BIAS": bias, "HAS_IDS": int(has_ids), "PREFETCH": PREFETCH_SPANS,
              "KERNEL": name}
    return [f"-D{key}={value}" for key, value in macros.items()]


def x_early(config: Config, nt: int) -> bool:
    """Whether the kernel loads ``x``'s words of a span with the weight's (``Config.x_early``)."""
    return (not config.stages and nt <= 2) if config.x_early is None else config.x_early


def _packing_name(packing: Packing, align: int) -> str:
    return f"_packed{align}" if packing is Packing.DECODE else ""


def _name(config: Config, nt: int, bias: int, has_ids: bool, packing: Packing = Packing.SPEC, align: int = 1) -> str:
    return (f"mxfp4_decode{_packing_name(packing, align)}_n{nt}_r{config.rt}_wn{config.wn}"
            f"_wk{config.wk}_u{config.spans}_d{int(config.double)}"
            f"_s{config.stages}_x{int(config.x_async)}{int(config.x_paired)}{int(x_early(config, nt))}"
            f"_b{config.min_blocks}{f'_ks{config.k_spans}' if config.k_spans else ''}{'_a2' if config.acc_sets == 2 else ''}_{bias}{int(has_ids)}")


def source() -> str:
    """The kernel's CUDA C++: ``fp4_common.cuh``, then ``fp4_decode.cu``."""
    return COMMON.read_text() + "\n" + SOURCE.read_text()


def binary(config: Config, nt: int, bias: int, has_ids: bool, capability: tuple[int, int], cached: bool = True,
           probe: int = 0, packing: Packing = Packing.SPEC, align: int = 1) -> bytes:
    """The kernel's binary for ``sm_<capability>`` (``nt`` token tiles, ``bias`` kind of
    ``BIAS_KINDS`` or 0, the weight laid out as ``packing``, its scale bytes ``align``-aligned per
    span: ``scale_alignment``): from ``_runtime``'s disk cache or NVRTC (``cached``), or NVRTC's
    alone (``probe``: a benchmark's ``PROBE`` build, never cached)."""
    packing = Packing(packing)
    name = _name(config, nt, bias, has_ids, packing, align) + (f"_p{probe}" if probe else "")
    build = _runtime.cached_cubin if cached and not probe else _runtime.compile_cubin
    return build(source(), name, f"{capability[0]}{capability[1]}",
                 _options(config, nt, bias, has_ids, name, probe, packing, align))


def load(code: bytes, config: Config, nt: int, bias: int, has_ids: bool, probe: int = 0,
         packing: Packing = Packing.SPEC, align: int = 1) -> _runtime.Kernel:
    """``binary``'s result loaded into the current context."""
    name = _name(config, nt, bias, has_ids, Packing(packing), align) + (f"_p{probe}" if probe else "")
    return _runtime.Kernel(code, name, config.dynamic_bytes(nt))


@functools.cache
def kernel(config: Config, nt: int, bias: int, has_ids: bool, device_index: int,
           packing: Packing = Packing.SPEC, align: int = 1) -> _runtime.Kernel:
    """The kernel loaded on that device (its ``registers`` and ``local_bytes`` are the driver's)."""
    code = binary(config, nt, bias, has_ids, compute_capability(torch.device("cuda", device_index)),
                  packing=packing, align=align)
    return _runtime.on_device(device_index, lambda: load(code, config, nt, bias, has_ids, packing=packing, align=align))


def bias_kind(bias: torch.Tensor | None) -> int:
    return 0 if bias is None else BIAS_KINDS[bias.dtype]


def paired_x(x: torch.Tensor) -> torch.Tensor:
    """``x`` (``[A, M, K]``) as ``x_paired`` kernels (spec layout) read it: ``K`` padded with zeros
    to a multiple of 128 (a span); in each span, element ``32 t + 8 q + e`` (thread ``t``'s block,
    its chunk ``q``) moved to ``32 q + 8 t + p``, with ``e`` = 0, 4, 1, 5, 2, 6, 3, 7 for ``p`` =
    0 .. 7, the MMA's pairs. On a GPU, ``x_order``'s one launch (``x`` a kernel's operand)."""
    if x.is_cuda:
        return x_order.order(x, x_order.Layout.PAIRED)
    A, M, K = x.shape
    padded = -(-K // 128) * 128
    if padded != K:
        x = torch.nn.functional.pad(x, (0, padded - K))
    # [span, t, q, half, k] -> [span, q, t, k, half]
    return x.view(A, M, padded // 128, 4, 4, 2, 4).permute(0, 1, 2, 4, 3, 6, 5).reshape(A, M, padded)


def launch(config: Config, x: torch.Tensor, data: torch.Tensor, scale: torch.Tensor, ids: torch.Tensor | None,
           bias: torch.Tensor | None, y: torch.Tensor, packing: Packing = Packing.SPEC) -> torch.Tensor:
    """``y[a] = x[a] @ dequantize(data[e], scale[e]).T (+ bias[e])``, ``e = ids[a]`` (or ``a``), in
    one launch (``refusal`` is None for these operands; ``data`` laid out as ``packing``)."""
    nt = token_tiles(x.shape[1])
    if not config.fits(nt):
        raise ValueError(f"fp4_decode: {config} with {nt} token tiles needs more shared memory than an SM has")
    packing = Packing(packing)
    run = kernel(config, nt, bias_kind(bias), ids is not None, x.device.index or 0, packing,
                 scale_alignment(scale, packing))
    return launch_loaded(run, config, x, data, scale, ids, bias, y, packing=packing)


def launch_loaded(run: _runtime.Kernel, config: Config, x: torch.Tensor, data: torch.Tensor, scale: torch.Tensor,
                  ids: torch.Tensor | None, bias: torch.Tensor | None, y: torch.Tensor,
                  dependent: bool = True, packing: Packing = Packing.SPEC) -> torch.Tensor:
    """``launch`` with the kernel ``run`` already loaded (``kernel``'s, or a benchmark's own build, for
    the weight's packing and at most ``scale_alignment(scale)``); ``dependent``: launched to overlap
    the stream's previous kernel (``_runtime.Kernel``)."""
    A, M, K = x.shape
    N = data.shape[-2]
    if config.x_paired:  # each span's chunks in (q, t) order, each 8 elements as the MMA pairs them
        _check_packing(config, Packing(packing), 1)
        x = paired_x(x)
    tiles, nt, split = -(-N // config.rows), token_tiles(M), config.splits(K)
    sums = counts = None
    if split > 1:  # each split's float32 sums (a thread's 4 nt rt of each), and the tiles' arrival counts
        sums = torch.empty(A * tiles * split * config.wn * 32 * config.rt * nt * 4, dtype=torch.float32,
                           device=x.device)
        counts = _counts.arrival_counts(x.device, A * tiles)
    run((tiles, A, split), (config.threads, 1, 1),
        [x, data, scale, bias, ids, y, sums, counts, M, N, K, x.stride(0), x.stride(1), data.stride(0),
         data.stride(1), scale.stride(0), scale.stride(1), y.stride(0), y.stride(1),
         0 if bias is None else bias.stride(0)],
        torch.cuda.current_stream(x.device).cuda_stream, config.dynamic_bytes(nt), dependent)
    return y
