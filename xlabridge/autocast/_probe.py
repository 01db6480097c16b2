"""Read an op's autocast policy off the dispatcher by running its Autocast kernel.

The dispatcher does not record which ``CastPolicy`` a kernel was instantiated with (its
dumps give only file:line), so the policy is observed instead: the op's kernel for one
Autocast key is called directly (``redispatch`` to that key alone) with placeholder tensors
on the key's device. The kernel casts them and calls the op again below the Autocast key;
that inner call lands in ``_Placeholder.__torch_dispatch__``, which records the dtypes the
kernel chose and stops. Nothing is computed, so no op needs valid shapes, no device needs
to exist (a placeholder on "cuda" or "xla" is metadata only), and every kernel written
with torch's ``WrapFunction`` templates, or by hand, is classified the same way.

Three probes tell the policies apart: all float32 inputs (lower precision casts them
down), all lower-precision inputs (fp32 policies cast them up or set ``dtype=float32``),
and mixed inputs (promote casts all to the widest). A kernel that changes nothing is
"none"; one that raises the "unsafe to autocast" error is "banned".
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from xlabridge._upstream import torch as upstream_torch
from xlabridge.autocast._ops import Policy

if TYPE_CHECKING:
    from xlabridge._upstream.torch import Argument, OpOverload

# The device each Autocast key casts tensors of, as torch's is_autocast_eligible defines it.
KEY_DEVICES = {"AutocastCUDA": "cuda", "AutocastCPU": "cpu", "AutocastXLA": "xla"}
# PrivateUse1's device is named by its backend: "privateuseone", or "tpu" once TorchTPU renames it.
PRIVATEUSE1_KEY = "AutocastPrivateUse1"


def key_device(key: str) -> str:
    """The device type whose tensors the Autocast ``key`` casts."""
    if key == PRIVATEUSE1_KEY:
        return upstream_torch.privateuse1_backend_name()
    return KEY_DEVICES[key]

_CASTS = ("aten::to.dtype", "aten::_to_copy", "aten::to.dtype_layout", "aten::to.device")
_BANNED_MARK = "unsafe to autocast"


class _Stop(Exception):
    """Raised from the placeholder's dispatch once the inner call has been recorded."""


@dataclasses.dataclass
class _Inner:
    """What the Autocast kernel passed on: float tensor dtypes, and a ``dtype`` argument."""

    dtypes: list[torch.dtype]
    dtype_arg: torch.dtype | None


class _Placeholder(torch.Tensor):
    """A data-less tensor with a device and dtype; any op other than a cast ends the probe."""

    recorded: list[_Inner] = []

    @staticmethod
    def __new__(cls, dtype: torch.dtype, device: str) -> _Placeholder:
        return upstream_torch.make_wrapper_subclass(cls, (2, 2), dtype=dtype, device=device)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        kwargs = kwargs or {}
        if func.name() in _CASTS:
            source = args[0]
            dtype = kwargs.get("dtype", args[1] if len(args) > 1 and isinstance(args[1], torch.dtype) else None)
            return _Placeholder(dtype or source.dtype, source.device.type)
        flat = list(_flatten((args, kwargs)))
        dtypes = [t.dtype for t in flat if isinstance(t, torch.Tensor) and t.dtype.is_floating_point]
        dtype_arg = kwargs.get("dtype")
        if dtype_arg is None:
            names = [a.name for a in upstream_torch.op_schema(func).arguments]
            if "dtype" in names and names.index("dtype") < len(args):
                dtype_arg = args[names.index("dtype")]
        cls.recorded.append(_Inner(dtypes, dtype_arg if isinstance(dtype_arg, torch.dtype) else None))
        raise _Stop


def _flatten(value: Any) -> Iterator[Any]:
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _flatten(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _flatten(item)
    else:
        yield value


def _op_overload(qualified: str) -> OpOverload:
    namespace, _, rest = qualified.partition("::")
    name, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, namespace), name), overload or "default")


def _is_dimname(arg: Argument) -> bool:
    """Python's view of a schema spells ``Dimname`` as ``str``; in aten only dimension names are called "dim"."""
    return arg.name == "dim" and str(arg.type) in ("str", "List[str]")


def _placeholder_value(arg: Argument, make: Callable[[], _Placeholder], device: str) -> Any:
    """A value of ``arg``'s type: placeholders for tensors, small constants otherwise."""
    text = str(arg.type)
    if text == "List[Optional[Tensor]]":
        return [_Placeholder(torch.int64, device)]  # index lists hold integer tensors
    if "Tensor" in text:
        if text.startswith("List"):
            return [make(), make()]
        return make()
    if text.startswith("Optional"):
        return None
    if _is_dimname(arg):
        return ["dimname::a"] if text.startswith("List") else "dimname::a"
    if text.startswith("List[int]") or text.startswith("List[SymInt]"):
        return [1]
    if text.startswith("List[float]"):
        return [1.0]
    if text.startswith("List[bool]"):
        return [False]
    return {"int": 1, "SymInt": 1, "float": 1.0, "number": 1.0, "bool": False, "str": "fro"}.get(text)


