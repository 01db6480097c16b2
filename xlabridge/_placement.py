"""Decides where one Dynamo FX graph runs: through XLA, or natively (inductor).

A graph runs on XLA when any tensor in it lives on an XLA device. Mixing an XLA
tensor with a tensor on another device cannot compile into one XLA graph, so that
is reported here, naming the user's inputs, before torch_xla fails deep inside its
bridge. A 0-dim CPU tensor is exempt: PyTorch lets it act as a scalar on any device.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from xlabridge.errors import DeviceMismatchError


class Target(enum.Enum):
    XLA = "xla"
    NATIVE = "native"


def _tensor_values(value: Any) -> Iterable[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensor_values(item)


def input_name(node: torch.fx.Node) -> str:
    """The user-facing name of a graph input, such as ``L['x']`` or ``L['self'].fc.weight``."""
    grapharg = node.meta.get("grapharg")
    source = getattr(grapharg, "source", None)
    if source is not None:
        name = source.name() if callable(source.name) else source.name
        return str(name).replace("._modules[", "[").replace("._parameters[", "[")
    return str(node.target)


def _is_scalar_cpu(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "cpu" and tensor.dim() == 0


def resolve_target(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Target:
    """Where ``gm`` must run; raises ``DeviceMismatchError`` for inputs that cannot share a graph."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    inputs: list[tuple[str, torch.Tensor]] = []
    for index, value in enumerate(example_inputs):
        node = placeholders[index] if index < len(placeholders) else None
        name = input_name(node) if node is not None else f"input {index}"
        inputs.extend((name, t) for t in _tensor_values(value))

    on_xla = [(name, t) for name, t in inputs if t.device.type == "xla"]
    if not on_xla:
        created_on_xla = any(
            t.device.type == "xla"
            for n in gm.graph.nodes
            if n.op != "placeholder"
            for t in _tensor_values(n.meta.get("example_value"))
        )
        return Target.XLA if created_on_xla else Target.NATIVE

    elsewhere = [
        (name, t) for name, t in inputs if t.device.type != "xla" and not _is_scalar_cpu(t)
    ]
    if elsewhere:
        xla_name, xla_tensor = on_xla[0]
        listed = ", ".join(f"{name} on {t.device}" for name, t in elsewhere[:4])
        more = f" and {len(elsewhere) - 4} more" if len(elsewhere) > 4 else ""
        raise DeviceMismatchError(
            f"xlabridge: one compiled graph mixes devices: {xla_name} is on {xla_tensor.device}, "
            f"but {listed}{more}. An XLA graph takes all its tensors from the XLA device: move "
            f"them there with .to(torch_xla.device()) (model and inputs alike) before calling "
            f"the compiled function."
        )
    return Target.XLA
