"""``x`` put in the order a decode kernel reads it, by one launch of ``x_order.cu`` (NVRTC, for the
device's architecture): ``fp4_wgmma.mma_order_x``'s and ``fp4_decode.paired_x``'s layouts, which
those functions give in PyTorch (the reference, and the path off a GPU), where the permute is a fill
and a strided copy, two launches; this is one, which reads ``x`` once and writes each output in
16-byte pieces, launched to overlap the kernel before it."""

from __future__ import annotations

import enum
import functools
from pathlib import Path

import torch

from xlabridge.mx._cuda import COMMON, _runtime

SOURCE = Path(__file__).with_name("x_order.cu")


class Layout(enum.IntEnum):
    """Which kernel's order (``x_order.cu``'s ``LAYOUT``)."""

    WGMMA = 0
    """``fp4_wgmma.mma_order_x``'s: ``[A, spans * nt * 1024]``, tokens padded to ``8 nt``."""
    PAIRED = 1
    """``fp4_decode.paired_x``'s: ``[A, M, spans * 128]``."""
    WGMMA_PACKED = 2
    """``fp4_wgmma.mma_order_x``'s for a ``Packing.DECODE`` weight (pairs of consecutive elements,
    words transposed in whole spans)."""


def _name(layout: Layout) -> str:
    return f"mx_x_order_{layout.name.lower()}"


def binary(layout: Layout, capability: tuple[int, int], cached: bool = True) -> bytes:
    """The kernel's binary for ``sm_<capability>``: from ``_runtime``'s disk cache or NVRTC (``cached``)."""
    name = _name(layout)
    build = _runtime.cached_cubin if cached else _runtime.compile_cubin
    options = [f"-DLAYOUT={int(layout)}", f"-DKERNEL={name}", "-DPREFETCH=0"]
    return build(COMMON.read_text() + "\n" + SOURCE.read_text(), name, f"{capability[0]}{capability[1]}", options)


@functools.cache
def kernel(layout: Layout, device_index: int) -> _runtime.Kernel:
    """The kernel loaded on that device."""
    code = binary(layout, torch.cuda.get_device_capability(device_index))
    return _runtime.on_device(device_index, lambda: _runtime.Kernel(code, _name(layout)))


def order(x: torch.Tensor, layout: Layout, nt: int = 8) -> torch.Tensor:
    """``x`` (``[A, M, K]`` bfloat16 on a GPU of compute capability 9.0 or newer, ``K`` a multiple of
    32, rows contiguous and 16-byte aligned: a decode kernel's operand) in ``layout``'s order
    (``nt``: the tiles of 8 tokens ``Layout.WGMMA`` pads ``M`` to)."""
    A, M, K = x.shape
    spans = -(-K // 128)
    if layout in (Layout.WGMMA, Layout.WGMMA_PACKED):
        if M > 8 * nt:
            raise ValueError(f"x_order.order: x has {M} rows, more than nt={nt} tiles of 8")
        out, tiles = torch.empty(A, spans * nt * 1024, dtype=x.dtype, device=x.device), nt
    else:
        out, tiles = torch.empty(A, M, spans * 128, dtype=x.dtype, device=x.device), -(-M // 8)
    if out.numel():
        kernel(layout, x.device.index or 0)(
            (spans, A, tiles), (128, 1, 1), [x, out, M, K, x.stride(0), x.stride(1), spans, nt],
            torch.cuda.current_stream(x.device).cuda_stream, 0, True)
    return out
