"""The MXFP4 decode matmul with Hopper's warpgroup MMA: ``fp4_wgmma.cu`` (after ``fp4_common.cuh``),
compiled by NVRTC for ``sm_90a``, for up to ``fp4_decode.MAX_ROWS`` rows of bfloat16 ``x``.

Where ``fp4_decode`` keeps ``x`` in each warp's registers, this kernel streams it through shared
memory by bulk copies (``x`` first put in the MMA's order, ``mma_order_x``: one more launch), where
the tensor cores read it: the weight rows a CTA covers all share one copy, which is what 32 to 64
tokens need. ``K`` is split across CTAs (``splits``) until the grid fills the SMs; the CTAs of a
row tile add their float32 partial sums in a fixed order. Which configuration a
shape gets is measured by ``xlabridge.mx._triton.fp4_matmul``'s tuning, among its ``DECODE``
candidates.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from pathlib import Path

import torch

from xlabridge.mx._cuda import COMMON, _runtime, fp4_decode, x_order
from xlabridge.mx._cuda._counts import arrival_counts
from xlabridge.mx._fp4_packing import Packing, transposed_spans

SOURCE = Path(__file__).with_name("fp4_wgmma.cu")
SHARED_BYTES = 226 * 1024
"""The shared memory a CTA may take: a Hopper SM's 227 KiB for one CTA, less the kernel's own."""
SPAN_BYTES = 2048
"""Shared memory per span of 128 elements of ``K`` and per 8-token tile of ``x`` (bfloat16)."""
MAX_CLUSTER = 8
"""The most CTAs of a thread block cluster every Hopper GPU launches (the portable size): the most
splits of ``K`` a ``Sums.CLUSTER`` launch makes."""
SLOTS = 4
"""The default ring of ``x``'s spans in shared memory (``slots - 1`` in flight). Two or three were no
faster with ``Pipeline.SPAN`` (``tools/bench/results/mx4_wgmma_variants_h200.json``): at 64 tokens its
registers, not shared memory, bound the CTAs per SM."""


class Pipeline(str, enum.Enum):
    """How a warpgroup feeds its MMAs.

    ``SPAN``: a whole span of ``K`` decoded (32 A registers), then its eight MMAs issued, waited for
    before the next span is decoded. ``PAIRS``: two K chunks decoded into one of two sets of A
    registers while the MMAs of the two before run, so that the decoder and the tensor cores work at
    once; and a split's partial sums kept in the order of the threads that hold them (a thread's
    sums contiguous per token tile, written and read back by 16-byte accesses from one base address),
    where ``SPAN`` keeps them in ``y``'s order, one address per sum: the split-K epilogue, not the
    main loop, sets ``SPAN``'s registers at 64 tokens (``ptxas``: 192 a thread, 128 without it)."""

    SPAN = "span"
    PAIRS = "pairs"


class Sums(str, enum.Enum):
    """Where the CTAs that split a row tile's ``K`` add their float32 partial sums (in split order
    either way: the same bits).

    ``GLOBAL``: each CTA writes its sums to global memory and counts itself in; the last to arrive
    reads them all back from L2 and writes ``y``. ``CLUSTER``: the splits are launched as one thread
    block cluster (``MAX_CLUSTER`` at most); each leaves its sums in its own shared memory and the
    first reads them through the cluster's: no round trip through L2, no fence, no count."""

    GLOBAL = "global"
    CLUSTER = "cluster"


