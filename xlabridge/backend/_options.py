"""The options the ``xlabridge`` backend takes, validated in one place.

``torch.compile(fn, backend="xlabridge", options={...})`` forwards ``options`` to the
backend; ``xlabridge.compile`` builds the same dictionary from its keyword arguments.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from xlabridge.backend.cache import validate_cache_dir

DEVICES = ("auto", "xla")


@dataclasses.dataclass(frozen=True)
class BackendOptions:
    """What a user can ask of the xlabridge backend.

    ``device``: ``"auto"`` compiles graphs on XLA devices through openxla and others through
    inductor; ``"xla"`` insists on XLA and reports graphs whose tensors are elsewhere.
    ``cache_dir``: the persistent XLA compilation cache's directory (see ``xlabridge.backend.cache``);
    ``None`` leaves it to the ``XLABRIDGE_CACHE_DIR`` environment variable.
    ``autocast_parity``: register the autocast ops CUDA casts and XLA does not, with CUDA's
    policy (``xlabridge.autocast.enable_parity``); opt-in, since it changes computed dtypes.
    """

    device: str = "auto"
    cache_dir: str | os.PathLike[str] | None = None
    autocast_parity: bool = False

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise ValueError(f"xlabridge option 'device' must be one of {DEVICES}, got {self.device!r}")
        if self.cache_dir is not None:
            validate_cache_dir(self.cache_dir)
        if not isinstance(self.autocast_parity, bool):
            raise TypeError(
                f"xlabridge option 'autocast_parity' must be a bool, got {type(self.autocast_parity).__name__}"
            )

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None) -> BackendOptions:
        """Parse ``torch.compile``'s ``options`` dict, rejecting keys xlabridge does not know."""
        if options is None:
            return cls()
        if not isinstance(options, Mapping):
            raise TypeError(f"xlabridge 'options' must be a dict, got {type(options).__name__}")
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(
                f"xlabridge backend got unknown option(s) {unknown}; expected keys among {sorted(known)}"
            )
        return cls(**options)
