"""The diagnostics report as plain data: ``Report``, its rows, and its JSON form (``SCHEMA``).

Nothing here builds a report or renders one: ``xlabridge.diagnostics.build_report(events)``
builds, ``xlabridge.diagnostics.views`` render. This package imports nothing else of the
diagnostics, so every other part may depend on it and it on none of them.
"""

from xlabridge.diagnostics.report._pod import (
    CollectiveGroup,
    CompileRequest,
    ProcessDivergence,
    RankDifference,
    RunGraph,
    UnevenCompile,
)
from xlabridge.diagnostics.report._report import SCHEMA, Report
from xlabridge.diagnostics.report._rows import (
    UNKNOWN_NAME,
    DynamoBreak,
    DynamoGraph,
    Finding,
    HloBreak,
    ProbeReport,
    Process,
    ProcessEnding,
    Recompile,
    RecompileGroup,
    Segment,
    TimeSplit,
    XlaGraph,
)
from xlabridge.diagnostics.report._timeline import Span, SpanKind
from xlabridge.diagnostics.report._tpu import TpuBreak, TpuGraph, TpuSlice, TpuView

__all__ = [
    "SCHEMA",
    "UNKNOWN_NAME",
    "CollectiveGroup",
    "CompileRequest",
    "DynamoBreak",
    "DynamoGraph",
    "Finding",
    "HloBreak",
    "ProbeReport",
    "Process",
    "ProcessDivergence",
    "ProcessEnding",
    "RankDifference",
    "Recompile",
    "RecompileGroup",
    "Report",
    "RunGraph",
    "Segment",
    "Span",
    "SpanKind",
    "TimeSplit",
    "TpuBreak",
    "TpuGraph",
    "TpuSlice",
    "TpuView",
    "UnevenCompile",
    "XlaGraph",
]