@dataclasses.dataclass(frozen=True)
class Config:
    """One compiled kernel and how its launches split ``K``: ``wg`` warpgroups per CTA (64 weight rows
    each, sharing the CTA's copy of ``x``); ``stages``: the ring the weight streams through in shared
    memory (``stages - 1`` spans of 128 elements of ``K`` in flight); ``per_sm``: the CTAs per SM
    that split-K aims at (``K`` is split across CTAs until the grid has that many, or each split has
    one span); ``min_blocks``: CTAs per SM the register budget is cut for; ``pipeline``: how the MMAs
    are fed (``Pipeline``); ``slots``: the ring of ``x``'s spans (``slots - 1`` in flight), whose
    shared memory, with the registers, bounds the CTAs per SM; ``group``: spans of the weight a stage
    holds, copied together (a warp asks for ``64 group`` contiguous bytes of each of its rows at once,
    ``(stages - 1) group`` spans in flight); ``sums``: where a row tile's splits of ``K`` add their
    partial sums (``Sums``)."""

    wg: int = 1
    stages: int = 4
    per_sm: int = 2
    min_blocks: int = 1
    pipeline: Pipeline = Pipeline.SPAN
    slots: int = SLOTS
    group: int = 1
    sums: Sums = Sums.GLOBAL

    def __post_init__(self) -> None:
        for name in ("wg", "stages", "per_sm", "min_blocks", "slots", "group"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"fp4_wgmma.Config: {name} must be a positive int, got {value!r}")
        for name, kind in (("pipeline", Pipeline), ("sums", Sums)):
            try:
                object.__setattr__(self, name, kind(getattr(self, name)))
            except ValueError:
                raise ValueError(f"fp4_wgmma.Config: {name} must be one of {[p.value for p in kind]}, "
                                 f"got {getattr(self, name)!r}") from None
        if self.wg > 4:
            raise ValueError(f"fp4_wgmma.Config: wg must be at most 4 (512 threads), got {self.wg!r}")
        if self.stages < 2:
            raise ValueError(f"fp4_wgmma.Config: stages must be at least 2 (one span in flight), got {self.stages!r}")
        if self.slots < 2:
            raise ValueError(f"fp4_wgmma.Config: slots must be at least 2 (one span of x in flight), got {self.slots!r}")
        if shared_bytes(self, 8) > SHARED_BYTES:
            raise ValueError(f"fp4_wgmma.Config: the weight's ring ({self.stages} stages of {self.group} spans of {self.wg} "
                             f"warpgroups) "
                             f"and x's ({self.slots} slots at 64 tokens) must fit {SHARED_BYTES} bytes of shared memory")

    @property
    def threads(self) -> int:
        return 128 * self.wg

    @property
    def rows(self) -> int:
        """Weight rows per CTA."""
        return 64 * self.wg


def available(device: torch.device) -> bool:
    """Whether ``device`` runs the kernel: the warpgroup MMA is Hopper's (compute capability 9.0) alone."""
    return device.type == "cuda" and fp4_decode.compute_capability(device) == (9, 0)


def refusal(x: torch.Tensor, data: torch.Tensor, scale: torch.Tensor, ids: torch.Tensor | None,
            bias: torch.Tensor | None) -> str | None:
    """Why the kernel does not take these operands, or None if it does: ``fp4_decode``'s conditions,
    on a Hopper GPU."""
    if x.device.type == "cuda" and not available(x.device):
        return f"{x.device} is not a Hopper GPU (compute capability 9.0): the warpgroup MMA is Hopper's"
    return fp4_decode.refusal(x, data, scale, ids, bias)


def _wgmma_chunk(nt: int) -> str:
    """``wgmma_chunk``: one m64n(8 nt)k16 MMA into ``d``, A from registers, B by descriptor (K-major),
    always accumulating (the kernel zeroes ``d`` first)."""
    acc = 4 * nt
    outputs = ", ".join(f"%{i}" for i in range(acc))
    a = ", ".join(f"%{acc + i}" for i in range(4))
    constraints = ", ".join(f'"+f"(d[{i}])' for i in range(acc))
    return f'''
__device__ __forceinline__ void wgmma_chunk(float (&d)[{acc}], u32 a0, u32 a1, u32 a2, u32 a3,
                                            unsigned long long desc) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{acc + 5}, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n{8 * nt}k16.f32.bf16.bf16 {{{outputs}}}, {{{a}}}, %{acc + 4}, p, 1, 1, 0;\\n}}"
        : {constraints}
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(1));
}}
'''


def source(nt: int) -> str:
    """The kernel's CUDA C++ for ``nt`` token tiles."""
    return COMMON.read_text() + _wgmma_chunk(nt) + "\n" + SOURCE.read_text()


