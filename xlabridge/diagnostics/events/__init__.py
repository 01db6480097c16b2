"""The events the probes emit, one JSON line each: the only input of a report.

Every event is a dataclass with a ``type`` tag (``EventType``), the process that emitted it
(``pid``; ``rank``/``world`` where known) and ``t``, a monotonic timestamp in seconds
(``time.monotonic()`` of that process; the ``process_start`` event pairs it with the wall
clock, so logs of several processes can be lined up). A log is a file of JSON lines, one
event per line, in the order emitted, as torch's structured trace is: ``LogWriter`` appends
each event as it happens (so that a killed process leaves everything before its death),
``write_log`` writes a whole log, ``read_log`` reads one back. Its first line is the
``process_start`` event, which carries the log's schema, ``SCHEMA``. What grows with the steps
is summed, not appended: the sums are rewritten beside the log while its process runs
(``<log>.sums``) and appended to it at the end; such events are cumulative, the latest counts.

Readers are lenient: a field the reader does not know is ignored, a field the log lacks takes
its default, an event type the reader does not know is skipped (``read_log`` counts them in
``LogContents.skipped``), and a line that cannot be read (cut short by a killed process,
damaged, of the wrong shape) is left out with a warning naming the file and line. A breaking
change bumps ``SCHEMA``; a log of another schema is read as far as it can be, with a warning.

Intervals are given by their end ``t`` and their ``start``; durations are ``t - start``.
Facts are recorded raw (reason texts, stacks as frames, op names): what they mean (causes,
suggestions, which frame is the user's) is decided when a report is built from them, so a
newer xlabridge re-reads an old log with its newer knowledge.
"""

from __future__ import annotations

from xlabridge.diagnostics.events._backends import BackendCompile, CompiledCalls, FxProgram, LoweringBreak, TpuSlice
from xlabridge.diagnostics.events._base import (
    ActivityKind,
    Ending,
    Event,
    EventType,
    Frame,
    GraphOrigin,
    HloFormat,
    ProbeState,
    SCHEMA,
    SegmentKind,
    XlaPhase,
    innermost,
)
from xlabridge.diagnostics.events._json import from_dict, to_dict
from xlabridge.diagnostics.events._log import LogContents, LogWriter, iter_lines, read_log, sums_path, write_log
from xlabridge.diagnostics.events._host import CollectiveWaits, DistSetup, ExitWork, Exiting, RanksWaited
from xlabridge.diagnostics.events._lifecycle import Activity, ProcessExit, SignalReceived, Stall, StallEnd, ThreadStack
from xlabridge.diagnostics.events._training import CompileRequest, OptimizerSteps
from xlabridge.diagnostics.events._types import (
    BridgeGraph,
    CompilePath,
    CpuNode,
    DynamoCompile,
    EVENT_CLASSES,
    EagerOps,
    FxCode,
    FxLine,
    GraphBreak,
    GraphCalled,
    GraphCalls,
    GraphCaptured,
    GraphCollectives,
    GraphSplit,
    Imported,
    LazyGraphSeen,
    LazyRun,
    LazyRuns,
    Partitioned,
    ProbeStatus,
    ProcessEnd,
    ProcessStart,
    Recompile,
    SegmentRecord,
    Sync,
    SyncCalls,
    TorchBreak,
    TpuCompiled,
    TpuPass,
    TraceRead,
    Transfer,
    XlaCompile,
    XlaGraphSeen,
)

__all__ = [
    "Activity",
    "ActivityKind",
    "BackendCompile",
    "BridgeGraph",
    "CollectiveWaits",
    "CompilePath",
    "CompileRequest",
    "CompiledCalls",
    "CpuNode",
    "DistSetup",
    "DynamoCompile",
    "EVENT_CLASSES",
    "EagerOps",
    "Ending",
    "Event",
    "EventType",
    "ExitWork",
    "Exiting",
    "Frame",
    "FxCode",
    "FxLine",
    "FxProgram",
    "GraphBreak",
    "GraphCalled",
    "GraphCalls",
    "GraphCaptured",
    "GraphCollectives",
    "GraphOrigin",
    "GraphSplit",
    "HloFormat",
    "Imported",
    "LazyGraphSeen",
    "LazyRun",
    "LazyRuns",
    "LogContents",
    "LogWriter",
    "LoweringBreak",
    "OptimizerSteps",
    "Partitioned",
    "ProbeState",
    "ProbeStatus",
    "ProcessEnd",
    "ProcessExit",
    "ProcessStart",
    "RanksWaited",
    "Recompile",
    "SCHEMA",
    "SegmentKind",
    "SegmentRecord",
    "SignalReceived",
    "Stall",
    "StallEnd",
    "Sync",
    "SyncCalls",
    "ThreadStack",
    "TorchBreak",
    "TpuCompiled",
    "TpuPass",
    "TpuSlice",
    "TraceRead",
    "Transfer",
    "XlaCompile",
    "XlaGraphSeen",
    "XlaPhase",
    "from_dict",
    "innermost",
    "iter_lines",
    "read_log",
    "sums_path",
    "to_dict",
    "write_log",
]
