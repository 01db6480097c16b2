"""The event types: one dataclass per fact a probe records (see ``events`` for the log they form).

Facts only, recorded raw; what they mean is decided when a report is built from them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from xlabridge.diagnostics._fields import field as _field
from xlabridge.diagnostics.events._backends import BackendCompile, CompiledCalls, FxProgram, TpuSlice
from xlabridge.diagnostics.events._base import (
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
)
from xlabridge.diagnostics.events._host import CollectiveWaits, DistSetup, ExitWork, Exiting, RanksWaited
from xlabridge.diagnostics.events._lifecycle import ProcessExit, SignalReceived, Stall, StallEnd
from xlabridge.diagnostics.events._training import CompileRequest, OptimizerSteps


@dataclasses.dataclass(kw_only=True)
class ProcessStart(Event):
    """Observation started in this process: interpreter start-up under ``xlabridge report``,
    the start of the block under ``diagnose()``. The first event of every log."""

    type: ClassVar[EventType] = EventType.PROCESS_START
    schema: str = _field("the log's schema, ``xlabridge.events/1``", SCHEMA)
    wall_time: float = _field("``time.time()`` at ``t``: lines up logs of several processes", 0.0)
    environment: dict[str, Any] = _field("versions, PJRT device, TPU type, argv (see the report's environment)", factory=dict)
    framework_paths: dict[str, str] = _field(
        "package directories of torch, torch_xla, functorch and xlabridge in this process; "
        "frames outside them, and in ``main_file``, are the user's", factory=dict
    )
    main_file: str | None = _field("the ``__main__`` script, user code wherever it lies", None)
    run_id: str = _field("the run it belongs to: set by ``xlabridge report`` for every process of its command "
                         "(``XLABRIDGE_RUN_ID``), so that logs of two runs in one directory are told apart", "")
    parent_pid: int | None = _field("the process that started this one (``os.getppid()`` at start)", None)
    argv_kind: str = _field("how the interpreter was started: ``script`` (a file), ``module`` (``-m``), ``command`` "
                            "(``-c``), ``multiprocessing`` (a spawned or forkserver child), ``stdin`` or empty "
                            "(unknown); a ``command`` child of an observed process is its helper", "")


@dataclasses.dataclass(kw_only=True)
class ProbeStatus(Event):
    """What one probe could see in this process."""

    type: ClassVar[EventType] = EventType.PROBE_STATUS
    probe: str = _field("probe name, such as ``dynamo.compiles``")
    state: ProbeState = _field("``ok``, ``unavailable``, ``silent`` or ``failed``")
    reason: str = _field("why, when the state is not ``ok``", "")
    surface: str = _field("the upstream names it reads or wraps", "")
    patch: bool = _field("whether it replaces an upstream function with a wrapper", False)
    sees: str = _field("what the report lacks when this probe cannot see", "")


@dataclasses.dataclass(kw_only=True)
class DynamoCompile(Event):
    """Dynamo compiled one frame (tracing, plus the backend's compile call), from ``start`` to ``t``."""

    type: ClassVar[EventType] = EventType.DYNAMO_COMPILE
    compile_id: str = _field("Dynamo's compile id, ``frame/recompile``")
    trigger: str = _field("``dynamo`` (a frame) or ``lazy_backward`` (AOTAutograd's deferred backward)", "dynamo")
    start: float = _field("monotonic start, seconds")
    caller_frames: list[Frame] = _field("the Python stack that called the compiled code, outermost first", factory=list)
    code: Frame | None = _field("the compiled frame's code (Dynamo's record of it: ``co_filename``, ``co_firstlineno``, "
                                "``co_name``), which names one frame on every rank alike", None)
    step: int | None = _field("optimizer steps the process had taken when the compilation started", None)


@dataclasses.dataclass(kw_only=True)
class GraphCaptured(Event):
    """Dynamo handed one FX graph to a backend."""

    type: ClassVar[EventType] = EventType.GRAPH_CAPTURED
    compile_id: str = _field("Dynamo's compile id")
    backend: str = _field("the backend's name (``xlabridge``, ``openxla``, ...)")
    op_count: int = _field("call nodes in the FX graph (``torch._dynamo.explain``'s ``op_count``)")
    ends_in_break: bool = _field("whether the graph ends at a Dynamo graph break", False)
    frames: list[Frame] = _field("stack of the graph's first op, outermost first", factory=list)


@dataclasses.dataclass(kw_only=True)
class GraphBreak(Event):
    """A Dynamo graph break ended the FX graph of ``compile_id``."""

    type: ClassVar[EventType] = EventType.GRAPH_BREAK
    compile_id: str = _field("compile id of the graph the break ends")
    reason: str = _field("Dynamo's reason, verbatim")
    frames: list[Frame] = _field("the user stack at the break, outermost first", factory=list)


@dataclasses.dataclass(kw_only=True)
class TorchBreak(Event):
    """A graph break as torch itself records it: one ``dynamo_graph_break_reason`` artifact of its
    structured trace (what ``TORCH_LOGS=graph_breaks`` prints and tlparse lists), with its type,
    explanation, hints, graph-break code and user stack in the text."""

    type: ClassVar[EventType] = EventType.TORCH_BREAK
    compile_id: str = _field("Dynamo's compile id (``frame/recompile``) the break was logged in")
    text: str = _field("torch's text verbatim, less Dynamo's own Python traceback that it appends")
    source: str = _field("``process`` (seen in the run) or the ``TORCH_TRACE`` file it was read from", "process")


@dataclasses.dataclass(kw_only=True)
class TraceRead(Event):
    """The events of this process were read from a ``TORCH_TRACE`` log (``read_trace``), not
    observed: what such a log holds and what it cannot."""

    type: ClassVar[EventType] = EventType.TRACE_READ
    file: str = _field("the log file read (``dedicated_log_torch_trace_*.log``)")
    records: int = _field("records (JSON envelopes) read", 0)
    skipped: int = _field("lines that were not records of the trace (other logging, damaged lines)", 0)
    failures: list[str] = _field("compilations Dynamo gave up on (``fail_type: fail_reason at file:line``)",
                                 factory=list)
    eager_batches: int = _field("TorchTPU's eager batches recorded (``torchtpu_eager_stablehlo`` artifacts)", 0)


@dataclasses.dataclass(kw_only=True)
class Recompile(Event):
    """Dynamo compiled a frame again (``compile_id`` is ``frame/n`` with ``n > 0``)."""

    type: ClassVar[EventType] = EventType.RECOMPILE
    compile_id: str = _field("compile id of the new compilation")
    reason: str = _field("the guard failure Dynamo names for it (``frame/n: guard text``); may be empty")
    code: Frame | None = _field("the code object recompiled", None)


@dataclasses.dataclass(kw_only=True)
class CompilePath(Event):
    """The ``xlabridge`` backend chose where and how to compile one FX graph."""

    type: ClassVar[EventType] = EventType.COMPILE_PATH
    compile_id: str = _field("Dynamo's compile id")
    target: str = _field("``xla`` or ``native``")
    path: str = _field("``forward-only``, ``aot-autograd`` or ``inductor``")
    reason: str = _field("why, in a few words")
    cpu_only: bool = _field("every tensor of the graph is on the CPU (compiled for XLA as ``openxla`` does)", False)


@dataclasses.dataclass(kw_only=True)
class BridgeGraph(Event):
    """An FX graph reached an XLA compiler's front end: torch_xla's Dynamo bridge (``openxla``,
    ``openxla_eval``, ``xlabridge``), or TorchTPU's split compiler (``tpu``, ``xlabridge``)."""

    type: ClassVar[EventType] = EventType.BRIDGE_GRAPH
    graph: int = _field("number of this graph in the process, from 0")
    compile_id: str = _field("Dynamo's compile id it belongs to", "")
    role: str = _field("``forward`` or ``backward`` (AOTAutograd's, recognised by its tangents)")
    fx_ops: int = _field("call nodes in the graph the bridge received")
    input_devices: list[str] = _field("device types of its tensor inputs (``xla``, ``cpu``)", factory=list)
    compiler: str = _field("``torch_xla`` (its Dynamo bridge) or ``torchtpu`` (TorchTPU's split compiler)", "torch_xla")
    stand_in: bool = _field("TorchTPU without a TPU: its programs ran on CPU in their place (times are the CPU's)",
                            False)
    buckets: list[str] = _field("TorchTPU, a graph with dynamic shapes: its symbols' bounds in each bucket it is "
                                "compiled for, one program per bucket at the bound (``s33 in [2, 128]``)", factory=list)


@dataclasses.dataclass(frozen=True)
class CpuNode:
    """One FX node the bridge ran outside XLA."""

    name: str = _field("the FX node's name")
    op: str = _field("its target, as an aten op name where it is one (``aten::exp2``)")
    fallback_ops: tuple[str, ...] = _field("aten ops torch_xla ran on the CPU for it (empty: it touched host tensors)", ())
    frames: tuple[Frame, ...] = _field("the node's ``stack_trace``, outermost first", ())


@dataclasses.dataclass(frozen=True)
class SegmentRecord:
    """A run of consecutive FX nodes executed one way."""

    kind: SegmentKind = _field("``xla`` or ``cpu``")
    ops: tuple[str, ...] = _field("op names of its nodes, in order")
    node: CpuNode | None = _field("for a ``cpu`` segment, the node; for a ``collective`` one, the collective", None)


@dataclasses.dataclass(kw_only=True)
class Partitioned(Event):
    """The bridge cut a graph into XLA graphs and CPU nodes, from ``start`` to ``t`` (the
    extraction at its first call: partitioning, tracing, XLA compilation)."""

    type: ClassVar[EventType] = EventType.PARTITIONED
    graph: int = _field("the ``bridge_graph`` number")
    start: float = _field("monotonic start of the extraction")
    segments: list[SegmentRecord] = _field("its nodes in execution order, grouped as run", factory=list)


@dataclasses.dataclass(kw_only=True)
class XlaGraphSeen(Event):
    """An XLA graph was built (and compiled unless cached) for the device."""

    type: ClassVar[EventType] = EventType.XLA_GRAPH
    graph: int | None = _field("the ``bridge_graph`` it belongs to (``null`` for a lazy graph)")
    segment: int = _field("index of its segment in the bridge graph's ``segments``", 0)
    hash: str = _field("torch_xla's graph hash, hex")
    origin: GraphOrigin = _field("``dynamo`` or ``lazy``", GraphOrigin.DYNAMO)
    hlo_file: str | None = _field("HLO module proto saved beside the log (``capture_hlo=True``), relative to it", None)
    num_partitions: int = _field("devices the graph is partitioned over (SPMD: the mesh's device count), else 1", 1)
    frames: list[Frame] = _field("the user stack that produced the graph (lazy graphs: the sync or host read)", factory=list)
    hlo_format: HloFormat = _field("the form of ``hlo_file``: ``hlo-proto`` (torch_xla) or ``stablehlo`` (TorchTPU)",
                                   HloFormat.HLO_PROTO)
    hlo_error: str = _field("why no ``hlo_file`` was saved, where saving was asked for (a failed lowering)", "")


@dataclasses.dataclass(kw_only=True)
class XlaCompile(Event):
    """XLA compilations, from torch_xla's ``CompileTime`` metric."""

    type: ClassVar[EventType] = EventType.XLA_COMPILE
    graph: int | None = _field("the ``bridge_graph`` compiled (``null``: outside compiled graphs)", None)
    phase: XlaPhase = _field("``extraction``, ``call``, ``dynamo`` or ``outside``")
    count: int = _field("compilations")
    seconds: float = _field("their total time")


@dataclasses.dataclass(kw_only=True)
class GraphCalled(Event):
    """One call of a compiled FX graph, measured in full from torch_xla's metrics (the first
    few calls of each graph; later ones are summed in ``graph_calls``)."""

    type: ClassVar[EventType] = EventType.GRAPH_CALLED
    graph: int = _field("the ``bridge_graph`` number")
    call: int = _field("which call, from 1")
    start: float = _field("monotonic start of the call (after the extraction, for the first)")
    executions: int = _field("XLA graph executions it launched (``RunCachedGraphOutputData``)")
    transfers_to_device: int = _field("host-to-device transfers (``TransferToDeviceTime`` samples)")
    transfers_from_device: int = _field("device-to-host transfers (``TransferFromDeviceTime`` samples)")
    bytes_to_device: int = _field("bytes sent to the device (``InboundData``)", 0)
    bytes_from_device: int = _field("bytes read from the device (``OutboundData``)", 0)
    cpu_fallback_seconds: float = _field("time in its CPU nodes", 0.0)
    transfer_seconds: float = _field("time of its host-device transfers (``TransferTo/FromDeviceTime``)", 0.0)


_SPANS_DOC = (
    "the calls in time, for the timeline: ``[start, seconds]`` for one call, ``[start, seconds, calls, end]`` for "
    "several in a row summed (``seconds`` their total, ``end`` when the last ended); at most "
    "``xlabridge.diagnostics._observe.tally.SPANS`` entries, so that the log does not grow with the steps"
)


@dataclasses.dataclass(kw_only=True)
class GraphCalls(Event):
    """Later calls of one compiled FX graph, summed: count and time only (reading torch_xla's
    metrics on every call would cost more than the call)."""

    type: ClassVar[EventType] = EventType.GRAPH_CALLS
    graph: int = _field("the ``bridge_graph`` number")
    calls: int = _field("how many calls")
    seconds: float = _field("their total time")
    cpu_fallback_seconds: float = _field("time in CPU nodes over those calls", 0.0)
    spans: list[list[float]] = _field(_SPANS_DOC, factory=list)
    cumulative: bool = _field(
        "the calls since observation began, rewritten as they grow (in the log's ``.sums`` file while the process "
        "runs, in the log at its end): of the cumulative ``graph_calls`` of a graph the latest counts. ``false`` "
        "(older logs): calls since the previous ``graph_calls`` of the graph, to be added", False)


@dataclasses.dataclass(kw_only=True)
class Transfer(Event):
    """Host-device transfers outside the observed calls of compiled graphs (lazy code,
    ``.item()``, ``.cpu()``), over the whole observation."""

    type: ClassVar[EventType] = EventType.TRANSFER
    to_device: int = _field("host-to-device transfers")
    from_device: int = _field("device-to-host transfers")
    bytes_to_device: int = _field("bytes sent", 0)
    bytes_from_device: int = _field("bytes read", 0)
    seconds: float = _field("their time (``TransferToDeviceTime`` + ``TransferFromDeviceTime``)", 0.0)


@dataclasses.dataclass(kw_only=True)
class Imported(Event):
    """A heavy package was imported while observed (``xlabridge.diagnostics._observe.probes.imports``)."""

    type: ClassVar[EventType] = EventType.IMPORTED
    module: str = _field("the module imported (``torch_xla``, ``transformers``, ``torch._inductor``...)")
    start: float = _field("monotonic start of its import")


@dataclasses.dataclass(kw_only=True)
class Sync(Event):
    """One ``torch_xla.sync()`` (also ``xm.mark_step()``, which calls it) or one call of a
    ``torch_xla.compile`` region: the lazily traced graph traced, cut, compiled where new, and launched."""

    type: ClassVar[EventType] = EventType.SYNC
    start: float = _field("monotonic start of the call")
    what: str = _field("``torch_xla.sync``, ``torch_xla.compile`` (a region, its sync inside it) or "
                       "``xm.wait_device_ops`` or ``torch_xla exit`` (waiting for launched work)", "torch_xla.sync")
    compiles: int = _field("XLA compilations inside it", 0)
    compile_seconds: float = _field("their seconds (torch_xla's ``CompileTime``)", 0.0)
    frames: list[Frame] = _field("the calling stack, outermost first", factory=list)


@dataclasses.dataclass(kw_only=True)
class SyncCalls(Event):
    """Later calls of ``torch_xla.sync()`` (or of a compile region, or waits for the device) from one
    call site, summed: the first few of each site are ``sync`` events; past them a step adds to its
    site's sums, so that the log does not grow with the steps. Cumulative: of the ``sync_calls`` of
    a site the latest counts."""

    type: ClassVar[EventType] = EventType.SYNC_CALLS
    site: int = _field("number of the call site in the process")
    what: str = _field("as ``sync``'s ``what``", "torch_xla.sync")
    frames: list[Frame] = _field("the site's calling stack, outermost first", factory=list)
    calls: int = _field("calls summed here")
    seconds: float = _field("their total time")
    compiles: int = _field("XLA compilations inside them", 0)
    compile_seconds: float = _field("their seconds", 0.0)
    spans: list[list[float]] = _field(_SPANS_DOC, factory=list)


@dataclasses.dataclass(kw_only=True)
class EagerOps(Event):
    """Ops run in torch_xla's eager mode (``torch_xla.experimental.eager_mode(True)``: each op
    its own XLA computation, compiled once per shape and run at once), over the whole observation,
    from torch_xla's ``EagerOpExecuteTime`` and ``EagerOpCompileTime``."""

    type: ClassVar[EventType] = EventType.EAGER_OPS
    executions: int = _field("eager op executions")
    execute_seconds: float = _field("their seconds summed, each from its launch to its completion (ops queued "
                                    "behind others overlap: the spans' union is the time they took)")
    compiles: int = _field("eager op compilations (their seconds are in ``xla_compile``)", 0)
    compile_seconds: float = _field("their total time", 0.0)
    spans: list[list[float]] = _field(
        "``[start, seconds]`` (monotonic) of the executions torch_xla kept a sample of (its newest 1024)",
        factory=list)
    compile_spans: list[list[float]] = _field("the same for the compilations", factory=list)


@dataclasses.dataclass(kw_only=True)
class ProcessEnd(Event):
    """Observation ended: the process exits, or the ``diagnose()`` block ends."""

    type: ClassVar[EventType] = EventType.PROCESS_END
    start: float = _field("``t`` of this process's ``process_start``")
    environment: dict[str, Any] = _field(
        "the environment at the end (torch_xla may be imported after observation starts)", factory=dict
    )
    main_file: str | None = _field(
        "the program being run, as known at the end (under ``xlabridge report`` observation starts "
        "before ``__main__`` is the user's script)", None
    )
    ending: Ending = _field("why observation ended: ``exit`` (the interpreter exited; older logs say nothing "
                            "else), ``signal`` or ``block`` (a ``diagnose()`` block)", Ending.EXIT)
    exception: str = _field("the uncaught exception the interpreter exited with, ``Type: message`` "
                            "(first line); empty if none", "")
    signal: str = _field("the signal that ends the process (``SIGTERM``), for ``ending`` ``signal``", "")
    frames: list[Frame] = _field("where the program was: the exception's traceback, or the main thread's stack "
                                 "when the signal arrived; outermost first", factory=list)


@dataclasses.dataclass
class TpuCompiled(Event):
    """One distinct XLA graph of the run compiled for a TPU topology by libtpu, after the run.

    Written by the process that compiled it (``diagnose(tpu=...)``'s, or the ``xlabridge
    report --tpu`` command's), not by the one that ran the graph; nothing runs on a TPU.
    """

    type: ClassVar[EventType] = EventType.TPU_COMPILED
    hash: str = _field("the ``xla_graph`` hash it compiles")
    start: float = _field("monotonic start of the compile request")
    num_partitions: int = _field("devices the program is partitioned over", 1)
    hlo_file: str | None = _field("the HLO module proto compiled, relative to the log's directory", None)
    result: dict[str, Any] | None = _field(
        "``xlabridge.tpu.TpuCompileResult.to_dict()`` (schema ``xlabridge.tpu-compile/1``) without the "
        "optimized HLO text: kernels, HBM, cost, versions, label; ``null`` when it did not compile", None
    )
    tpu_hlo_file: str | None = _field("the optimized TPU HLO text saved beside the log, relative to it", None)
    collectives: list[dict[str, Any]] = _field(
        "collectives in the optimized TPU HLO, per kind: ``kind``, ``count``, ``bytes`` (per device, one run)",
        factory=list,
    )
    error: str = _field("why it did not compile: XLA:TPU's refusal, a dead worker, no HLO captured", "")


@dataclasses.dataclass
class TpuPass(Event):
    """The TPU compiles of one report: for which topology, with which libtpu, at what cost."""

    type: ClassVar[EventType] = EventType.TPU_PASS
    start: float = _field("monotonic start of the pass (worker start-up included)")
    topology: str = _field("libtpu's topology name, such as ``v5e:2x2``")
    generation: str = _field("TPU generation (``v5e``)", "")
    libtpu_version: str = _field("libtpu that compiled", "")
    jax_version: str = _field("JAX that drove it", "")
    graphs: int = _field("distinct XLA graphs it was given", 0)
    error: str = _field("why no graph was compiled (libtpu missing, the worker did not start)", "")


@dataclasses.dataclass(kw_only=True)
class LazyGraphSeen(Event):
    """One distinct XLA graph of the process as torch_xla's debug file tells it (``xlabridge
    report --pod``): lazily traced graphs cut at a sync or a host read, and Dynamo's too."""

    type: ClassVar[EventType] = EventType.LAZY_GRAPH
    hash: str = _field("torch_xla's graph hash, hex")
    cause: str = _field("torch_xla's words for what cut it (its first execution's), verbatim")
    compiles: int = _field("XLA compilations of it", 0)
    executions: int = _field("its executions", 0)
    frames: list[Frame] = _field("the Python stack that first cut it, outermost first", factory=list)
    frames_truncated: bool = _field("torch_xla kept only the innermost ``PT_XLA_DEBUG_MAX_FRAME`` frames", False)
    inputs: int = _field("graph inputs", 0)
    outputs: int = _field("graph outputs", 0)
    module: str = _field("name of the module XLA compiled for it (``SyncTensorsGraph.N``); empty if not joined", "")


@dataclasses.dataclass(frozen=True)
class LazyRun:
    """One graph execution, in the order the process ran them."""

    step: int = _field("step ends (``torch_xla.sync()``, ``torch_xla.compile`` regions) before it")
    hash: str = _field("the graph's hash")
    cause: str = _field("torch_xla's words for what cut it")
    compiled: bool = _field("compiled just before this execution", False)


@dataclasses.dataclass(kw_only=True)
class LazyRuns(Event):
    """Every XLA graph execution of the process, in order (what lines processes up by step)."""

    type: ClassVar[EventType] = EventType.LAZY_RUNS
    runs: list[LazyRun] = _field("the executions", factory=list)


@dataclasses.dataclass(kw_only=True)
class GraphCollectives(Event):
    """The module XLA compiled for one graph (partitioned, optimized), as read from XLA's dump."""

    type: ClassVar[EventType] = EventType.COLLECTIVES
    hash: str = _field("torch_xla's graph hash")
    module: str = _field("the module's name in XLA's dump")
    module_id: int = _field("its number in XLA's dump (``module_NNNN.``; compilation order in the process)", 0)
    num_partitions: int = _field("devices it is partitioned over", 1)
    partitioned: dict[str, Any] = _field(
        "``xlabridge.pod.PartitionedGraph.to_dict()``: collectives (kind, bytes, groups, executions, "
        "metadata, Python stack) and input shardings", factory=dict)
    sources: dict[str, Any] = _field(
        "``GraphSources.to_dict()`` (``xlabridge.pod``): its instructions' source lines and distinct stacks", factory=dict)


@dataclasses.dataclass(frozen=True)
class FxLine:
    """One line of an FX graph's generated code and the node it runs."""

    lineno: int = _field("line in the generated code")
    node: str = _field("the FX node's name")
    frames: tuple[Frame, ...] = _field("the node's ``stack_trace``, outermost first", ())


@dataclasses.dataclass(kw_only=True)
class FxCode(Event):
    """The generated code of one FX graph torch_xla's bridge traced (``<eval_with_key>.N``): stacks
    recorded while it ran end in it, and this maps its lines back to the user's."""

    type: ClassVar[EventType] = EventType.FX_CODE
    filename: str = _field("the code's file name, ``<eval_with_key>.N``")
    graph: int | None = _field("the ``bridge_graph`` it belongs to", None)
    lines: list[FxLine] = _field("its lines that run a node with a stack trace", factory=list)


@dataclasses.dataclass(kw_only=True)
class GraphSplit(Event):
    """DDPOptimizer (``torch.compile`` of a DDP model, ``torch._dynamo.config.optimize_ddp`` on) cut the
    graph of ``compile_id`` into buckets of parameters at DDP's bucket size, and split it into one
    submodule per bucket, each handed to the backend on its own (one bucket: not split)."""

    type: ClassVar[EventType] = EventType.GRAPH_SPLIT
    compile_id: str = _field("Dynamo's compile id of the graph")
    bucket_bytes: list[int] = _field("the parameter bytes of each bucket, in graph order", factory=list)
    bucket_cap_bytes: int = _field("the bucket size it cut at: DDP's ``bucket_cap_mb``, in bytes", 0)
    first_bucket_cap_bytes: int = _field("the size of the first bucket DDP reduces (the graph's last)", 0)


EVENT_CLASSES: dict[EventType, type[Event]] = {
    cls.type: cls
    for cls in (
        ProcessStart, ProbeStatus, DynamoCompile, GraphCaptured, GraphBreak, TorchBreak, TraceRead, Recompile,
        CompilePath,
        BridgeGraph, Partitioned, XlaGraphSeen, XlaCompile, GraphCalled, GraphCalls, Transfer, ProcessEnd,
        TpuCompiled, TpuPass, Imported, Sync, EagerOps,
        LazyGraphSeen, LazyRuns, GraphCollectives, FxCode, FxProgram, TpuSlice, BackendCompile, CompiledCalls,
        SyncCalls, SignalReceived, ProcessExit, Stall, StallEnd, CompileRequest, OptimizerSteps, GraphSplit,
        DistSetup, CollectiveWaits, Exiting, ExitWork, RanksWaited,
    )
}
assert set(EVENT_CLASSES) == set(EventType), "every event type has its class"