def _options(config: Config, nt: int, bias: int, has_ids: bool, name: str, trace: bool,
             packing: Packing = Packing.SPEC, align: int = 1) -> list[str]:
    fp4_decode.check_align(packing, align, "fp4_wgmma")
    macros = {"PACKING": int(packing is Packing.DECODE), "SCALE_ALIGN": align, "NT": nt, "WG": config.wg, "S": config.stages, "SLOTS": config.slots, "MINB": config.min_blocks,
              "PAIRS": int(config.pipeline is Pipeline.PAIRS), "HAS_BIAS": bias, "HAS_IDS": int(has_ids),
              "PREFETCH": fp4_decode.PREFETCH_SPANS, "G": config.group, "CLUSTER": int(config.sums is Sums.CLUSTER),
              "TRACE": int(trace), "KERNEL": name}
    return [f"-D{key}={value}" for key, value in macros.items()]


def _name(config: Config, nt: int, bias: int, has_ids: bool, trace: bool = False,
          packing: Packing = Packing.SPEC, align: int = 1) -> str:
    pairs = "_p" if config.pipeline is Pipeline.PAIRS else ""
    slots = (("" if config.slots == SLOTS else f"_x{config.slots}") + ("" if config.group == 1 else f"_r{config.group}")
             + ("_c" if config.sums is Sums.CLUSTER else ""))
    return (f"mxfp4_wgmma{fp4_decode._packing_name(packing, align)}_n{nt}_g{config.wg}_s{config.stages}_b{config.min_blocks}{pairs}{slots}"
            f"_{bias}{int(has_ids)}{'_t' if trace else ''}")


def binary(config: Config, nt: int, bias: int, has_ids: bool, cached: bool = True, trace: bool = False,
           packing: Packing = Packing.SPEC, align: int = 1) -> bytes:
    """The kernel's binary for ``sm_90a`` (the weight laid out as ``packing``, its scale bytes
    ``align``-aligned per span: ``fp4_decode.scale_alignment``): from ``_runtime``'s disk cache or
    NVRTC (``cached``), or NVRTC's alone; ``trace``: the diagnostic build that records
    ``TRACE_FIELDS`` per CTA."""
    build = _runtime.cached_cubin if cached else _runtime.compile_cubin
    return build(*_compile_args(config, nt, bias, has_ids, trace, packing, align))


def report(config: Config, nt: int, bias: int, has_ids: bool, packing: Packing = Packing.SPEC,
           align: int = 1) -> _runtime.PtxasReport:
    """``ptxas``'s registers, spills and warnings for ``binary``'s kernel (a compile of its own)."""
    return _runtime.ptxas_report(*_compile_args(config, nt, bias, has_ids, packing=packing, align=align))


def _compile_args(config: Config, nt: int, bias: int, has_ids: bool, trace: bool = False,
                  packing: Packing = Packing.SPEC, align: int = 1) -> tuple[str, str, str, list[str]]:
    """``_runtime``'s compile arguments for the kernel: source, name, architecture, options."""
    packing = Packing(packing)
    name = _name(config, nt, bias, has_ids, trace, packing, align)
    return source(nt), name, "90a", _options(config, nt, bias, has_ids, name, trace, packing, align)


def load(code: bytes, config: Config, nt: int, bias: int, has_ids: bool, trace: bool = False,
         packing: Packing = Packing.SPEC, align: int = 1) -> _runtime.Kernel:
    """``binary``'s result loaded into the current context."""
    return _runtime.Kernel(code, _name(config, nt, bias, has_ids, trace, Packing(packing), align), SHARED_BYTES)


TRACE_SLOTS = 16
"""int64 values a ``trace`` build records per CTA, indexed by ``TRACE_FIELDS``."""
TRACE_FIELDS = {"start_ns": 0, "previous_done_ns": 1, "loop_start_ns": 2, "loop_end_ns": 3, "left_ns": 4,
                "end_ns": 5, "weight_cycles": 6, "x_cycles": 7, "mma_cycles": 8, "scale_cycles": 9,
                "loop_cycles": 10, "sm": 11, "spans": 12}
