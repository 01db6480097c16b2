"""Capturing what a sharded run compiled and executed, from outside the process.

torch_xla and XLA read their debug switches once, when they start, so a capture is set up in
the environment of the process before it starts (``xlabridge report`` controls its child's
environment). The ways, and what each costs (``tools/bench/pod_capture_overhead.py`` measures
them on a sharded training step; on 2 shared cores an A/A control differs by 14%, and every way
but the last stays within that):

``DEBUG_FILE`` (``PT_XLA_DEBUG_LEVEL=2``, ``PT_XLA_DEBUG_FILE``)
    Every compilation and execution: cause, graph hash, triggering frames. Per-step cost in
    the noise. The backbone of ``LazyTrace``.
``HLO_DUMP`` (``XLA_FLAGS=--xla_dump_to=... --xla_dump_hlo_as_text --xla_dump_hlo_as_proto``)
    Every module XLA compiles, optimized and partitioned: the collectives the run executes.
    Costs file writes per compilation, nothing per step.
``SOURCE_LINES`` (``XLA_HLO_DEBUG=1``)
    torch_xla records each instruction's Python stack (in the proto) and innermost source line
    (in the text): where each collective comes from. Costs at tracing.
``SAVED_GRAPHS`` (``XLA_SAVE_TENSORS_FILE``, ``XLA_SAVE_TENSORS_FMT=hlo``)
    torch_xla's HLO of every *synced* graph with its hash and full stack. It lowers the graph
    to HLO text at every sync, cached or not (within the noise on the benchmark's MLP; it grows
    with the graph).
``SAVED_PARTITIONED`` (adds ``XLA_DUMP_POST_OPTIMIZATIONS=1``)
    The saved HLO is the optimized, partitioned module, joined to the graph hash exactly; but
    torch_xla runs XLA's optimization passes again at every sync to print it: 7.9x the step time
    of the benchmark's MLP. For short diagnostic runs only.

``DEFAULT`` (debug file, HLO dump, source lines) costs nothing per step beyond source lines
and gives collectives per graph; ``read_capture`` joins each graph of the debug file to the
module XLA compiled for it (by compilation order and argument/result counts). In the user's
own process, without any of this, ``xlabridge.pod.partition_hlo`` partitions a graph's
pre-partition proto in a worker (a second or two, after the steps).
"""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path

from xlabridge import _env
from xlabridge.pod._hlo_text import parse_module, split_top_level
from xlabridge.pod.dump import CompiledModule, read_dump
from xlabridge.pod.lazy import LazyGraph, LazyTrace, read_lazy_trace

__all__ = ["Capture", "CaptureWay", "DEFAULT", "capture_environment", "read_capture"]

_DEBUG_FILE = "pt_xla_debug.txt"
_SAVE_FILE = "saved_graphs.txt"
_DUMP_DIR = "xla_dump"


class CaptureWay(enum.Flag):
    DEBUG_FILE = enum.auto()
    HLO_DUMP = enum.auto()
    SOURCE_LINES = enum.auto()
    SAVED_GRAPHS = enum.auto()
    SAVED_PARTITIONED = enum.auto()


DEFAULT = CaptureWay.DEBUG_FILE | CaptureWay.HLO_DUMP | CaptureWay.SOURCE_LINES


DEBUG_MAX_FRAMES = 128
"""Python frames torch_xla keeps per execution in the debug file (its default, 8, stops inside
torch_xla's Dynamo bridge or ``torch.nn``, before the user's line)."""


