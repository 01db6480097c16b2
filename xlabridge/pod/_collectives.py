"""The collectives of a partitioned HLO module: kind, bytes, device groups, where they come from.

``find_collectives(hlo_text)`` reads the module text of a partitioned (SPMD) program, after
optimization: XLA's ``*after_optimizations.txt`` dump of a torch_xla run, torch_xla's
save-tensors file with ``XLA_DUMP_POST_OPTIMIZATIONS=1``, JAX's ``compiled.as_text()``, or the
optimized HLO of a TPU compile. Each collective is one ``Collective``:

- **kind**: all-gather, all-reduce, reduce-scatter, all-to-all, collective-permute,
  collective-broadcast. The asynchronous forms XLA schedules (``all-gather-start`` /
  ``all-gather-done``, and ``async-start`` wrapping a collective, as XLA:TPU emits them) count
  once, at the start.
- **bytes** (per device, per execution): the size of the whole tensor the collective works on,
  as one device sees it: the *result* of an all-gather (what each device holds after gathering),
  the *operand* of a reduce-scatter (what each device holds before scattering), and the result
  of the others (all-reduce, all-to-all, collective-permute and collective-broadcast keep the
  size). Element sizes are XLA's; layouts and padding are ignored. What goes over the
  interconnect depends on the algorithm (a ring all-gather sends ``(n-1)/n`` of it, a ring
  all-reduce twice that); this figure is the tensor, which is what the user's code decides.
- **executions** per run of the module: 1 in the entry computation and the computations it
  calls, times the trip count of each enclosing ``while`` loop where XLA knows it
  (``known_trip_count``), ``None`` where it does not. A collective in a ``conditional`` branch
  counts as if the branch ran (an upper bound). Loop conditions are not searched.
- **replica groups** as device ids, from both printed forms (``{{0,1},{2,3}}`` and the iota
  form ``[2,2]<=[4]`` / ``[2,2]<=[2,2]T(1,0)``); ``()`` means one group of every device.
  Collective-permutes have ``source_target_pairs`` instead.
- **channel id**, the **computation** it sits in, and its **source**: HLO metadata (``op_type``,
  ``op_name``, ``source_file``, ``source_line``; torch_xla fills them with ``XLA_HLO_DEBUG=1``,
  JAX always). With ``stacks`` (``instruction_stacks`` of the module's proto) each collective
  also gets the whole Python stack that created it; ``user_frame(is_user)`` picks the user's
  line with the report's rule.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from xlabridge.pod._hlo_text import Computation, Instruction, Module, array_bytes, parse_module, split_top_level
from xlabridge.diagnostics.events import Frame, innermost

__all__ = ["Collective", "CollectiveKind", "CollectiveTotals", "SourceLine", "find_collectives", "totals"]


class CollectiveKind(str, enum.Enum):
    ALL_GATHER = "all-gather"
    ALL_REDUCE = "all-reduce"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_TO_ALL = "all-to-all"
    COLLECTIVE_PERMUTE = "collective-permute"
    COLLECTIVE_BROADCAST = "collective-broadcast"


# Which side of the collective holds the whole tensor (see "bytes" in the module docstring).
_WHOLE_SIDE = {
    CollectiveKind.ALL_GATHER: "result",
    CollectiveKind.REDUCE_SCATTER: "operand",
    CollectiveKind.ALL_REDUCE: "result",
    CollectiveKind.ALL_TO_ALL: "result",
    CollectiveKind.COLLECTIVE_PERMUTE: "result",
    CollectiveKind.COLLECTIVE_BROADCAST: "result",
}
_KINDS = {kind.value: kind for kind in CollectiveKind}
_TRIP_COUNT = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(?P<n>\d+)')
# Newer XLA (jax 0.11's) prints groups over named mesh axes: ``mesh['x'=2,'y'=4] {'y'}``.
_MESH_GROUPS = re.compile(r"^mesh\[(?P<axes>[^\]]*)\]\s*\{(?P<grouped>[^}]*)\}$")
_MESH_AXIS = re.compile(r"'([^']+)'\s*=\s*(\d+)")
_MESH_NAME = re.compile(r"'([^']+)'")
_IOTA_GROUPS = re.compile(r"^\[(?P<shape>[\d,]+)\]<=\[(?P<dims>[\d,]+)\](?:T\((?P<perm>[\d,]+)\))?$")


@dataclasses.dataclass(frozen=True)
class SourceLine:
    """Where an HLO instruction came from, as its metadata says."""

    file: str
    line: int
    op_type: str = ""
    op_name: str = ""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.file else "<no source line>"
        return f"{where} ({self.op_name or self.op_type})" if (self.op_name or self.op_type) else where


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective of a partitioned HLO module (see the module docstring for each field)."""

    kind: CollectiveKind
    name: str
    computation: str
    shape: str
    operand_shapes: tuple[str, ...]
    bytes: int
    replica_groups: tuple[tuple[int, ...], ...]
    source_target_pairs: tuple[tuple[int, int], ...]
    channel_id: int | None
    is_async: bool
    executions: int | None
    source: SourceLine | None
    stack: tuple[Frame, ...] = ()
    operand_origin: str = ""
    """Opcode the operand comes from, looking through layout-only ops (``parameter`` for a
    module input: a weight or a batch)."""

    @property
    def group_size(self) -> int | None:
        """Devices per replica group (``None`` when the groups are all devices, ``()``)."""
        return len(self.replica_groups[0]) if self.replica_groups else None

    @property
    def bytes_per_run(self) -> int | None:
        """``bytes`` times ``executions``: what this collective moves per run of the module."""
        return None if self.executions is None else self.bytes * self.executions

    def user_frame(self, is_user: Callable[[str], bool]) -> Frame | None:
        """The innermost frame of ``stack`` whose file ``is_user``, else the metadata's line if
        it is (JAX records the user's line there; torch_xla the innermost frame, often torch's)."""
        frame = innermost(self.stack, is_user)
        if frame is None and self.source is not None and self.source.file:
            frame = innermost((Frame(self.source.file, self.source.line, ""),), is_user)
        return frame

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["kind"] = self.kind.value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Collective:
        values = dict(data)
        values["kind"] = CollectiveKind(values["kind"])
        values["operand_shapes"] = tuple(values["operand_shapes"])
        values["replica_groups"] = tuple(tuple(group) for group in values["replica_groups"])
        values["source_target_pairs"] = tuple(tuple(pair) for pair in values["source_target_pairs"])
        values["source"] = SourceLine(**values["source"]) if values.get("source") else None
        values["stack"] = tuple(Frame(**frame) for frame in values.get("stack", ()))
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class CollectiveTotals:
    """Count and bytes of one kind of collective per run of a module."""

    count: int
    bytes: int
    unknown_executions: int = 0
    """Collectives in loops of unknown trip count: counted once in ``count`` and ``bytes``."""


