"""The timeline of a run: what each process did when, as spans on its own clock."""

from __future__ import annotations

import dataclasses
import enum

from xlabridge.diagnostics._fields import field as _field


class SpanKind(str, enum.Enum):
    """What a span of a process's time was spent on (the time split's shares, placed in time)."""

    IMPORT = "import"
    """Importing a heavy package (torch_xla, transformers...)."""
    TRACE = "trace"
    """Dynamo compiling a frame: tracing, AOTAutograd, the backend's compile call."""
    EXTRACT = "extract"
    """torch_xla's bridge partitioning and tracing an FX graph at its first call."""
    BACKEND_COMPILE = "backend-compile"
    """A backend compiling a graph AOTAutograd handed it (inductor: codegen, C++/Triton compile, autotuning)."""
    DEVICE = "device"
    """A call of a compiled graph running on the GPU (CUDA timing events; the host may be elsewhere)."""
    XLA_COMPILE = "xla-compile"
    """XLA compiling a graph (placed at the end of the call or sync it happened in)."""
    EXECUTE = "execute"
    """A call of a compiled FX graph (the host time of a call of another backend's graph, or of its backward)."""
    CPU_FALLBACK = "cpu-fallback"
    """The CPU nodes of a partitioned graph during one call (placed at the start of the call)."""
    LAZY = "lazy"
    """``torch_xla.sync()`` / ``mark_step()``: the lazily traced graph compiled and run."""
    TRANSFER = "transfer"
    """Host-device transfers outside compiled graphs and syncs."""
    EAGER = "eager"
    """An op run in torch_xla's eager mode (its own XLA computation) executing."""
    PROCESS_GROUP = "process-group"
    """Setting up ``torch.distributed`` (``init_process_group``, ``new_group``, ``init_device_mesh``)."""
    COLLECTIVE = "collective-wait"
    """The host waiting in a collective (a blocking call, ``Work.wait()``, DDP's reducer at a backward's end)."""
    RANKS = "waiting-for-ranks"
    """A launcher running its ranks and waiting for them."""
    EXIT = "exit"
    """The interpreter exiting: threads joined, ``atexit`` handlers, teardown."""


@dataclasses.dataclass
class Span:
    """One interval of one process's time."""

    pid: int = _field("process")
    kind: str = _field("``SpanKind`` value")
    start: float = _field("seconds from the start of the process's observation")
    seconds: float = _field("length")
    label: str = _field("what: ``compile 1/2``, ``FX graph 3 call 2``, ``sync``, ``torch_xla``")
    graph: int | None = _field("``XlaGraph.index`` it belongs to, if any", None)
    calls: int = _field("calls this span stands for (later calls of a graph are summed into one span)", 1)
    until: float | None = _field("for a span of several calls in a row: when the last ended, seconds from the start of "
                                 "observation (the calls lie between ``start`` and ``until``, ``seconds`` is their "
                                 "total); null: the span is ``seconds`` long", None)