def capture_environment(
    directory: str | Path, ways: CaptureWay = DEFAULT, *, xla_flags: str | None = None
) -> dict[str, str]:
    """Environment variables that make a process about to start write a capture to ``directory``.

    ``xla_flags`` is the process's own ``XLA_FLAGS``, kept with the dump flags appended (default:
    this process's). Each process needs a directory of its own: XLA numbers dumped modules per
    process, and torch_xla appends to its debug file.
    """
    if not isinstance(ways, CaptureWay):
        raise TypeError(f"ways must be a CaptureWay (e.g. xlabridge.pod.DEFAULT), got {ways!r}")
    directory = Path(directory).resolve()
    env: dict[str, str] = {}
    if CaptureWay.DEBUG_FILE in ways:
        env[_env.PT_XLA_DEBUG_LEVEL] = "2"
        env[_env.PT_XLA_DEBUG_FILE] = str(directory / _DEBUG_FILE)
        # deep enough to reach the user's line from inside the bridge, autograd or a model library
        # (a depth the user set is kept)
        if _env.get(_env.PT_XLA_DEBUG_MAX_FRAME) is None:
            env[_env.PT_XLA_DEBUG_MAX_FRAME] = str(DEBUG_MAX_FRAMES)
    if CaptureWay.HLO_DUMP in ways:
        dump = f"--xla_dump_to={directory / _DUMP_DIR} --xla_dump_hlo_as_text --xla_dump_hlo_as_proto"
        own = _env.get(_env.XLA_FLAGS, "") if xla_flags is None else xla_flags
        env[_env.XLA_FLAGS] = f"{own} {dump}".strip()
    if CaptureWay.SOURCE_LINES in ways:
        env[_env.XLA_HLO_DEBUG] = "1"
    if ways & (CaptureWay.SAVED_GRAPHS | CaptureWay.SAVED_PARTITIONED):
        env[_env.XLA_SAVE_TENSORS_FILE] = str(directory / _SAVE_FILE)
        env[_env.XLA_SAVE_TENSORS_FMT] = "hlo"
    if CaptureWay.SAVED_PARTITIONED in ways:
        env[_env.XLA_DUMP_POST_OPTIMIZATIONS] = "1"
    directory.mkdir(parents=True, exist_ok=True)
    return env


def _arity(module: CompiledModule) -> tuple[int, int]:
    """(entry parameters, top-level results) of a module."""
    parsed = parse_module(module.text)
    entry = parsed.computations[parsed.entry]
    parameters = sum(1 for instruction in entry.instructions if instruction.opcode == "parameter")
    root = next((instruction for instruction in entry.instructions if instruction.is_root), None)
    if root is None or not root.shape.startswith("("):
        return parameters, 1
    return parameters, len(split_top_level(root.shape[1:-1]))


@dataclasses.dataclass(frozen=True)
class Capture:
    """What one process's capture holds: its lazy trace and the modules XLA compiled."""

    trace: LazyTrace | None
    modules: tuple[CompiledModule, ...]
    compiled: dict[str, CompiledModule]
    """Graph hash → the module XLA compiled for it (graphs the debug file saw compiled)."""

    def module_of(self, graph: LazyGraph) -> CompiledModule | None:
        return self.compiled.get(graph.graph_hash)


def _join(trace: LazyTrace, modules: list[CompiledModule]) -> dict[str, CompiledModule]:
    """Each compiled graph's module: the next dumped module, in compilation order, whose
    argument and result counts are the graph's (the Dynamo bridge compiles a graph more than
    once, and other XLA users of the process dump modules too, so counts disambiguate)."""
    arities = [_arity(module) for module in modules]
    joined, position = {}, 0
    for graph in trace.graphs:
        if not graph.compiles:
            continue
        for index in range(position, len(modules)):
            if arities[index] == (graph.inputs, graph.outputs):
                joined[graph.graph_hash] = modules[index]
                position = index + 1
                break
    return joined


def read_capture(directory: str | Path) -> Capture:
    """Read the capture a process wrote to ``directory`` (see ``capture_environment``)."""
    directory = Path(directory)
    debug_file = directory / _DEBUG_FILE
    save_files = sorted(directory.glob(_SAVE_FILE + "*"))
    trace = None
    if debug_file.exists() or save_files:
        trace = read_lazy_trace(
            debug_file if debug_file.exists() else None,
            save_files[0] if save_files else None,
        )
    modules = read_dump(directory / _DUMP_DIR) if (directory / _DUMP_DIR).is_dir() else []
    return Capture(trace=trace, modules=tuple(modules), compiled=_join(trace, modules) if trace else {})