def totals(collectives: Iterable[Collective]) -> dict[CollectiveKind, CollectiveTotals]:
    """Per kind: how many collectives run per run of the module and the bytes they move."""
    result: dict[CollectiveKind, CollectiveTotals] = {}
    for collective in collectives:
        runs = collective.executions if collective.executions is not None else 1
        previous = result.get(collective.kind, CollectiveTotals(0, 0))
        result[collective.kind] = CollectiveTotals(
            count=previous.count + runs,
            bytes=previous.bytes + collective.bytes * runs,
            unknown_executions=previous.unknown_executions + (collective.executions is None),
        )
    return result


def _mesh_groups(mesh: re.Match[str]) -> tuple[tuple[int, ...], ...]:
    """Groups of the mesh-axes form: the devices of a row-major mesh that vary along the named axes."""
    axes = [(name, int(size)) for name, size in _MESH_AXIS.findall(mesh.group("axes"))]
    names = [name for name, _ in axes]
    grouped = _MESH_NAME.findall(mesh.group("grouped"))
    unknown = [name for name in grouped if name not in names]
    if not axes or unknown:
        raise ValueError(f"replica_groups {mesh.group(0)!r}: cannot read its mesh axes")
    devices = np.arange(int(np.prod([size for _, size in axes]))).reshape([size for _, size in axes])
    if set(grouped) == set(names):
        return ()  # one group of every device: XLA's empty replica_groups
    others = [names.index(name) for name in names if name not in grouped]
    order = others + [names.index(name) for name in grouped]
    group_size = int(np.prod([axes[names.index(name)][1] for name in grouped])) if grouped else 1
    rows = devices.transpose(order).reshape(-1, group_size)
    return tuple(tuple(int(d) for d in row) for row in rows)


def _replica_groups(value: str | None) -> tuple[tuple[int, ...], ...]:
    if not value:
        return ()
    value = value.strip()
    mesh = _MESH_GROUPS.match(value)
    if mesh:
        return _mesh_groups(mesh)
    iota = _IOTA_GROUPS.match(value)
    if iota:
        shape = [int(d) for d in iota.group("shape").split(",")]
        dims = [int(d) for d in iota.group("dims").split(",")]
        devices = np.arange(int(np.prod(dims))).reshape(dims)
        if iota.group("perm"):
            devices = devices.transpose([int(p) for p in iota.group("perm").split(",")])
        return tuple(tuple(int(d) for d in row) for row in devices.reshape(shape[0], -1))
    inner = value[1:-1].strip() if value.startswith("{") else value
    return tuple(
        tuple(int(d) for d in group.strip("{} ").split(",") if d.strip())
        for group in split_top_level(inner)
    )


def _pairs(value: str | None) -> tuple[tuple[int, int], ...]:
    return tuple((group[0], group[1]) for group in _replica_groups(value) if len(group) == 2)


