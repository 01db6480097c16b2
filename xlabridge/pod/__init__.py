"""Sharded and multi-process runs: collectives per XLA graph, lazy-traced graphs, divergence.

The building blocks of the pod report, as plain data the diagnostics pipeline turns
into events and report sections:

- ``analyze(hlo_text, proto=None)`` → ``PartitionedGraph``: the collectives of a partitioned
  module (kind, bytes, replica groups, channel, executions per run, HLO metadata and the whole
  Python stack from the proto) and its input shardings (the report names each collective's
  cause and fix from the diagnostics' one table of causes).
- Getting the partitioned module of a torch_xla SPMD graph: ``capture_environment`` (set before
  the process starts: XLA's dump, torch_xla's debug file, source lines; ``plan_capture`` says
  too what it changes in a dump of the user's own, which it keeps) and ``read_capture``;
  ``read_dump`` for an XLA dump directory; ``partition_hlo`` for a pre-partition proto taken in
  process (compiled for N CPU devices in a jaxlib worker).
- ``read_lazy_trace`` → ``LazyTrace``: each XLA graph of a lazily traced run with its cause
  (sync, host read, Dynamo), compiles, executions, triggering frames and HLO.
- ``find_divergences`` over each process's ``ProcessRun``: graphs that differ between processes
  at the same step (with the differing source lines) and compiles only some processes do.
- ``compile_for_pod`` → ``PodGraph``: each sharded graph compiled for a TPU slice by libtpu
  (``xlabridge.tpu``): HBM per chip and whether it fits, kernels, cost, TPU collectives.
"""

from xlabridge.pod._capture import (
    DEFAULT,
    Capture,
    CapturePlan,
    CaptureWay,
    capture_environment,
    plan_capture,
    read_capture,
)
from xlabridge.pod._collectives import (
    Collective,
    CollectiveKind,
    CollectiveTotals,
    find_collectives,
    totals,
)
from xlabridge.pod._divergence import (
    Divergence,
    ProcessRun,
    find_divergences,
)
from xlabridge.pod._dump import CompiledModule, read_dump
from xlabridge.pod._graph import PartitionedGraph, analyze
from xlabridge.pod._lazy import GraphCause, LazyGraph, LazyTrace, read_lazy_trace
from xlabridge.pod._partition import partition_hlo
from xlabridge.pod._tpu_view import PodGraph, compile_for_pod

__all__ = [
    "DEFAULT",
    "Capture",
    "CapturePlan",
    "CaptureWay",
    "Collective",
    "CollectiveKind",
    "CollectiveTotals",
    "CompiledModule",
    "Divergence",
    "GraphCause",
    "LazyGraph",
    "LazyTrace",
    "PartitionedGraph",
    "PodGraph",
    "ProcessRun",
    "analyze",
    "capture_environment",
    "compile_for_pod",
    "find_collectives",
    "find_divergences",
    "partition_hlo",
    "plan_capture",
    "read_capture",
    "read_dump",
    "read_lazy_trace",
    "totals",
]
