"""Autocast on XLA devices: einsum in the bf16 list, an audit, and opt-in parity with CUDA.

``import xlabridge`` calls ``install()``: once torch_xla is loaded (now, or whenever it is
imported later), einsum gets an AutocastXLA lower-precision kernel if torch_xla lacks one
(releases before mid-2025). torch_xla is never imported for this, and nothing is
registered where torch_xla already has the kernel.

``audit()`` lists every op in the CUDA, CPU and XLA autocast lists with its policy on each,
read from the dispatcher. ``enable_parity()`` (opt-in: it changes the dtypes models compute
in) registers the ops CUDA casts and XLA does not, with CUDA's policy, except the TPU
exceptions documented in ``TPU_EXCEPTIONS``.

Kernels are C++ (``csrc/autocast``, built on first need and cached under
``~/.cache/xlabridge``); where no compiler works, a warning and Python kernels.
"""

from __future__ import annotations

from xlabridge.autocast._audit import AuditReport, AuditRow, audit
from xlabridge.autocast._ops import DEFAULT_SPECS, NOT_APPLICABLE, PARITY_SPECS, TPU_EXCEPTIONS, OpSpec, Policy
from xlabridge.autocast._registration import (
    ParityResult,
    disable_parity,
    enable_parity,
    ensure_einsum,
    registered_by_xlabridge,
)


def install() -> None:
    """Make sure einsum is in the AutocastXLA lower-precision list, now or when torch_xla loads.

    Cheap (no torch_xla import, no build unless torch_xla lacks einsum) and never raises:
    a failure becomes a ``RuntimeWarning``, so ``import xlabridge`` always succeeds.
    """
    import warnings

    from xlabridge import _optional
    from xlabridge._upstream import imports as _hook
    from xlabridge.autocast import _registration

    try:
        if _registration.torch_xla_loaded():
            ensure_einsum()
        elif _optional.is_available("torch_xla"):
            _hook.when_imported("torch_xla", lambda module: ensure_einsum())
    except Exception as error:  # noqa: BLE001 - import must not fail
        warnings.warn(
            f"xlabridge: could not add einsum to the AutocastXLA list: {type(error).__name__}: {error}",
            RuntimeWarning,
            stacklevel=2,
        )


__all__ = [
    "DEFAULT_SPECS",
    "NOT_APPLICABLE",
    "PARITY_SPECS",
    "TPU_EXCEPTIONS",
    "AuditReport",
    "AuditRow",
    "OpSpec",
    "ParityResult",
    "Policy",
    "audit",
    "disable_parity",
    "enable_parity",
    "ensure_einsum",
    "install",
    "registered_by_xlabridge",
]