def _call_kernel(op: OpOverload, key: str, dtypes: tuple[torch.dtype, ...]) -> _Inner | str:
    """Run ``op``'s kernel for ``key`` on placeholders; the inner call it makes, or the error it raised.

    The first placeholder tensor gets ``dtypes[0]``, the next ``dtypes[1]`` and so on, the
    last dtype repeating.
    """
    device = key_device(key)
    made = [0]

    def make() -> _Placeholder:
        made[0] += 1
        return _Placeholder(dtypes[min(made[0], len(dtypes)) - 1], device)

    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for arg in upstream_torch.op_schema(op).arguments:
        if arg.has_default_value():
            continue
        value = _placeholder_value(arg, make, device)
        if arg.kwarg_only:
            kwargs[arg.name] = value
        else:
            args.append(value)
    _Placeholder.recorded = []
    keyset = upstream_torch.dispatch_key_set(key)
    try:
        with upstream_torch.below_autograd():
            op.redispatch(keyset, *args, **kwargs)
    except _Stop:
        pass
    except Exception as error:  # noqa: BLE001 - any failure is reported as the probe's finding
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    if not _Placeholder.recorded:
        return "the kernel returned without calling the op"
    return _Placeholder.recorded[0]


def _count_tensors(op: OpOverload) -> int:
    count = 0
    for arg in upstream_torch.op_schema(op).arguments:
        if arg.has_default_value():
            continue
        text = str(arg.type)
        if "Tensor" in text:
            count += 2 if text.startswith("List") else 1
    return count


@dataclasses.dataclass(frozen=True)
class Finding:
    """An op's policy on one Autocast key, and why it was classified so."""

    policy: Policy
    detail: str = ""


def registered_ops(key: str) -> frozenset[str]:
    """Ops with a kernel of their own (fallthrough or not) for ``key``, as the dispatcher lists them."""
    return frozenset(upstream_torch.dispatch_registrations(key))


def has_kernel(op: str, key: str) -> bool:
    """Whether ``op`` has a kernel of its own for ``key`` (the check done before registering)."""
    return bool(upstream_torch.dispatch_has_kernel(op, key))


def probe(op: str, key: str) -> Finding:
    """The policy the dispatcher applies to ``op`` under ``key``, observed by running its kernel."""
    if key not in KEY_DEVICES and key != PRIVATEUSE1_KEY:
        raise ValueError(f"probe: 'key' must be one of {sorted([*KEY_DEVICES, PRIVATEUSE1_KEY])}, got {key!r}")
    return _probe_cached(op, key)


def invalidate() -> None:
    """Forget cached findings; called after xlabridge registers or removes kernels."""
    _probe_cached.cache_clear()


@functools.lru_cache(maxsize=4096)
def _probe_cached(op: str, key: str) -> Finding:
    if not has_kernel(op, key):
        return Finding(Policy.NONE, "no kernel for this key (the key's fallthrough applies)")
    if upstream_torch.dispatch_kernel_is_fallthrough(op, key):
        return Finding(Policy.NONE, "fallthrough kernel")
    overload = _op_overload(op)
    device = key_device(key)
    low = torch.get_autocast_dtype(device)
    full = _call_kernel(overload, key, (torch.float32,))
    lowered = _call_kernel(overload, key, (low,))
    for result in (full, lowered):
        if isinstance(result, str):
            if _BANNED_MARK in result:
                return Finding(Policy.BANNED, result)
            return Finding(Policy.UNKNOWN, result)
    assert isinstance(full, _Inner) and isinstance(lowered, _Inner)
    if full.dtypes and all(d == low for d in full.dtypes):
        return Finding(Policy.LOWER_PRECISION, f"float32 inputs reach the op as {low}")
    if (lowered.dtypes and all(d == torch.float32 for d in lowered.dtypes)) or lowered.dtype_arg == torch.float32:
        how = "dtype=float32 is passed on" if lowered.dtype_arg == torch.float32 else "inputs are cast to float32"
        return Finding(Policy.FP32, f"{low} inputs: {how}")
    if _count_tensors(overload) >= 2:
        mixed = _call_kernel(overload, key, (torch.float32, low))
        if isinstance(mixed, _Inner) and mixed.dtypes and all(d == torch.float32 for d in mixed.dtypes):
            return Finding(Policy.PROMOTE, f"mixed float32/{low} inputs are all cast to float32")
    return Finding(Policy.NONE, "the kernel passes dtypes through unchanged")
