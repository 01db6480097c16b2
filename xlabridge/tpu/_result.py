"""What compiling a graph for a TPU topology gives: kernels, HBM, cost, the optimized HLO.

Every figure comes from libtpu's compile of the graph on this machine (nothing runs on a TPU),
and ``label`` says so. For a graph partitioned over several devices (``devices > 1``) the
figures are per device: XLA compiles one SPMD program that each device runs on its shard.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from xlabridge.tpu._chips import CHIPS

__all__ = ["SCHEMA", "HbmUsage", "TpuCompileResult", "TpuFinding", "TpuFindingKind"]

SCHEMA = "xlabridge.tpu-compile/1"

COST_MODEL_NOTE = (
    "XLA's cost-analysis figure (optimal_seconds): a sum over the program's operations at rates "
    "fixed inside libtpu; libtpu 0.0.23 gives the same value for v4, v5e, v5p and v6e (about "
    "317 GB/s and 23 TFLOP/s, not the chip's), so it ranks graphs but does not predict a step "
    "time. It counts each custom call of the program's entry it cannot cost as -1 s (and -1 flop, -1 "
    "byte): for such a program the figure is the rest's, those -1s taken back out, and ``uncosted`` names "
    "what was left out; None where the cost model gave no figure"
)


class TpuFindingKind(str, enum.Enum):
    """What a finding is about (its ``kind`` in a report's findings)."""

    PADDING = "tpu-padding"
    """A dimension that XLA:TPU's tiles pad."""
    PRECISION = "tpu-f32-matmul"
    """float32 matmuls or convolutions on the MXU."""
    COPY = "tpu-copy"
    """Layout copies and transposes run as kernels of their own."""
    HBM = "tpu-hbm"
    """A program near or over one device's HBM, and its largest arrays."""
    UNCOSTED = "tpu-uncosted"
    """Custom calls or host transfers the cost model cannot cost."""


@dataclasses.dataclass(frozen=True)
class TpuFinding:
    """One thing to fix, read from a compiled TPU program (compiled, not run)."""

    kind: TpuFindingKind
    message: str
    """What it is, with its figures, and what to do."""
    cost_model_seconds: float | None
    """The cost model's seconds apportioned to it (see the module docstring); None: no share of
    the program's flops or bytes, or a program the cost model has no figure for."""
    bytes: int = 0
    """Padding bytes, bytes of the f32 matmuls' operands and results, bytes copied, the largest
    arrays' bytes or the uncosted instructions' result bytes."""
    flops: float = 0.0
    """MXU work of the padding, or the f32 matmuls' flops."""
    count: int = 1
    """Arrays padded, matmuls, copies, arrays listed or instructions uncosted."""
    instruction: str = ""
    """The HLO instruction of its largest instance (a fusion's, a matmul's, an array's name)."""
    op_name: str = ""
    """That instruction's HLO metadata ``op_name`` (``aten__mm``)."""
    source_file: str = ""
    source_line: int = 0
    detail: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False)
    """Kind-specific figures (padding: ``size``, ``padded``, ``tile``, ``smaller``, ``larger``)."""

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "kind": self.kind.value}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TpuFinding:
        values = {f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data}
        values["kind"] = TpuFindingKind(values["kind"])
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class HbmUsage:
    """HBM one device needs for the program, from the executable's compiled memory statistics.

    ``total_bytes`` is the rule used for "fits": arguments, plus outputs that do not reuse an
    argument's buffer (``alias_bytes`` are outputs written in place of a donated argument),
    plus temporaries (the peak of XLA's packed temporary allocation), plus the generated code.
    All of them are live while the program runs, so the sum bounds what the device must hold.
    ``capacity_bytes`` is one device's HBM: the chip's, or half of it where the topology makes
    each of a chip's two TensorCores a device (libtpu's compile-only v4 topologies do).
    """

    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int
    generated_code_bytes: int
    capacity_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes + self.generated_code_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "total_bytes": self.total_bytes, "fits": self.fits}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HbmUsage:
        return cls(**{field.name: data[field.name] for field in dataclasses.fields(cls)})