"""Where a ``trace`` build's CTA (its first thread) records: the global timer (ns) at its start, once
the previous kernel is done, at its main loop's start and end, when it leaves without writing ``y``
(a split that is not its tile's last; else 0) and at its end (else 0); the SM's cycles in its main
loop waiting for the weight's copies, ``x``'s, the MMAs and the scale bytes, and in the whole loop;
its SM and its spans of ``K``."""


def ring_bytes(config: Config) -> int:
    """The weight's ring in shared memory: 32 bytes per thread and span of a stage."""
    return config.stages * config.group * config.threads * 32


@functools.cache
def kernel(config: Config, nt: int, bias: int, has_ids: bool, device_index: int,
           packing: Packing = Packing.SPEC, align: int = 1) -> _runtime.Kernel:
    """The kernel loaded on that device."""
    code = binary(config, nt, bias, has_ids, packing=packing, align=align)
    return _runtime.on_device(device_index, lambda: load(code, config, nt, bias, has_ids, packing=packing, align=align))


def splits(config: Config, tiles: int, k: int, sms: int) -> tuple[int, int]:
    """``(splits, per)``: how many CTAs share a row tile's ``K`` and how many spans each takes, for
    ``tiles`` CTAs before splitting (row tiles times ``A``): doubled while the grid has fewer than
    ``per_sm`` CTAs per SM and each split keeps a span (and, for ``Sums.CLUSTER``, while a cluster
    holds them)."""
    spans = -(-k // 128)
    split = 1
    while (tiles * split < config.per_sm * sms and spans >= 2 * split
           and (config.sums is Sums.GLOBAL or 2 * split <= MAX_CLUSTER)):
        split *= 2
    per = -(-spans // split)
    return -(-spans // per), per


def shared_bytes(config: Config, nt: int) -> int:
    """The rings' shared memory (dynamic): ``x``'s, and the weight's; for ``Sums.CLUSTER``, at least a
    CTA's partial sums (``4 nt`` float32 a thread), which take the rings' place after the loop."""
    rings = config.slots * nt * SPAN_BYTES + ring_bytes(config)
    return max(rings, nt * 16 * config.threads) if config.sums is Sums.CLUSTER else rings


def partial_floats(config: Config, A: int, tiles: int, split: int, M: int, N: int, nt: int) -> int:
    """The split's partial sums (float32): none unsplit or added in a cluster (one, for a valid
    pointer); else each CTA's, in ``y``'s order (``SPAN``: ``[A, split, M, N]``) or its threads'
    (``PAIRS``: ``[A, tiles, split, nt, threads, 4]``, padded rows and tokens included)."""
    if split == 1 or config.sums is Sums.CLUSTER:
        return 1
    if config.pipeline is Pipeline.PAIRS:
        return A * tiles * split * nt * config.threads * 4
    return A * split * M * N


def mma_order_x(x: torch.Tensor, nt: int, packing: Packing = Packing.SPEC) -> torch.Tensor:
    """``x`` (``[A, M, K]``) as the kernel copies it into shared memory (``[A, spans * nt * 1024]``):
    tokens padded with zeros to ``8 nt``, ``K`` to whole spans of 128; per span, in the order chunk
    ``c = 2q + h``, half ``d``, token tile, token, position ``2t + j``, the span's element
    ``32t + 8q + 4j + 2h + d`` (for a ``Packing.DECODE`` weight, whose pairs are consecutive elements
    and whose words are transposed in whole spans, ``32q + 8t + 4h + 2d + j``; in the span ``K`` ends
    inside, ``32t + 8q + 4h + 2d + j``). On a GPU, ``x_order``'s one launch (``x`` a kernel's
    operand)."""
    packed = Packing(packing) is Packing.DECODE
    if x.is_cuda:
        return x_order.order(x, x_order.Layout.WGMMA_PACKED if packed else x_order.Layout.WGMMA, nt)
    A, M, K = x.shape
    spans = -(-K // 128)
    if K % 128:
        x = torch.nn.functional.pad(x, (0, spans * 128 - K))
    if packed:  # whole spans' 8-element groups (q, t) to (t, q), as the weight's words: then as the tail span
        whole = K // 128 * 128
        x = torch.cat([transposed_spans(x[..., :whole], 128), x[..., whole:]], dim=-1)
    if M == 8 * nt:  # one copy
        if packed:  # [A, ng, r, span, t, q, h, d, j] -> [A, span, q, h, d, ng, r, t, j]
            order = x.view(A, nt, 8, spans, 4, 4, 2, 2, 2).permute(0, 3, 5, 6, 7, 1, 2, 4, 8)
        else:  # [A, ng, r, span, t, q, j, h, d] -> [A, span, q, h, d, ng, r, t, j]
            order = x.view(A, nt, 8, spans, 4, 4, 2, 2, 2).permute(0, 3, 5, 7, 8, 1, 2, 4, 6)
        return order.reshape(A, spans * nt * 1024)
    out = x.new_zeros(A, spans * nt * 1024)  # the padding tokens' zeros, then one copy into the rest
    # [A, span, q, h, d, token, t, j] viewed as x's order: [A, token, span, t, q, (h, d, j) or (j, h, d)]
    tokens = out.view(A, spans, 4, 2, 2, 8 * nt, 4, 2)
    tokens = tokens.permute(0, 5, 1, 6, 2, 3, 4, 7) if packed else tokens.permute(0, 5, 1, 6, 2, 7, 3, 4)
    tokens[:, :M].copy_(x.view(A, M, spans, 4, 4, 2, 2, 2))
    return out


def launch(config: Config, x: torch.Tensor, data: torch.Tensor, scale: torch.Tensor, ids: torch.Tensor | None,
           bias: torch.Tensor | None, y: torch.Tensor, packing: Packing = Packing.SPEC) -> torch.Tensor:
    """``y[a] = x[a] @ dequantize(data[e], scale[e]).T (+ bias[e])``, ``e = ids[a]`` (or ``a``), in
    one launch (``refusal`` is None for these operands; ``data`` laid out as ``packing``)."""
    nt = fp4_decode.token_tiles(x.shape[1])
    packing = Packing(packing)
    run = kernel(config, nt, fp4_decode.bias_kind(bias), ids is not None, x.device.index or 0, packing,
                 fp4_decode.scale_alignment(scale, packing))
    return launch_loaded(run, config, x, data, scale, ids, bias, y, packing=packing)


def launch_loaded(run: _runtime.Kernel, config: Config, x: torch.Tensor, data: torch.Tensor, scale: torch.Tensor,
                  ids: torch.Tensor | None, bias: torch.Tensor | None, y: torch.Tensor,
                  dependent: bool = True, trace: torch.Tensor | None = None,
                  packing: Packing = Packing.SPEC) -> torch.Tensor:
    """``launch`` with the kernel ``run`` already loaded (``kernel``'s, or a benchmark's own build);
    ``dependent``: launched to overlap the stream's previous kernel (``_runtime.Kernel``); ``trace``:
    for a ``trace`` build, int64 ``[CTAs, TRACE_SLOTS]`` it fills (``TRACE_FIELDS``); ``packing``: the
    weight's, which ``run`` was built for (``x`` is ordered for its pairs)."""
    A, M, K = x.shape
    N = y.shape[-1]
    nt = fp4_decode.token_tiles(M)
    tiles = -(-N // config.rows)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    split, per = splits(config, tiles * A, K, sms)
    x = mma_order_x(x, nt, packing)
    partial = torch.empty(partial_floats(config, A, tiles, split, M, N, nt), dtype=torch.float32, device=x.device)
    counts = arrival_counts(x.device, A * tiles)
    run((tiles, A, split), (config.threads, 1, 1),
        [x, data, scale, bias, ids, y, partial, counts, M, N, K, per, x.stride(0), data.stride(0), data.stride(1),
         scale.stride(0), scale.stride(1), y.stride(0), y.stride(1), 0 if bias is None else bias.stride(0), trace],
        torch.cuda.current_stream(x.device).cuda_stream, shared_bytes(config, nt), dependent,
        (1, 1, split) if config.sums is Sums.CLUSTER else None)
    return y