def _channel(value: str | None) -> int | None:
    return int(value) if value and value.strip().lstrip("-").isdigit() and int(value) > 0 else None


def _source(instruction: Instruction) -> SourceLine | None:
    metadata = instruction.metadata
    if not metadata:
        return None
    line = metadata.get("source_line", "0")
    return SourceLine(
        file=metadata.get("source_file", ""),
        line=int(line) if line.isdigit() else 0,
        op_type=metadata.get("op_type", ""),
        op_name=metadata.get("op_name", ""),
    )


# Ops that only change the layout or type of their operand: an all-gather of a bitcast of a
# parameter gathers the parameter.
_LAYOUT_ONLY = frozenset({"bitcast", "copy", "transpose", "reshape", "convert", "get-tuple-element", "bitcast-convert"})


def _origin(computation: Computation, operand: str) -> str:
    instructions = computation.by_name()
    seen = set()
    while operand in instructions and operand not in seen:
        seen.add(operand)
        instruction = instructions[operand]
        if instruction.opcode not in _LAYOUT_ONLY or not instruction.operands:
            return instruction.opcode
        operand = instruction.operands[0]
    return ""


class _Walker:
    def __init__(self, module: Module, stacks: Mapping[str, tuple[Frame, ...]]):
        self.module = module
        self.stacks = stacks
        self.found: list[Collective] = []

    def walk(self, name: str, executions: int | None, depth: int = 0) -> None:
        computation = self.module.computations.get(name)
        if computation is None or depth > 64:
            return
        for instruction in computation.instructions:
            opcode = instruction.opcode
            called = instruction.called()
            if opcode in _KINDS:
                self._record(computation, instruction, instruction, executions, is_async=False)
            elif opcode.endswith("-start") and opcode[: -len("-start")] in _KINDS:
                self._record(computation, instruction, self._done(computation, instruction), executions, is_async=True)
            elif opcode == "async-start":
                for wrapped in called.get("calls", ()):
                    self._record_wrapped(computation, instruction, wrapped, executions)
            elif opcode == "while":
                trip = _TRIP_COUNT.search(instruction.attributes.get("backend_config", ""))
                inner = None if executions is None or trip is None else executions * int(trip.group("n"))
                for body in called.get("body", ()):
                    self.walk(body, inner, depth + 1)
            elif opcode != "async-done" and not opcode.endswith("-done"):
                for key in ("calls", "true_computation", "false_computation", "branch_computations"):
                    for callee in called.get(key, ()):
                        self.walk(callee, executions, depth + 1)

    def _done(self, computation: Computation, start: Instruction) -> Instruction:
        for instruction in computation.instructions:
            if instruction.opcode.endswith("-done") and start.name in instruction.operands:
                return instruction
        return start

    def _record_wrapped(self, computation: Computation, start: Instruction, wrapped: str, executions: int | None) -> None:
        body = self.module.computations.get(wrapped)
        if body is None:
            return
        for instruction in body.instructions:
            if instruction.opcode in _KINDS:
                renamed = dataclasses.replace(instruction, name=start.name, metadata=instruction.metadata or start.metadata)
                self._record(computation, renamed, renamed, executions, is_async=True, operands_from=start)

    def _record(
        self,
        computation: Computation,
        instruction: Instruction,
        result: Instruction,
        executions: int | None,
        *,
        is_async: bool,
        operands_from: Instruction | None = None,
    ) -> None:
        kind = _KINDS[instruction.opcode.removesuffix("-start")]
        operands_from = operands_from or instruction
        operand_shapes = tuple(shape or "" for shape in operands_from.operand_shapes)
        whole = result.shape if _WHOLE_SIDE[kind] == "result" else " ".join(operand_shapes)
        attributes = instruction.attributes
        self.found.append(
            Collective(
                kind=kind,
                name=instruction.name,
                computation=computation.name,
                shape=result.shape,
                operand_shapes=operand_shapes,
                bytes=array_bytes(whole),
                replica_groups=_replica_groups(attributes.get("replica_groups")),
                source_target_pairs=_pairs(attributes.get("source_target_pairs")),
                channel_id=_channel(attributes.get("channel_id")),
                is_async=is_async,
                executions=executions,
                source=_source(instruction),
                stack=tuple(self.stacks.get(instruction.name, ())),
                operand_origin=_origin(computation, operands_from.operands[0]) if operands_from.operands else "",
            )
        )


def find_collectives(hlo: str | Module, *, stacks: Mapping[str, tuple[Frame, ...]] | None = None) -> list[Collective]:
    """Every collective a run of the module executes, in program order.

    ``hlo`` is module text (or a parsed ``Module``); ``stacks`` maps instruction names to their
    Python stacks (``xlabridge.pod.instruction_stacks(proto)`` of the same module).
    """
    module = parse_module(hlo) if isinstance(hlo, str) else hlo
    walker = _Walker(module, stacks or {})
    walker.walk(module.entry, 1)
    return walker.found
