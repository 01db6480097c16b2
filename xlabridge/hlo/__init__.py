"""How many kernels XLA makes of a function: the optimized HLO and its kernel count.

``kernel_count(fn, *args)`` traces ``fn`` on the XLA device (the lazy graph that both eager
torch_xla and ``torch.compile(backend="openxla")`` hand to XLA), compiles that graph with
torch_xla's own XLA, and counts the kernels of the optimized entry computation: each fusion,
each custom call, and each other operation that does work (a lone copy, reduce, sort...).
Parameters, constants, tuples and bitcasts are free and not counted; ``call`` wrappers (XLA:CPU
puts each parallel fusion in one) are looked through. An asynchronous operation counts once, at
its start (``copy-start``: XLA:TPU's prefetches into VMEM; ``all-reduce-start``...): its
``-done`` half only waits for it.

XLA reads its dump options once per process, when it is first configured, so the compilation
runs in a fresh Python process (``python -m xlabridge.hlo``, ``__main__.py``) with ``--xla_dump_to`` set: the
HLO is the one torch_xla compiles, with the same device type. That costs a few seconds.

``kernel_count(fn, *args, target="tpu:v5e")`` counts for a TPU instead: ``fn`` is traced on the
local XLA device as a TPU device would trace it (xlabridge's own ops take their TPU lowering,
``xlabridge.tpu._lowering``), and the graph is compiled by libtpu's compile-only client
(``xlabridge.tpu``); the report's ``tpu`` holds the full result (HBM, compile seconds, cost).

``parse_kernels(hlo_text)`` does the counting alone, for optimized HLO from anywhere (JAX's
``jit(f).lower(x).compile().as_text()``, an ``--xla_dump_to`` file).
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from xlabridge.tpu import _lowering
from xlabridge import _optional
from xlabridge._upstream import torch_xla as upstream_xla
from xlabridge.tpu._kernels import KernelReport, parse_kernels

__all__ = ["KernelReport", "kernel_count", "parse_kernels"]

def _output_tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = [getattr(value, field.name) for field in dataclasses.fields(value)]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [tensor for item in value for tensor in _output_tensors(item)]
    return []


def kernel_count(fn: Callable[..., Any], *args: Any, target: str | None = None, **kwargs: Any) -> KernelReport:
    """Compile ``fn(*args, **kwargs)`` for the XLA device and count the kernels XLA makes.

    Tensor arguments are moved to the XLA device first. ``fn`` returns tensors (or lists,
    tuples, dicts, dataclasses of them, such as an ``MXTensor``); the graph producing them is
    what gets compiled. ``target`` (``"tpu:v5e"``, ``"tpu:v6e:2x4"``...) compiles it for that
    TPU with libtpu instead of for the local device (``target`` is therefore not passed to
    ``fn``).
    """
    _optional.require("torch_xla", "xlabridge.hlo.kernel_count")
    import torch_xla.runtime as xr

    if target is None:
        proto = _traced_proto(fn, args, kwargs)
        return _compile_for_local_device(proto, xr.device_type())
    from xlabridge import tpu

    topology = tpu.resolve_target(target)
    with _lowering.override_lowering(_lowering.LoweringTarget.TPU, generation=topology.generation):
        proto = _traced_proto(fn, args, kwargs)
    result = tpu.compile_hlo_proto(proto, topology, name=getattr(fn, "__name__", "fn"))
    if result.memory is None:
        raise tpu.TpuCompileError(
            f"XLA:TPU could not fit the graph in {topology}'s HBM, so it has no kernels to count:\n"
            f"{result.out_of_memory}",
            xla_message=result.out_of_memory or "",
        )
    return KernelReport(count=result.kernel_count, kernels=result.kernels, hlo=result.hlo, tpu=result)


def _traced_proto(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """The HLO module proto of the lazy graph computing ``fn``'s outputs on the XLA device."""
    import torch
    import torch_xla

    device = torch_xla.device()
    moved = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]
    moved_kwargs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    torch_xla.sync()
    outputs = _output_tensors(fn(*moved, **moved_kwargs))
    if not outputs:
        raise ValueError("fn must return at least one tensor computed on the XLA device")
    return upstream_xla.tensors_hlo_proto(outputs)


def _compile_for_local_device(proto: bytes, device_type: str) -> KernelReport:
    with tempfile.TemporaryDirectory(prefix="xlabridge-hlo-") as workdir:
        proto_path = os.path.join(workdir, "module.pb")
        with open(proto_path, "wb") as f:
            f.write(proto)
        dump = os.path.join(workdir, "dump")
        env = dict(os.environ, PJRT_DEVICE=device_type)
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_dump_to={dump} --xla_dump_hlo_as_text".strip()
        done = subprocess.run(
            [sys.executable, "-m", "xlabridge.hlo", proto_path], env=env, capture_output=True, text=True, check=False
        )
        dumps = sorted(glob.glob(os.path.join(dump, "*after_optimizations.txt")), key=os.path.getmtime)
        if done.returncode != 0 or not dumps:
            raise RuntimeError(f"compiling the graph in a torch_xla worker failed:\n{done.stderr[-4000:]}")
        with open(dumps[-1]) as f:
            return parse_kernels(f.read())
