"""Graphs that differ between the processes of one run, and compiles only some processes do.

In a multi-process run every process should trace the same graphs in the same order: where one
takes another branch, its graph differs at that step, and on a TPU pod the others then wait at
the next collective for a partner that never comes. Given each process's sequence of executed
graphs (``ProcessRun``, from its ``LazyTrace`` and the modules XLA compiled for it),
``find_divergences`` lines the sequences up by step and position within the step and reports

- ``Divergence``: at one step and position the processes ran different graphs (or some ran a
  graph where others ran none), with the source lines only some of the graphs hold (the HLO
  metadata diffed: ``source_file:source_line`` and op, plus the user's frame of each
  instruction's Python stack where the module's proto has one; inputs are left out, and an op
  traced without a frame, as backward ops are, is listed by its op alone);
- ``UnevenCompile``: the same graph at the same place, compiled on some processes only (a
  recompile one process pays and the others wait for).

Identical processes give neither. Graphs are compared by torch_xla's graph hash, which depends
on the traced program and shapes only, so it is the same in every process for the same code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from xlabridge.pod._hlo_proto import instruction_stacks
from xlabridge.pod._hlo_text import parse_module
from xlabridge.pod._dump import CompiledModule
from xlabridge.diagnostics.events import Frame, innermost
from xlabridge.pod._lazy import GraphRun, LazyTrace

__all__ = ["Divergence", "GraphSources", "ProcessRun", "SourceDifference", "UnevenCompile", "find_divergences"]


@dataclasses.dataclass(frozen=True)
class ProcessRun:
    """One process of the run: its executed graphs in order, and each graph's compiled module."""

    process: str
    runs: tuple[GraphRun, ...]
    modules: Mapping[str, CompiledModule]
    """Graph hash → the module XLA compiled for it (``Capture.compiled``)."""
    sources: Mapping[str, GraphSources] = dataclasses.field(default_factory=dict)
    """Graph hash → its ``GraphSources``, for graphs whose module is not at hand (read back
    from an event log)."""

    @classmethod
    def from_capture(cls, process: str, trace: LazyTrace, modules: Mapping[str, CompiledModule]) -> ProcessRun:
        return cls(process, trace.runs, dict(modules))


@dataclasses.dataclass(frozen=True)
class SourceDifference:
    """Source lines in one process's graph that the other processes' graphs at that place lack."""

    process: str
    lines: tuple[str, ...]
    """``file:line (op)`` from the HLO metadata, and ``file:line (function)`` user frames."""


@dataclasses.dataclass(frozen=True)
class Divergence:
    step: int
    position: int
    """Index of the graph among the step's executions."""
    graphs: Mapping[str, str | None]
    """Process → the graph hash it ran there (``None``: it ran no graph there)."""
    differences: tuple[SourceDifference, ...]


@dataclasses.dataclass(frozen=True)
class UnevenCompile:
    step: int
    position: int
    graph_hash: str
    compiled_on: tuple[str, ...]
    cached_on: tuple[str, ...]


def _by_place(runs: tuple[GraphRun, ...]) -> dict[tuple[int, int], GraphRun]:
    places, position, step = {}, 0, None
    for run in runs:
        if run.step != step:
            step, position = run.step, 0
        places[(run.step, position)] = run
        position += 1
    return places


@dataclasses.dataclass(frozen=True)
class GraphSources:
    """Where the computing instructions of one compiled graph come from, as recorded (raw):
    the HLO metadata's lines and each distinct Python stack. Plain data, so a process can
    record it in its event log and a report compare processes later with its own user-code rule."""

    lines: tuple[str, ...]
    """``file:line (op)`` from the metadata; ``<no source line> (op)`` for an op traced without one."""
    stacks: tuple[tuple[Frame, ...], ...]
    """Each distinct Python stack of an instruction (the module proto's), outermost first."""

    @classmethod
    def of_module(cls, module: CompiledModule) -> GraphSources:
        lines, computing = set(), set()
        parsed = parse_module(module.text)
        for computation in parsed.computations.values():
            for instruction in computation.instructions:
                metadata = instruction.metadata
                # Parameters are the graph's inputs: their metadata says where a buffer was made
                # (a step earlier, for a trained weight), not what this graph computes.
                if instruction.opcode == "parameter" or metadata.get("op_type") == "xla__device_data":
                    continue
                computing.add(instruction.name)
                if metadata.get("source_file"):
                    lines.add(f"{metadata['source_file']}:{metadata.get('source_line', '0')} ({metadata.get('op_type', '')})")
                elif metadata.get("op_type"):
                    # Backward ops are traced on autograd's thread, without Python frames.
                    lines.add(f"<no source line> ({metadata['op_type']})")
        stacks = instruction_stacks(module.proto) if module.proto else {}
        distinct = {stacks[name] for name in computing & stacks.keys()}
        return cls(tuple(sorted(lines)), tuple(sorted(distinct, key=lambda stack: [str(f) for f in stack])))

    def user_lines(self, is_user: Callable[[str], bool]) -> set[str]:
        """The metadata lines and, per stack, its innermost frame that ``is_user``."""
        lines = set(self.lines)
        for stack in self.stacks:
            frame: Frame | None = innermost(stack, is_user)
            if frame is not None:
                lines.add(str(frame))
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {"lines": list(self.lines), "stacks": [[dataclasses.asdict(f) for f in stack] for stack in self.stacks]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GraphSources:
        return cls(tuple(data["lines"]), tuple(tuple(Frame(**f) for f in stack) for stack in data["stacks"]))


def _source_lines(process: ProcessRun, graph_hash: str | None, is_user: Callable[[str], bool]) -> set[str]:
    if graph_hash is None:
        return set()
    module = process.modules.get(graph_hash)
    sources = GraphSources.of_module(module) if module is not None else process.sources.get(graph_hash)
    return sources.user_lines(is_user) if sources is not None else set()


def find_divergences(
    processes: list[ProcessRun], *, is_user: Callable[[str], bool] = lambda filename: not filename.startswith("<")
) -> tuple[list[Divergence], list[UnevenCompile]]:
    """The places where the processes ran different graphs, and same-graph compiles on some only.

    ``is_user`` picks the user's frame of each instruction's stack (the report's user-code rule).
    """
    if len(processes) < 2:
        raise ValueError(f"find_divergences compares processes: it needs at least two, got {len(processes)}")
    places = {p.process: _by_place(p.runs) for p in processes}
    by_name = {p.process: p for p in processes}
    divergences: list[Divergence] = []
    uneven: list[UnevenCompile] = []
    for place in sorted(set().union(*(set(p) for p in places.values()))):
        ran = {name: places[name].get(place) for name in places}
        hashes = {name: run.graph_hash if run else None for name, run in ran.items()}
        if len(set(hashes.values())) > 1:
            lines = {name: _source_lines(by_name[name], h, is_user) for name, h in hashes.items()}
            differences = []
            for name, own in lines.items():
                others = set().union(*(lines[other] for other in lines if other != name and hashes[other] != hashes[name]))
                if own - others:
                    differences.append(SourceDifference(name, tuple(sorted(own - others))))
            divergences.append(Divergence(place[0], place[1], hashes, tuple(differences)))
        else:
            compiled = tuple(name for name, run in ran.items() if run and run.compiled)
            if compiled and len(compiled) < len(ran):
                cached = tuple(name for name in ran if name not in compiled)
                uneven.append(UnevenCompile(place[0], place[1], next(iter(hashes.values())), compiled, cached))
    return divergences, uneven
