"""``backend="xlabridge"`` under TorchTPU gets what ``backend="tpu"`` gets by default: static shapes.

Where a TPU started, TorchTPU replaces ``torch.compile`` (``torch_tpu/_loader.py``,
``_init_device_impl``) by ``_default_tpu_compile``, which passes ``dynamic=False`` unless the caller
passed ``dynamic``, for its own backends only (``_is_tpu_backend``: ``"tpu"``, its default selector,
a ``TpuBackend``): the string ``"xlabridge"`` is none of them, and a backend cannot change what
``torch.compile`` was called with. Without this, a script whose batch varies would get automatic
dynamic shapes with ``"xlabridge"`` (a second shape recompiles the frame with the batch symbolic, and
TorchTPU compiles bucket programs) and static recompiles with ``"tpu"``: different programs.

So xlabridge applies the same default to the frames it hands to TorchTPU: when it compiles such a frame
for a ``torch.compile`` call that passed no ``dynamic``, with TorchTPU's ``torch.compile`` in place,
it notes the frame, and Dynamo's own compile callbacks (``torch._dynamo.callback_handler``, around
each frame compilation) set Dynamo's configuration as ``dynamic=False`` does
(``automatic_dynamic_shapes=False``, ``assume_static_by_default=True``) while that frame is
compiled again: its recompiles are static, as ``"tpu"``'s are. A first compilation is static either
way. Nothing of TorchTPU is patched.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from typing import Any

from xlabridge._upstream import torch as upstream_torch, torch_tpu as upstream_tpu

_FRAMES: set[str] = set()
"""Dynamo frame ids (``3`` of compile id ``3/1``) whose compilations are static by TorchTPU's default."""
_OPEN: dict[str, AbstractContextManager[Any]] = {}
_LOCK = threading.Lock()


def _compile_id(args: tuple[Any, ...]) -> tuple[str, str]:
    if args and hasattr(args[0], "compile_id"):
        trigger = getattr(getattr(args[0], "callback_trigger", None), "name", "DYNAMO")
        return str(args[0].compile_id), trigger
    return str(upstream_torch.current_compile_id()), "DYNAMO"


def _frame(compile_id: str) -> str:
    return compile_id.split("/")[0]


def _on_start(*args: Any) -> None:
    compile_id, trigger = _compile_id(args)
    if trigger == "DYNAMO" and _frame(compile_id) in _FRAMES and compile_id not in _OPEN:
        patch = upstream_torch.static_shapes()
        patch.__enter__()
        _OPEN[compile_id] = patch


def _on_end(*args: Any) -> None:
    compile_id, _ = _compile_id(args)
    patch = _OPEN.pop(compile_id, None)
    if patch is not None:
        patch.__exit__(None, None, None)


def _registered() -> bool:
    handler = upstream_torch.dynamo_callback_handler()
    return _on_start in handler.start_callbacks and _on_end in handler.end_callbacks


def apply_to_current_frame() -> bool:
    """Make the frame Dynamo compiles now static on its recompiles, where TorchTPU's ``torch.compile``
    is in place and the ``torch.compile`` call passed no ``dynamic``; whether it did."""
    if not upstream_tpu.tpu_compile_installed():
        return False
    if upstream_torch.compile_call_dynamic() is not None:  # the caller's own dynamic=, or not torch.compile
        return False
    compile_id = upstream_torch.current_compile_id()
    if compile_id is None:
        return False
    with _LOCK:
        if not _registered():
            # torch._dynamo.reset() clears the callbacks and numbers frames afresh: forget the old ones
            _FRAMES.clear()
            handler = upstream_torch.dynamo_callback_handler()
            handler.register_start_callback(_on_start)
            handler.register_end_callback(_on_end)
        _FRAMES.add(_frame(str(compile_id)))
    return True