@dataclasses.dataclass(frozen=True)
class TpuCompileResult:
    """One graph compiled by libtpu for a TPU topology (see the module docstring)."""

    name: str
    topology: str
    generation: str
    device_kind: str
    devices: int
    """Devices the program is partitioned over (``num_partitions``)."""
    chips: int
    """Chips those devices sit on."""
    libtpu_version: str
    jax_version: str
    compile_seconds: float
    """Wall time of libtpu's compile call, measured in the worker."""
    kernels: tuple[str, ...]
    """``xlabridge.hlo.parse_kernels`` of the optimized HLO; empty when XLA ran out of HBM."""
    memory: HbmUsage | None
    """None when XLA refused the program for HBM (``out_of_memory`` says by how much)."""
    out_of_memory: str | None
    """XLA:TPU's message when the program does not fit the device's HBM, else None."""
    flops: float | None
    transcendentals: float | None
    bytes_accessed: float | None
    """XLA's cost analysis of the optimized program; None where it gave none. A custom call's cost
    is unknown to it (a Mosaic kernel adds nothing; others count -1 each)."""
    cost_model_seconds: float | None
    """See ``COST_MODEL_NOTE``."""
    hlo: str
    """The optimized TPU HLO module text (empty when XLA ran out of HBM)."""
    uncosted: tuple[str, ...] = ()
    """Custom calls the cost model could not cost (one target per call), left out of the cost figures."""
    findings: tuple[TpuFinding, ...] = ()
    """What to fix for the TPU, read from ``hlo`` (``xlabridge.tpu.findings``), costliest first."""

    @property
    def kernel_count(self) -> int:
        return len(self.kernels)

    @property
    def fits(self) -> bool:
        """Whether the program fits one device's HBM (XLA compiled it, and ``memory.fits``)."""
        return self.memory is not None and self.memory.fits

    @property
    def hbm_seconds(self) -> float | None:
        """``bytes_accessed`` at the chip's HBM bandwidth: the time the cost model's byte count
        takes to stream once, a floor for memory-bound programs (not a prediction)."""
        if self.bytes_accessed is None or self.bytes_accessed < 0:
            return None
        return self.bytes_accessed / CHIPS[self.generation].hbm_bandwidth_bytes_per_s

    @property
    def label(self) -> str:
        chips = f"{self.chips} chip" + ("s" if self.chips != 1 else "")
        return (
            f"compiled for TPU {self.generation} ({self.topology}, {chips}) "
            f"by libtpu {self.libtpu_version}, not run"
        )

    def __str__(self) -> str:
        if self.memory is None:
            return f"{self.name}: does not fit HBM ({self.label})"
        return (
            f"{self.name}: {self.kernel_count} kernel(s), HBM {self.memory.total_bytes / 2**20:.1f} MiB of "
            f"{self.memory.capacity_bytes / 2**30:.0f} GiB, compile {self.compile_seconds:.2f} s ({self.label})"
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (``from_dict`` reads it back)."""
        data = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        data["kernels"] = list(self.kernels)
        data["uncosted"] = list(self.uncosted)
        data["findings"] = [f.to_dict() for f in self.findings]
        data["memory"] = self.memory.to_dict() if self.memory is not None else None
        return {
            "schema": SCHEMA,
            **data,
            "kernel_count": self.kernel_count,
            "fits": self.fits,
            "hbm_seconds": self.hbm_seconds,
            "label": self.label,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TpuCompileResult:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"not a TPU compile result of schema {SCHEMA!r}: schema {data.get('schema')!r}")
        defaults = {"uncosted": [], "findings": []}  # absent from results written before they were read
        values = {field.name: data[field.name] if field.name in data else defaults[field.name]
                  for field in dataclasses.fields(cls)}
        values["kernels"] = tuple(values["kernels"])
        values["uncosted"] = tuple(values["uncosted"])
        values["findings"] = tuple(TpuFinding.from_dict(f) for f in values["findings"])
        values["memory"] = HbmUsage.from_dict(values["memory"]) if values["memory"] is not None else None
        return cls(**values)
