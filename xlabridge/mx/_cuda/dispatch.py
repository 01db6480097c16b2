"""Which CUDA decode kernel a configuration belongs to, for the callers that hold either kind."""

from __future__ import annotations

from types import ModuleType

from xlabridge.mx._cuda import fp4_decode, fp4_wgmma


def kernel_of(config: fp4_decode.Config | fp4_wgmma.Config) -> ModuleType:
    """The module whose kernel ``config`` configures: ``fp4_wgmma`` for its ``Config``, else ``fp4_decode``."""
    return fp4_wgmma if isinstance(config, fp4_wgmma.Config) else fp4_decode
