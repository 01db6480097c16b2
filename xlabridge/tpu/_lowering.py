"""Which lowering xlabridge picks for an op on an XLA device: the generic XLA one, or the TPU one.

Some xlabridge ops lower differently per XLA hardware (the MX cast: an XLA computation that any
XLA backend compiles, or a Mosaic kernel through ``tpu_custom_call`` on TPU). Their dispatch
asks ``lowering_for(tensor.device)``. That is ``TPU`` when the XLA device's hardware is a TPU,
and also while ``override_lowering(LoweringTarget.TPU)`` is active: ``xlabridge.hlo.kernel_count
(..., target="tpu:v5e")`` traces a function on the local XLA device (PJRT CPU, say) under that
override, so the graph handed to libtpu is the one a TPU device would have traced.

Only xlabridge's own lowerings follow this; torch_xla lowers its ops as it does for the local
device.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import functools
from collections.abc import Iterator

import torch

__all__ = ["LoweringTarget", "lowering_for", "lowering_generation", "override_lowering"]


class LoweringTarget(enum.Enum):
    """The lowering an op on an XLA device takes."""

    XLA = "xla"
    """Plain XLA operations, compiled by whichever XLA backend runs the graph (CPU, GPU, TPU)."""
    TPU = "tpu"
    """TPU-only lowerings where xlabridge has them (Mosaic kernels as ``tpu_custom_call``)."""


_override: contextvars.ContextVar[tuple[LoweringTarget, str | None] | None] = contextvars.ContextVar(
    "xlabridge_lowering_override", default=None
)


@contextlib.contextmanager
def override_lowering(target: LoweringTarget, *, generation: str | None = None) -> Iterator[None]:
    """Make ``lowering_for`` return ``target`` for every XLA device inside the block (nests).

    ``generation`` (``"v5e"``) names the TPU the traced graph is meant for, for lowerings that
    size themselves per chip (tiles fitting its VMEM); ``lowering_generation`` returns it.
    """
    if not isinstance(target, LoweringTarget):
        raise TypeError(f"override_lowering: target must be a LoweringTarget, got {target!r}")
    if generation is not None:
        from xlabridge.tpu._chips import chip_facts

        chip_facts(generation)  # a ValueError naming the known generations
    token = _override.set((target, generation))
    try:
        yield
    finally:
        _override.reset(token)


def lowering_for(device: torch.device | str) -> LoweringTarget:
    """The lowering for an op on XLA device ``device``: the override if one is active, else TPU
    when the device's hardware is a TPU, else XLA."""
    device = _xla_device(device, "lowering_for")
    override = _override.get()
    if override is not None:
        return override[0]
    return LoweringTarget.TPU if _hardware(str(device)) == "TPU" else LoweringTarget.XLA


def lowering_generation(device: torch.device | str) -> str | None:
    """The TPU generation (``"v5e"``) a TPU lowering on ``device`` is for, or ``None`` if unknown.

    Inside ``override_lowering(..., generation=...)`` that generation; on a TPU device, its chip
    (from torch_xla's device kind, matched against ``xlabridge.tpu._chips``); otherwise ``None``.
    """
    device = _xla_device(device, "lowering_generation")
    override = _override.get()
    if override is not None:
        return override[1]
    if _hardware(str(device)) != "TPU":
        return None
    return _generation_of_kind(_device_kind(str(device)))


def _xla_device(device: torch.device | str, caller: str) -> torch.device:
    device = torch.device(device)
    if device.type != "xla":
        raise ValueError(f"{caller}: device must be an XLA device, got {str(device)!r}")
    return device


def _generation_of_kind(kind: str) -> str | None:
    from xlabridge.tpu._chips import CHIPS

    return next((chip.generation for chip in CHIPS.values() if chip.device_kind == kind), None)


@functools.cache
def _device_kind(device: str) -> str:
    import torch_xla.core.xla_model as xm

    return xm.xla_device_kind(device)


@functools.cache
def _hardware(device: str) -> str:
    # An XLA device's hardware does not change within a process; the lookup goes through
    # torch_xla's runtime, so it is done once per device (dispatch asks on every op).
    import torch_xla.core.xla_model as xm

    return xm.xla_device_hw(device)
