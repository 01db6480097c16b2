"""Decides where one Dynamo FX graph runs: through XLA (torch_xla), TorchTPU, or natively (inductor).

A graph runs on XLA when any tensor in it lives on an XLA device, as an input or created
inside it. Graphs that also hold CPU tensors go to XLA as well: openxla accepts them, and
xlabridge must accept whatever openxla does. A graph whose tensors are all on the CPU goes
to XLA too where torch_xla is installed, as openxla would take it: on an XLA machine that is
usually a model or input not moved to the device, which the diagnostics then report; without
torch_xla it goes to inductor. Graphs with CUDA tensors go to inductor.

On a TorchTPU machine (torch_tpu, torch 2.11 and later; torch_xla cannot be installed beside it)
a graph with a tensor on TorchTPU's ``tpu`` device goes to TorchTPU's ``backend="tpu"``, and so
does a graph whose tensors are all on the CPU where a TPU is present or where the diagnostics
stand in for one (``diagnostics._observe.hooks.torchtpu_stand_in``: no TPU, TorchTPU's programs run on CPU and
are reported, as ``backend="tpu"`` would compile them); without either it goes to inductor,
so the script also runs on a machine with neither.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from xlabridge import _optional


class Target(enum.Enum):
    XLA = "xla"
    TORCHTPU = "torchtpu"
    NATIVE = "native"


class Placement(enum.Enum):
    """Where a graph's tensors live."""

    XLA = "xla"
    """At least one tensor on an XLA device."""
    CPU_ONLY = "cpu-only"
    """Every tensor on the CPU."""
    TPU = "tpu"
    """At least one tensor on TorchTPU's ``tpu`` device."""
    OTHER = "other"
    """A tensor on another device (CUDA...), none on XLA or TorchTPU's ``tpu``."""


def tensors_in(value: Any) -> Iterable[torch.Tensor]:
    """The tensors in ``value``: itself, or those nested in its lists, tuples and dicts."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item)


_SOURCE_PREFIXES = (
    (re.compile(r"^L\['(?:self|fn)'\]"), "model"),
    (re.compile(r"^L\['args'\]\[(\d+)\]"), r"argument \1"),
    (re.compile(r"^L\['kwargs'\]\['(\w+)'\]"), r"argument '\1'"),
    (re.compile(r"^L\['(\w+)'\]"), r"argument '\1'"),
)


def input_name(node: torch.fx.Node) -> str:
    """A readable name for a graph input, such as ``argument 'x'`` or ``model['fc']['weight']``."""
    grapharg = node.meta.get("grapharg")
    source = getattr(grapharg, "source", None)
    if source is None:
        return str(node.target)
    name = str(source.name() if callable(source.name) else source.name)
    name = re.sub(r"\._(?:modules|parameters|buffers)\[", "[", name)
    for pattern, replacement in _SOURCE_PREFIXES:
        name, count = pattern.subn(replacement, name, count=1)
        if count:
            break
    return name


def describe_inputs(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> str:
    """A short phrase saying where a graph's tensor inputs live, for error messages."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    inputs = [
        (input_name(node), tensor)
        for node, value in zip(placeholders, example_inputs)
        for tensor in tensors_in(value)
    ]
    if not inputs:
        return "the graph has no tensor inputs"
    listed = ", ".join(f"{name} is on {t.device}" for name, t in inputs[:3])
    return listed + (f" (and {len(inputs) - 3} more)" if len(inputs) > 3 else "")


def placement(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Placement:
    """Where ``gm``'s tensors, inputs and intermediates, live."""
    tensors = [t for value in example_inputs for t in tensors_in(value)]
    tensors += [
        t
        for node in gm.graph.nodes
        if node.op != "placeholder"
        for t in tensors_in(node.meta.get("example_value"))
    ]
    devices = {t.device.type for t in tensors}
    if "xla" in devices:
        return Placement.XLA
    if "tpu" in devices:
        return Placement.TPU
    return Placement.CPU_ONLY if devices <= {"cpu"} else Placement.OTHER


def resolve_target(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *, torchtpu_for_cpu: Callable[[], bool] = lambda: False
) -> tuple[Target, Placement]:
    """Where ``gm`` runs, and where its tensors are (see the module's rule). ``torchtpu_for_cpu``:
    whether TorchTPU takes a graph whose tensors are all on the CPU (asked only where it is installed)."""
    where = placement(gm, example_inputs)
    if where is Placement.XLA or (where is Placement.CPU_ONLY and _optional.is_available("torch_xla")):
        return Target.XLA, where
    if where is Placement.TPU or (
        where is Placement.CPU_ONLY and _optional.is_available("torch_tpu") and torchtpu_for_cpu()
    ):
        return Target.TORCHTPU, where
    return Target.NATIVE, where
