"""Modules XLA compiled, as text and proto: from an ``--xla_dump_to`` directory or a worker.

``XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_as_text --xla_dump_hlo_as_proto"`` (read once,
when XLA starts) makes XLA write every module it compiles, after its passes: for an SPMD graph
the partitioned program each device runs, with its collectives: exactly what the run executed.
It costs the file writes at each compilation (XLA:CPU adds its LLVM IR and object files), and
nothing per step.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from xlabridge.pod.graph import PartitionedGraph, analyze

__all__ = ["CompiledModule", "read_dump"]

_OPTIMIZED = re.compile(r"^module_(?P<id>\d+)\.(?P<name>.+)\.(?:\w+_)?after_optimizations\.txt$")


@dataclasses.dataclass(frozen=True)
class CompiledModule:
    """One module as XLA compiled it: the optimized text and, where written, its proto."""

    name: str
    text: str
    proto: bytes | None = None
    module_id: int = 0
    """XLA's id of the module in its dump (compilation order within one process)."""

    def analyze(self) -> PartitionedGraph:
        """Its collectives and input shardings (with Python stacks when the proto is here)."""
        return analyze(self.text, proto=self.proto)


def read_dump(directory: str | Path) -> list[CompiledModule]:
    """Every optimized module of an XLA dump directory, in compilation order."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"no XLA dump directory at {directory} (was --xla_dump_to set before XLA started?)")
    modules = []
    for path in directory.iterdir():
        match = _OPTIMIZED.match(path.name)
        if not match:
            continue
        proto_path = path.with_name(path.name[: -len(".txt")] + ".hlo.pb")
        modules.append(
            CompiledModule(
                name=match.group("name"),
                text=path.read_text(),
                proto=proto_path.read_bytes() if proto_path.exists() else None,
                module_id=int(match.group("id")),
            )
        )
    return sorted(modules, key=lambda module: module.module_id)
