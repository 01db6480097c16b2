"""Which slice: the smallest number of chips of a TPU generation whose per-chip HBM fits a program
whose batch is sharded over them (data parallelism), found by compiling it at each size.

The program comes as StableHLO lowered with its batch inputs sharded over one mesh axis of some
size (Shardy's ``sdy.mesh``: jax.export of a jit with ``NamedSharding``s, ``tpu._fx``). Its
global shapes do not depend on the mesh size, so ``with_mesh_size`` sets the size in the text
(the mesh and the module's partition count) and ``smallest_slice`` compiles it for N = 1, 2, 4,
... chips on the smallest known topology of the generation with that many, until one fits, the
batch does not split further, or the generation's largest known topology is reached. Every
figure is libtpu's compile-only client's: "compiled for TPU, not run".
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from xlabridge.tpu._topology import KNOWN_TOPOLOGIES, resolve_target

__all__ = ["SliceTry", "slice_sizes", "smallest_slice", "with_mesh_size"]


@dataclasses.dataclass(frozen=True)
class SliceTry:
    """One compile of the search: the program over ``devices`` devices of ``topology``."""

    devices: int
    topology: str
    fits: bool | None
    chips: int | None = None
    hbm_bytes: int | None = None
    capacity_bytes: int | None = None
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def with_mesh_size(text: str, axis: str, size: int) -> str:
    """``text`` with mesh axis ``axis`` of size ``size`` (1: the sharding annotations dropped to
    replication by a mesh of one device) and the module's partition count set to match."""
    mesh = re.compile(rf'(sdy\.mesh @\w+ = <\["{re.escape(axis)}"=)(\d+)(\]>)')
    attribute = re.compile(rf'(\{{name = "{re.escape(axis)}", size = )(\d+)( : i64\}})')
    partitions = re.compile(r"(mhlo\.num_partitions = )(\d+)( : i32)")
    if len(mesh.findall(text)) != 1:
        raise ValueError(f"the program must hold one Shardy mesh of the single axis {axis!r}")
    text = mesh.sub(rf"\g<1>{size}\g<3>", text)
    text = attribute.sub(rf"\g<1>{size}\g<3>", text)
    return partitions.sub(rf"\g<1>{size}\g<3>", text)


def slice_sizes(generation: str) -> list[tuple[int, str]]:
    """``(devices, topology)`` for N = 1, 2, 4, ... devices, each on the smallest known topology of
    ``generation`` with that many, up to its largest (Ironwood, v7, has a device per TensorCore,
    two per chip; the other generations one per chip)."""
    per_chip = 2 if generation == "v7" else 1
    topologies = sorted((resolve_target(name) for name in KNOWN_TOPOLOGIES if name.startswith(f"{generation}:")),
                        key=lambda t: t.chips)
    if not topologies:
        topologies = [resolve_target(generation)]
    out, count = [], 1
    while count <= topologies[-1].chips * per_chip:
        smallest = next(t for t in topologies if t.chips * per_chip >= count)
        out.append((count, smallest.name))
        count *= 2
    return out


def smallest_slice(compiler: Any, text: str, generation: str, *, axis: str, batch: int | None,
                   name: str = "step") -> tuple[list[SliceTry], str]:
    """Compile ``text`` for 1, 2, 4, ... chips of ``generation`` until it fits: the compiles, and why
    the search stopped without a fit ("" when one fits). ``axis`` empty: a program without a mesh,
    compiled for one chip only."""
    from xlabridge.tpu._view import Program, compile_row

    tried: list[SliceTry] = []
    for devices, topology in slice_sizes(generation):
        if devices > 1 and (not axis or not batch or batch % devices):
            split = "is not sharded" if not axis else f"of {batch} does not split over {devices} chips"
            return tried, f"the step does not fit one chip, and its batch {split}: data parallelism ends at " \
                f"{devices // 2}"
        module = with_mesh_size(text, axis, devices) if axis else text
        row = compile_row(compiler, Program(f"{name}-{devices}", module, _stablehlo(), devices), topology=topology)
        result = row.result
        if result is None:
            tried.append(SliceTry(devices, topology, None, error=row.error or ""))
            return tried, f"XLA:TPU did not compile the step over {devices} chips"
        memory = result.memory
        tried.append(SliceTry(devices, topology, bool(result.fits), result.chips,
                              memory.total_bytes if memory else None, memory.capacity_bytes if memory else None))
        if result.fits:
            return tried, ""
    return tried, f"the step does not fit up to {tried[-1].devices} chips, the largest {generation} topology known here"


def _stablehlo() -> Any:
    from xlabridge.tpu._view import ProgramFormat

    return ProgramFormat.STABLEHLO
