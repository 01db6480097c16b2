"""The pod view: each sharded graph compiled for a TPU slice by libtpu, per chip.

``compile_for_pod({"step": proto}, "v5e:2x4", num_partitions=8)`` compiles each pre-partition
graph (a torch_xla SPMD graph's HLO proto with its sharding annotations) for the topology with
the TPU view (``xlabridge.tpu.compile_program``: libtpu's compile-only client, in its worker process), partitioned over
``num_partitions`` devices: the mesh's device count, which must not exceed the topology's
devices. Each ``PodGraph`` holds what one device of the slice would hold and run: its HBM
(arguments, outputs, temporaries, code; whether it fits the chip), its kernels, the cost
model's estimate, and the collectives as XLA:TPU schedules them (``analyze`` of the optimized
TPU HLO). XLA:TPU partitions and schedules differently from XLA:CPU (it may gather a weight
where XLA:CPU reduces an activation, and combines collectives), so these are the TPU's, not
the CPU run's. A graph that does not fit a chip is no error but a finding: ``fits`` is False,
either because XLA:TPU refused it for HBM (``result.out_of_memory`` holds its message, and
there is no program) or because the program it compiled needs more than the chip holds
(``result.memory.total_bytes`` above ``capacity_bytes``). Every figure is labelled "compiled
for TPU <gen> by libtpu <ver>, not run".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from xlabridge.pod._graph import PartitionedGraph, analyze

__all__ = ["PodGraph", "compile_for_pod"]


@dataclasses.dataclass(frozen=True)
class PodGraph:
    """One sharded graph compiled for a TPU slice (figures per device)."""

    name: str
    result: Any
    """The ``xlabridge.tpu.TpuCompileResult``: HBM per device, kernels, cost, label."""
    graph: PartitionedGraph | None
    """Collectives and input shardings of the TPU program; None when XLA:TPU refused it."""

    @property
    def fits(self) -> bool:
        return self.result.fits

    @property
    def label(self) -> str:
        return self.result.label

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "result": self.result.to_dict(),
            "graph": self.graph.to_dict() if self.graph is not None else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PodGraph:
        from xlabridge.tpu import TpuCompileResult

        graph = data.get("graph")
        return cls(data["name"], TpuCompileResult.from_dict(data["result"]),
                   PartitionedGraph.from_dict(graph) if graph else None)


def compile_for_pod(
    graphs: Mapping[str, bytes], topology: str, *, num_partitions: int, compiler: Any = None
) -> list[PodGraph]:
    """Compile each named pre-partition HLO proto for ``topology`` over ``num_partitions`` devices.

    ``compiler``: an open ``xlabridge.tpu.TpuCompiler`` to reuse (its worker stays up); by
    default one is opened for these graphs and closed after.
    """
    from xlabridge import tpu

    if not isinstance(num_partitions, int) or num_partitions < 1:
        raise ValueError(f"num_partitions must be the mesh's device count (a positive int), got {num_partitions!r}")
    owned = compiler is None
    compiler = compiler if compiler is not None else tpu.TpuCompiler(topology)
    try:
        pod = []
        for name, proto in graphs.items():
            program = tpu.Program(name, proto, tpu.ProgramFormat.HLO_PROTO, num_partitions)
            result = tpu.compile_program(compiler, program, topology=topology)
            pod.append(PodGraph(name, result, analyze(result.hlo) if result.hlo else None))
        return pod
    finally:
        if owned:
            compiler.close()
