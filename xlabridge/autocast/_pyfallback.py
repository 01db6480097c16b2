"""The same AutocastXLA kernels in pure Python, through ``torch.library``.

Used only where the C++ extension cannot be built (no compiler). Each kernel does what
torch's ``WrapFunction`` does for its ``CastPolicy``: exclude AutocastXLA, cast eligible
inputs (floating, non-double tensors on an XLA device) and call the op again. The one
difference is that casts of fp32 weights are not cached across calls (the C++ cache is not
reachable from Python); under lazy tracing XLA merges the repeated converts, so the numbers
are the same and only tracing is slower (``tools/bench/autocast_dispatch.py`` measures it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from xlabridge._upstream import torch as upstream_torch
from xlabridge.autocast._ops import CastPolicy, OpSpec

if TYPE_CHECKING:
    from xlabridge._upstream.torch import OpOverload

KEY = "AutocastXLA"


def _op(qualified: str) -> OpOverload:
    name, _, overload = qualified[len("aten::") :].partition(".")
    return getattr(getattr(torch.ops.aten, name), overload or "default")


def _eligible(value: Any) -> bool:
    return (
        isinstance(value, torch.Tensor)
        and value.device.type == "xla"
        and value.is_floating_point()
        and value.dtype != torch.float64
    )


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if _eligible(value):
        return value.to(dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(item, dtype) for item in value)
    return value


def _eligible_dtypes(values: Any) -> list[torch.dtype]:
    found: list[torch.dtype] = []
    for value in values:
        if isinstance(value, (list, tuple)):
            found.extend(_eligible_dtypes(value))
        elif _eligible(value):
            found.append(value.dtype)
    return found


def _promoted(values: Any, low: torch.dtype) -> torch.dtype:
    result = low
    for dtype in _eligible_dtypes(values):
        if dtype == torch.float32:
            result = torch.float32
        elif dtype != low:
            raise RuntimeError(f"Unexpected floating ScalarType {dtype} in autocast promote (autocast dtype {low})")
    return result


def _with_defaults(op: OpOverload, args: tuple) -> list:
    """Positional arguments padded with the schema's defaults, for calling another overload."""
    positional = [a for a in upstream_torch.op_schema(op).arguments if not a.kwarg_only]
    return list(args) + [a.default_value for a in positional[len(args) :]]


def make_kernel(spec: OpSpec) -> Callable[..., Any]:
    """A Python AutocastXLA kernel for ``spec``."""
    op = _op(spec.name)
    redispatch = _op(spec.redispatch or spec.name)
    keyset = upstream_torch.dispatch_key_set(KEY)
    names = [a.name for a in upstream_torch.op_schema(op).arguments if not a.kwarg_only]
    dtype_index = names.index("dtype") if "dtype" in names else None

    def kernel(*args: Any, **kwargs: Any) -> Any:
        with upstream_torch.excluding_dispatch_keys(keyset):
            low = torch.get_autocast_dtype("xla")
            if spec.cast is CastPolicy.lower_precision_fp:
                return op(*_cast(args, low), **_cast(kwargs, low))
            if spec.cast is CastPolicy.fp32:
                return op(*_cast(args, torch.float32), **_cast(kwargs, torch.float32))
            if spec.cast is CastPolicy.promote:
                to = _promoted(list(args) + list(kwargs.values()), low)
                return op(*_cast(args, to), **_cast(kwargs, to))
            if not (args and _eligible(args[0])):
                return op(*args, **kwargs)
            if spec.cast is CastPolicy.fp32_append_dtype:
                return redispatch(*_with_defaults(op, args), **kwargs, dtype=torch.float32)
            if dtype_index is not None and dtype_index < len(args):
                if args[dtype_index] is None:
                    args = args[:dtype_index] + (torch.float32,) + args[dtype_index + 1 :]
            elif kwargs.get("dtype") is None:
                kwargs = {**kwargs, "dtype": torch.float32}
            return op(*args, **kwargs)

    kernel.__name__ = f"xlabridge_autocast_{spec.base}"
    return kernel


class PythonRegistrar:
    """Registers Python kernels, one ``torch.library.Library`` per op so each can be removed."""

    backend = "python"

    def __init__(self) -> None:
        self._libraries: dict[str, torch.library.Library] = {}

    def register(self, specs: list[OpSpec]) -> list[str]:
        """Register ``specs`` not registered here yet; the names registered."""
        added = []
        for spec in specs:
            if spec.name in self._libraries:
                continue
            library = torch.library.Library("aten", "IMPL")
            library.impl(spec.name[len("aten::") :], make_kernel(spec), KEY)
            self._libraries[spec.name] = library
            added.append(spec.name)
        return added

    def unregister(self, names: list[str]) -> None:
        """Remove the registrations made here for ``names``."""
        for name in names:
            library = self._libraries.pop(name, None)
            if library is not None:
                upstream_torch.destroy_library(library)
