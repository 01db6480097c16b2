"""The arrival counters of split-K launches, one buffer per device, shared by every kernel that
counts its CTAs in per tile and leaves the counts at zero (the Triton matmul's, ``fp4_wgmma``'s)."""

from __future__ import annotations

import torch

_COUNTS: dict[torch.device, torch.Tensor] = {}


def arrival_counts(device: torch.device, count: int) -> torch.Tensor:
    """At least ``count`` zeroed counters on ``device``. One buffer per device, so split-K launches on
    one device must not run concurrently on several streams."""
    counts = _COUNTS.get(device)
    if counts is None or counts.numel() < count:
        counts = _COUNTS[device] = torch.zeros(max(count, 4096), dtype=torch.int32, device=device)
    return counts
