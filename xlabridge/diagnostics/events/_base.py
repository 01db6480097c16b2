"""The vocabulary of the events: the log's schema tag, the enums event fields take, the source
frame (``Frame``, the one frame type of xlabridge: every reader of stacks produces it) and the
fields every event carries (``Event``). The event classes themselves are in ``_types``.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence
from typing import ClassVar

from xlabridge.diagnostics._fields import field as _field

SCHEMA = "xlabridge.events/1"


class EventType(str, enum.Enum):
    """The type tag of each event (its ``type`` field in JSON)."""

    PROCESS_START = "process_start"
    PROBE_STATUS = "probe_status"
    DYNAMO_COMPILE = "dynamo_compile"
    GRAPH_CAPTURED = "graph_captured"
    GRAPH_BREAK = "graph_break"
    RECOMPILE = "recompile"
    COMPILE_PATH = "compile_path"
    BRIDGE_GRAPH = "bridge_graph"
    PARTITIONED = "partitioned"
    XLA_GRAPH = "xla_graph"
    XLA_COMPILE = "xla_compile"
    GRAPH_CALLED = "graph_called"
    GRAPH_CALLS = "graph_calls"
    TRANSFER = "transfer"
    PROCESS_END = "process_end"
    TPU_COMPILED = "tpu_compiled"
    TPU_PASS = "tpu_pass"
    LAZY_GRAPH = "lazy_graph"
    LAZY_RUNS = "lazy_runs"
    COLLECTIVES = "collectives"
    FX_CODE = "fx_code"
    IMPORTED = "imported"
    SYNC = "sync"
    EAGER_OPS = "eager_ops"
    FX_PROGRAM = "fx_program"
    TPU_SLICE = "tpu_slice"
    BACKEND_COMPILE = "backend_compile"
    COMPILED_CALLS = "compiled_calls"
    SYNC_CALLS = "sync_calls"
    SIGNAL = "signal"
    PROCESS_EXIT = "process_exit"
    STALL = "stall"
    STALL_END = "stall_end"
    TORCH_BREAK = "torch_break"
    TRACE_READ = "trace_read"
    COMPILE_REQUEST = "compile_request"
    OPTIMIZER_STEPS = "optimizer_steps"
    GRAPH_SPLIT = "graph_split"
    DIST_SETUP = "dist_setup"
    COLLECTIVE_WAITS = "collective_waits"
    EXITING = "exiting"
    EXIT_WORK = "exit_work"
    RANKS_WAITED = "ranks_waited"


class ProbeState(str, enum.Enum):
    """What a probe could do in this process."""

    OK = "ok"
    """Installed, and it saw what it watches (or there was nothing for it to see)."""
    UNAVAILABLE = "unavailable"
    """It could not be installed: the upstream surface it reads is missing or changed."""
    SILENT = "silent"
    """Installed, but it did not fire where it should have (self-test or a cross-check)."""
    FAILED = "failed"
    """It raised while recording; the part of the report it feeds is incomplete."""


class SegmentKind(str, enum.Enum):
    """How a run of FX nodes executed inside one FX graph."""

    XLA = "xla"
    """One XLA graph."""
    CPU = "cpu"
    """One node run outside XLA, on the host."""
    COLLECTIVE = "collective"
    """A collective compiled as a program of its own (TorchTPU's split compiler cuts graphs there)."""


class HloFormat(str, enum.Enum):
    """The form in which an XLA graph's module was saved."""

    HLO_PROTO = "hlo-proto"
    """torch_xla's HLO module proto (``.hlo.pb``)."""
    STABLEHLO = "stablehlo"
    """StableHLO text (``.mlir``): TorchTPU's partitions, lowered here by torchax and ``jax.export``."""


class XlaPhase(str, enum.Enum):
    """When an XLA compilation happened, which says what it is nested in."""

    EXTRACTION = "extraction"
    """While torch_xla's bridge extracted an FX graph's XLA graphs (its first call)."""
    CALL = "call"
    """During a later call of a compiled FX graph (the bridge compiled again)."""
    DYNAMO = "dynamo"
    """While Dynamo compiled a frame."""
    OUTSIDE = "outside"
    """Anywhere else: lazy tensor code outside compiled graphs, ``torch_xla.sync()``."""


class Ending(str, enum.Enum):
    """Why an observation ended (``process_end``)."""

    EXIT = "exit"
    """The interpreter exited: the program returned, called ``sys.exit``, or raised (``exception``)."""
    SIGNAL = "signal"
    """A signal whose action is to terminate arrived (``signal``): the process dies of it next."""
    BLOCK = "block"
    """A ``diagnose()`` block ended; the process went on."""


class ActivityKind(str, enum.Enum):
    """What a probe knows a process to be doing (a ``stall`` event's activities)."""

    DYNAMO_COMPILE = "dynamo-compile"
    """Dynamo compiling a frame: tracing, AOTAutograd, the backend's compile call."""
    EXTRACTION = "extraction"
    """A compiled FX graph's first call: torch_xla's bridge partitioning, tracing and compiling it."""
    GRAPH_CALL = "graph-call"
    """A later call of a compiled FX graph: its XLA graphs and CPU nodes running."""
    SYNC = "sync"
    """``torch_xla.sync()``, a ``torch_xla.compile`` region or a wait for the device: the lazily traced
    step traced, compiled where new, and run."""
    TORCHTPU_CALL = "torchtpu-call"
    """A call of a graph TorchTPU compiled."""


class GraphOrigin(str, enum.Enum):
    """Where an XLA graph came from."""

    DYNAMO = "dynamo"
    """Extracted by torch_xla's Dynamo bridge from an FX graph."""
    LAZY = "lazy"
    """Traced lazily (LazyTensor) outside compiled graphs."""


@dataclasses.dataclass(frozen=True)
class Frame:
    """One Python frame: file, line and function."""

    filename: str = _field("source file, as the process saw it")
    lineno: int = _field("line in ``filename``")
    function: str = _field("function name")

    def __str__(self) -> str:
        where = f"{self.filename}:{self.lineno}"
        return f"{where} ({self.function})" if self.function else where


def innermost(frames: Sequence[Frame], is_user: Callable[[str], bool]) -> Frame | None:
    """The deepest of ``frames`` (outermost first) whose file ``is_user``, or ``None``."""
    return next((frame for frame in reversed(frames) if is_user(frame.filename)), None)


@dataclasses.dataclass(kw_only=True)
class Event:
    """Fields every event carries."""

    type: ClassVar[EventType]
    t: float = _field("``time.monotonic()`` of the emitting process, in seconds")
    pid: int = _field("process id")
    rank: int | None = _field("rank of the process in a distributed run, where known", None)
    world: int | None = _field("number of processes in the run, where known", None)
