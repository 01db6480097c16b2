"""One partitioned XLA graph as data: its collectives and the shardings of its inputs.

``analyze(hlo_text, proto=None)`` is what a report keeps per SPMD graph: the module's name,
its partition count, its collectives (``xlabridge.pod._collectives``), per-kind totals, and the
entry parameters' shapes and shardings (which the causes table needs to tell a replicated
weight's gradient all-reduce from data-parallel reduction). It is plain data with a JSON round
trip, so a report can be rebuilt from a saved log and classified again by a newer table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from xlabridge.pod._hlo_proto import instruction_stacks
from xlabridge.pod._hlo_text import parse_module
from xlabridge.pod._collectives import Collective, CollectiveKind, CollectiveTotals, find_collectives, totals

__all__ = ["Parameter", "PartitionedGraph", "analyze"]


@dataclasses.dataclass(frozen=True)
class Parameter:
    """An entry parameter of the partitioned module: its per-device shape and its sharding."""

    number: int
    shape: str
    sharding: str

    @property
    def replicated(self) -> bool:
        return self.sharding == "{replicated}"

    @property
    def sharded(self) -> bool:
        return "devices=" in self.sharding


@dataclasses.dataclass(frozen=True)
class PartitionedGraph:
    name: str
    num_partitions: int
    collectives: tuple[Collective, ...]
    parameters: tuple[Parameter, ...]

    def totals(self) -> dict[CollectiveKind, CollectiveTotals]:
        return totals(self.collectives)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "num_partitions": self.num_partitions,
            "collectives": [collective.to_dict() for collective in self.collectives],
            "parameters": [dataclasses.asdict(parameter) for parameter in self.parameters],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PartitionedGraph:
        return cls(
            name=data["name"],
            num_partitions=data["num_partitions"],
            collectives=tuple(Collective.from_dict(c) for c in data["collectives"]),
            parameters=tuple(Parameter(**p) for p in data["parameters"]),
        )


def analyze(hlo_text: str, *, proto: bytes | None = None) -> PartitionedGraph:
    """The collectives and input shardings of a partitioned module's text.

    ``proto``: the same module as a serialized ``HloProto``/``HloModuleProto`` (an
    ``--xla_dump_hlo_as_proto`` file), for each collective's whole Python stack.
    """
    module = parse_module(hlo_text)
    entry = module.computations[module.entry]
    parameters = tuple(
        Parameter(
            number=int(instruction.literal),
            shape=instruction.shape,
            sharding=instruction.attributes.get("sharding", ""),
        )
        for instruction in entry.instructions
        if instruction.opcode == "parameter"
    )
    return PartitionedGraph(
        name=module.name,
        num_partitions=module.num_partitions,
        collectives=tuple(find_collectives(module, stacks=instruction_stacks(proto) if proto else None)),
        parameters=tuple(sorted(parameters, key=lambda p: p.number)),
    )
