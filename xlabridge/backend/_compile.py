"""``xlabridge.compile``: ``torch.compile`` with the xlabridge backend and clear device errors.

Dynamo checks devices while it traces, before any backend runs, so a model on the XLA
device called with a CPU tensor fails inside Dynamo with a message about fake tensors.
The compiled callable returned here turns such failures, and the backend's own
``XlabridgeError``s that Dynamo wraps, into one ``XlabridgeError`` that names the argument.
It adds nothing to a call that succeeds: the inspection runs only after a failure.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch

from xlabridge import _optional
from xlabridge.backend import cache
from xlabridge.backend._options import BackendOptions
from xlabridge.errors import DeviceMismatchError, XlabridgeError

Compilable = TypeVar("Compilable", bound=Callable[..., Any])


def _xlabridge_error_in(exc: BaseException) -> XlabridgeError | None:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, XlabridgeError):
            return current
        seen.add(id(current))
        current = getattr(current, "inner_exception", None) or current.__cause__
    return None


def _named_arguments(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Iterator[tuple[str, Any]]:
    signature_of = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        bound = inspect.signature(signature_of).bind(*args, **kwargs)
        yield from bound.arguments.items()
    except (TypeError, ValueError):
        yield from ((f"positional argument {i}", a) for i, a in enumerate(args))
        yield from kwargs.items()


def _tensors(name: str, value: Any) -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        yield name, value
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _tensors(f"{name}[{index}]", item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _tensors(f"{name}[{key!r}]", item)


def device_mismatch(
    target: Callable[..., Any], args: tuple, kwargs: dict
) -> DeviceMismatchError | None:
    """The device problem in calling ``target(*args, **kwargs)`` on XLA, if there is one."""
    named = [
        (f"argument {tensor_name!r}", t)
        for name, value in _named_arguments(target, args, kwargs)
        for tensor_name, t in _tensors(name, value)
    ]
    if isinstance(target, torch.nn.Module):
        state = {}
        for name, tensor in (*target.named_parameters(), *target.named_buffers()):
            state.setdefault(tensor.device, (f"model tensor {name!r}", tensor))
        named.extend(state.values())
    named = [(n, t) for n, t in named if not (t.device.type == "cpu" and t.dim() == 0)]
    on_xla = [(n, t) for n, t in named if t.device.type == "xla"]
    elsewhere = [(n, t) for n, t in named if t.device.type != "xla"]
    if not on_xla or not elsewhere:
        return None
    (xla_name, xla_tensor), (other_name, other_tensor) = on_xla[0], elsewhere[0]
    return DeviceMismatchError(
        f"xlabridge: {other_name} is on {other_tensor.device}, but {xla_name} is on "
        f"{xla_tensor.device}. A compiled XLA graph takes every tensor from the XLA device: "
        f"move it there with .to(torch_xla.device()) before the call."
    )


def _clear_error_for(
    exc: Exception, target: Callable[..., Any], args: tuple, kwargs: dict
) -> XlabridgeError | None:
    try:
        return _xlabridge_error_in(exc) or device_mismatch(target, args, kwargs)
    except Exception:
        return None


def _raising_clear_errors(call: Callable[..., Any], target: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except Exception as exc:
            clear = _clear_error_for(exc, target, args, kwargs)
            if clear is None or clear is exc:
                raise
            raise clear from exc

    return run


def compile(
    model: Compilable,
    *,
    device: str = "auto",
    cache_dir: str | os.PathLike[str] | None = None,
    autocast_parity: bool = False,
    **torch_compile_kwargs: Any,
) -> Compilable:
    """``torch.compile(model, backend="xlabridge")``, with errors that name the bad argument.

    Args:
        model: an ``nn.Module`` or a function, as for ``torch.compile``.
        device: ``"auto"`` (XLA graphs through openxla, others through inductor) or ``"xla"``
            (require torch_xla and XLA tensors).
        cache_dir: a directory for the persistent XLA compilation cache, so that a later
            process loads compiled graphs instead of compiling them (see ``xlabridge.backend.cache``
            for where the XLA runtime can and cannot). Configured here, before the first XLA
            computation; ``None`` leaves it to ``XLABRIDGE_CACHE_DIR``.
        autocast_parity: register the autocast ops CUDA casts and XLA does not
            (``xlabridge.autocast.enable_parity``), here, before Dynamo traces anything, so
            the traced dtypes already follow the new policy.
        **torch_compile_kwargs: passed on to ``torch.compile`` (``fullgraph``, ``dynamic``, ...).
    """
    if not callable(model):
        raise TypeError(f"xlabridge.compile: 'model' must be an nn.Module or a function, got {type(model).__name__}")
    if "backend" in torch_compile_kwargs:
        raise TypeError("xlabridge.compile: 'backend' is always 'xlabridge'; use torch.compile for another backend")
    options = dict(torch_compile_kwargs.pop("options", None) or {})
    options["device"] = device
    if cache_dir is not None:
        options["cache_dir"] = str(cache_dir)
    if autocast_parity:
        options["autocast_parity"] = autocast_parity
    BackendOptions.from_mapping(options)
    if device == "xla":
        _optional.require("torch_xla", "xlabridge.compile(device='xla')")
    if cache_dir is not None:
        cache.configure(cache_dir)
    else:
        cache.configure_from_environment()
    if autocast_parity:
        from xlabridge.autocast import enable_parity

        enable_parity()
    compiled = torch.compile(model, backend="xlabridge", options=options, **torch_compile_kwargs)
    if isinstance(compiled, torch.nn.Module):
        compiled.forward = _raising_clear_errors(compiled.forward, model)
        return compiled
    return _raising_clear_errors(compiled, model)
