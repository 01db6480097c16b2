"""The report's rows: one dataclass per kind of thing a report lists (plain data, no behaviour
beyond small derived values). Every field is documented for ``docs/report-schema.md``."""

from __future__ import annotations

import dataclasses
import enum

from xlabridge.diagnostics._fields import field as _field

UNKNOWN_NAME = "<unknown>"
"""The file and function of a place no frame names (line 0)."""


@dataclasses.dataclass
class DynamoGraph:
    """One FX graph Dynamo captured and handed to a backend."""

    compile_id: str = _field("Dynamo compile id (``frame/recompile``)")
    op_count: int = _field("``call_function`` nodes (``torch._dynamo.explain``'s ``ops_per_graph`` length)")
    backend: str = _field("the backend it was handed to")
    path: str = _field("for ``xlabridge``: ``forward-only``, ``aot-autograd`` or ``inductor``; else empty", "")
    path_reason: str = _field("why that path", "")
    ends_in_break: bool = _field("whether it ends at a Dynamo graph break", False)
    tracing_seconds: float | None = _field("Dynamo's compile time for its frame (tracing and the backend's compile call)", None)
    filename: str = _field("user source file of its first op", UNKNOWN_NAME)
    lineno: int = _field("line in ``filename``", 0)
    function: str = _field("function of that line", UNKNOWN_NAME)
    pid: int = _field("process that compiled it", 0)
    ddp_buckets: list[int] = _field(
        "DDPOptimizer (``torch.compile`` of a DDP model, ``optimize_ddp`` on): the parameter bytes of each bucket "
        "it cut this graph into at DDP's bucket size, graph order; with more than one, the graph was split into "
        "that many submodules at the buckets' boundaries, each compiled by the backend on its own; empty where "
        "DDPOptimizer did not handle the graph", factory=list)
    ddp_bucket_cap_bytes: int | None = _field("the bucket size DDPOptimizer cut at: DDP's ``bucket_cap_mb``, in "
                                              "bytes", None)
    ddp_first_bucket_cap_bytes: int | None = _field("the size of DDP's first bucket (the graph's last parameters, "
                                                    "reduced first)", None)


@dataclasses.dataclass
class DynamoBreak:
    """Dynamo stopped capturing: the FX graph before this point ends here."""

    reason: str = _field("first line of Dynamo's reason")
    category: str = _field("from torch's code for the break: the matching row of ``causes.GRAPH_BREAK_CAUSES`` "
                           "(``other`` for a code no row names); a break without a code by its text, "
                           "``causes.DYNAMO_CAUSES``")
    filename: str = _field("user source file of the break (innermost user frame)")
    lineno: int = _field("line in ``filename``")
    function: str = _field("function of that line")
    suggestion: str = _field("how to avoid the break")
    detail: str = _field("Dynamo's full reason (explanation, hints)", "")
    compile_id: str = _field("compile id of the graph the break ends", "")
    pid: int = _field("process", 0)
    code: str = _field("torch's graph-break code (``GB0291``): from the page torch names (torch 2.9 and later), "
                       "else from its registry by the break's type", "")
    url: str = _field("the page of that code on torch's graph-break site, where torch names one", "")
    explanation: str = _field("torch's explanation of the break", "")
    hints: list[str] = _field("torch's hints, in its order", factory=list)
    source: str = _field("``torch``: as torch itself recorded the break (its structured trace: what "
                         "``TORCH_LOGS=graph_breaks`` prints); ``backend``: from the graph handed to the backend "
                         "(``compile_subgraph_reason``), where torch's record was not seen", "backend")
    ends_graph: bool = _field("a graph Dynamo handed to a backend ends at this break (a break before any op, "
                              "or one that made Dynamo skip its frame, ends none)", True)
    library: str = _field("the library the break is inside (``torch``, ``transformers``): the package of the "
                          "innermost frame of torch's stack outside the program and Python's standard library; "
                          "empty where that frame is the user's own code", "")
    library_filename: str = _field("that frame's file (``.../torch/nn/parallel/distributed.py``); ``filename`` "
                                   "stays the user's line that reached it", "")
    library_lineno: int = _field("line in ``library_filename``", 0)
    library_function: str = _field("function of that line", "")
    expected: bool = _field("torch breaks there by design whatever the user's code (DDP's own forward under "
                            "``torch.compile``): nothing to fix", False)


@dataclasses.dataclass
class Recompile:
    """Dynamo compiled a frame again because a guard of an earlier compilation failed."""

    reason: str = _field("the guard failure Dynamo names (``frame/n: guard``); first line")
    filename: str = _field("user location: the recompiled code when it is the user's, else the user's caller")
    lineno: int = _field("line in ``filename``")
    function: str = _field("function of that line")
    category: str = _field("the matching row of ``causes.RECOMPILE_CAUSES``", "other")
    suggestion: str = _field("how to avoid it", "")
    compile_id: str = _field("compile id of the new compilation", "")
    code: str = _field("the recompiled code object, ``file:line (function)``", "")
    guard: str = _field("the guard that failed, alone (without Dynamo's ``frame/n:`` and its source comment)", "")
    pid: int = _field("process", 0)


@dataclasses.dataclass
class RecompileGroup:
    """The recompiles of one user location, grouped."""

    filename: str = _field("user location")
    lineno: int = _field("line")
    function: str = _field("function")
    count: int = _field("recompiles there")
    first_reason: str = _field("reason of the first")
    last_reason: str = _field("reason of the last")
    category: str = _field("cause of the last")
    guards: list[str] = _field("the distinct guards that failed, in order (``Recompile.guard``)", factory=list)


@dataclasses.dataclass
class Segment:
    """A run of consecutive FX nodes executed one way: one XLA graph, or one node on the CPU."""

    kind: str = _field("``xla`` (one XLA graph), ``cpu`` (one node run on the host) or ``collective`` (TorchTPU: "
                       "a collective compiled as a program of its own)")
    ops: list[str] = _field("op names, in order", factory=list)


@dataclasses.dataclass
class XlaGraph:
    """One FX graph as an XLA front end compiled it (torch_xla's Dynamo bridge, or TorchTPU's split
    compiler), and what each call costs."""

    index: int = _field("position in ``hlo.graphs``; ``HloBreak.graph`` refers to it")
    compile_id: str = _field("Dynamo compile id it belongs to")
    role: str = _field("``forward`` or ``backward`` (AOTAutograd's, recognised by its tangents)")
    fx_ops: int = _field("call nodes in the graph the bridge received")
    xla_graphs: int = _field("XLA programs it was cut into (``1``: not split); TorchTPU: a collective is one")
    compiles: int = _field("XLA compilations of it (extraction and later calls)", 0)
    compile_seconds: float = _field("their time", 0.0)
    extraction_seconds: float | None = _field("the bridge's extraction at the first call (partitioning, tracing, compiling)", None)
    executions_per_call: int = _field("XLA graph executions per call (last fully measured call)", 0)
    transfers_per_call: int = _field("host-device transfers per call, both ways (last fully measured call)", 0)
    bytes_per_call: int = _field("bytes moved per call, both ways (last fully measured call)", 0)
    seconds_per_call: float | None = _field("mean call time after the first call (first call if it is the only one)", None)
    cpu_fallback_seconds_per_call: float = _field("time in CPU nodes per call (same calls)", 0.0)
    calls: int = _field("calls while observed", 0)
    segments: list[Segment] = _field("its nodes in execution order, grouped as run", factory=list)
    hashes: list[str] = _field("torch_xla graph hash of each XLA segment, in order", factory=list)
    hlo_files: list[str | None] = _field("HLO proto file of each hash (``capture_hlo``), relative to the log", factory=list)
    graph: int = _field("the process's bridge graph number", 0)
    pid: int = _field("process", 0)
    filename: str = _field("user source line: a forward graph's frame (its first op's line), a backward graph's "
                           "forward's", UNKNOWN_NAME)
    lineno: int = _field("line", 0)
    function: str = _field("function", UNKNOWN_NAME)
    compiler: str = _field("``torch_xla`` (its Dynamo bridge) or ``torchtpu`` (TorchTPU's split compiler)", "torch_xla")
    buckets: list[str] = _field("TorchTPU, a graph with dynamic shapes: its symbols' bounds in each bucket, one "
                                "program per bucket compiled at the bound (``hashes`` holds every bucket's)",
                                factory=list)


@dataclasses.dataclass
class HloBreak:
    """One FX node that cut its FX graph into several XLA programs: run outside XLA (torch_xla), or a
    collective compiled on its own (TorchTPU)."""

    op: str = _field("aten op name: the fallback op, the node's op when it touched host tensors, or the collective")
    category: str = _field("``cpu-fallback``, ``host-transfer``, ``host-tensor`` (``causes.HLO_CAUSES``) or "
                           "``collective-split`` (TorchTPU)")
    filename: str = _field("user source line of the node")
    lineno: int = _field("line")
    function: str = _field("function")
    suggestion: str = _field("how to keep it in XLA")
    graph: int = _field("``index`` of its ``XlaGraph``", 0)
    node: str = _field("the FX node's name", "")


@dataclasses.dataclass
class ProbeReport:
    """What one probe could see."""

    name: str = _field("probe name")
    state: str = _field("``ok``, ``unavailable``, ``silent`` or ``failed``")
    reason: str = _field("why, when not ``ok``", "")
    surface: str = _field("the upstream names it reads or wraps", "")
    patch: bool = _field("whether it wraps an upstream function", False)
    sees: str = _field("what the report lacks when it cannot see", "")


class ProcessEnding(str, enum.Enum):
    """How a process ended, as far as the run's logs (and the process that waited for it) tell."""

    EXITED = "exited"
    """It ended normally: exit status 0, or unknown with no exception and no signal."""
    FAILED = "failed"
    """It exited with a non-zero status or an uncaught exception."""
    KILLED = "killed"
    """A signal ended it (``signal``): SIGTERM, SIGINT, or SIGKILL (the kernel's OOM killer sends it)."""
    VANISHED = "vanished"
    """It stopped without a word and nothing else tells how: SIGKILL (the OOM killer), ``os._exit()``, a
    crash in native code, or a machine that went away; its log holds everything up to then."""
    RUNNING = "running"
    """It was still running when the report was read (the report so far)."""
    OBSERVED = "observed"
    """A ``diagnose()`` block ended; the process went on."""
    TRACED = "traced"
    """Read from torch's structured trace, which does not record how a process ended."""


@dataclasses.dataclass
class Process:
    """One process of the run: who it was, how far it got and how it ended."""

    pid: int = _field("process id")
    rank: int | None = _field("its rank in a distributed run, where known", None)
    world: int | None = _field("number of processes in the run, where known", None)
    wall_seconds: float | None = _field("seconds observed: to its ``process_end``, or to its last event without one",
                                        None)
    ending: str = _field("a ``ProcessEnding`` value: ``exited``, ``failed``, ``killed``, ``vanished``, ``running`` or "
                         "``observed``, ``traced``", ProcessEnding.EXITED.value)
    how: str = _field("how it ended, in words (``killed by SIGKILL (exit status 137)``)", "")
    exit_status: int | None = _field("as a shell gives it: the exit status, 128+N for signal N (null: unknown)", None)
    signal: str = _field("the signal that ended it (``SIGTERM``), or the last one it received and handled", "")
    exception: str = _field("the uncaught exception it exited with, ``Type: message``", "")
    last_event_seconds: float | None = _field("seconds from its start to its last event (its last sign of life)",
                                              None)
    started: float | None = _field("wall-clock time (``time.time()``) of its start: lines processes up", None)
    steps: int = _field("steps it completed as far as the probes count them: its optimizer steps, else its "
                        "``torch_xla.sync()`` calls and compile regions, else the calls of its most called compiled "
                        "graph", 0)
    filename: str = _field("user source line it was at when it ended (an exception's, a signal's); empty where "
                           "none is known (an exit at the end of the program)", "")
    lineno: int = _field("line (0: none)", 0)
    function: str = _field("function (empty: none)", "")
    run_id: str = _field("the run it belongs to (``xlabridge report``'s)", "")
    role: str = _field("``launcher`` (torchrun's elastic launcher, which waits for its ranks), ``rank`` (a process of a "
                       "``torch.distributed`` job), or empty: a process of its own", "")


@dataclasses.dataclass
class Finding:
    """Something the report concludes from the events, worth acting on. ``Report.findings`` is
    ranked: the costliest first (``cost_seconds``), findings without a cost in time after them."""

    kind: str = _field("``dynamo-break``, ``recompiles``, ``hlo-break``, ``collective-split``, ``cpu-only-graph``, "
                       "``probe``, ``cache``, "
                       "``compiled-before-observation``, ``tpu-does-not-fit``, ``tpu-refused``, "
                       "``avoidable-collective``, ``divergence``, ``uneven-compile``, ``stall``, ``process-ended``, ``compile-failure`` (a frame Dynamo gave "
                       "up on, read from a trace), ``ddp-split`` (DDPOptimizer split a graph at DDP's buckets), "
                       "``compile-skipped`` (a request to compile whose code Dynamo skips), ``compile-workers-exit`` "
                       "(inductor's compile-worker pool shutting down at exit); read from compiled TPU programs "
                       "(``compiled_for``): ``tpu-padding``, ``tpu-f32-matmul``, ``tpu-copy``, ``tpu-hbm``, "
                       "``tpu-uncosted``")
    message: str = _field("what it means and what to do")
    graph: int | None = _field("``XlaGraph.index`` it is about, if any", None)
    cost_seconds: float | None = _field(
        "what it cost in this run, in seconds of the processes' wall time (``cost`` says of what); null: not a "
        "cost in time (a graph that does not fit, a probe that cannot see)", None)
    cost: str = _field("what ``cost_seconds`` adds up, in words", "")
    count: int = _field("how many times it happened (breaks, recompiles, calls through a fallback)", 1)
    category: str = _field("the cause's row (``causes``), where the kind has several", "")
    code: str = _field("torch's graph-break code (``GB0124``) where torch gives one", "")
    url: str = _field("the page explaining it (torch's graph-break site), where there is one", "")
    filename: str = _field("user source line to change", UNKNOWN_NAME)
    lineno: int = _field("line", 0)
    function: str = _field("function", UNKNOWN_NAME)
    pid: int | None = _field("process it was seen in (null: several or the run as a whole)", None)
    compiled_for: str = _field("for a finding read from compiled TPU programs, not measured: what compiled them "
                               "(\"compiled for TPU v5e (v5e:2x2) by libtpu 0.0.23, not run\"); such findings rank "
                               "after the measured ones, by ``cost_model_seconds``", "")
    cost_model_seconds: float | None = _field(
        "for a finding read from compiled TPU programs: XLA's cost-model seconds apportioned to it, summed over its "
        "programs (one run each; a ranking, not a time measured on a TPU); null: none", None)


@dataclasses.dataclass
class TimeSplit:
    """One process's wall time split into exclusive shares, in seconds."""

    pid: int = _field("the process")
    wall: float = _field("seconds from the start of observation to its end")
    tracing: float = _field("Dynamo's compilations and the bridge's extractions, less XLA compilation in them")
    xla_compile: float = _field("XLA compilation, wherever it happened (torch_xla's ``CompileTime`` and "
                                "``EagerOpCompileTime``)")
    execution: float = _field("calls of compiled graphs, less their XLA compilation and CPU-fallback work; for "
                              "graphs of other backends (inductor...), the host time of each call and of its "
                              "compiled backward (on CUDA: the launches, unless the program waits inside a call)")
    cpu_fallback: float = _field("time in the CPU nodes of partitioned graphs during their calls")
    other: float = _field("the rest: Python between graphs, lazy tensor tracing, host reads outside the shares above")
    imports: float = _field("importing torch_xla, transformers and the other heavy packages after observation began", 0.0)
    lazy: float = _field("``torch_xla.sync()`` / ``mark_step()`` outside compiled graphs: running the lazily traced "
                         "graphs (their XLA compilation counts in ``xla_compile``)", 0.0)
    transfers: float = _field("host-device transfers outside compiled graphs and syncs (torch_xla's "
                              "``TransferToDeviceTime`` and ``TransferFromDeviceTime``)", 0.0)
    eager: float = _field("ops run in torch_xla's eager mode, each its own XLA computation, outside the shares "
                          "above (torch_xla's ``EagerOpExecuteTime``)", 0.0)

    backend_compile: float = _field("a backend's own compile of the graphs AOTAutograd handed it (inductor's code "
                                    "generation, C++/Triton compile, autotuning, its compile workers), apart from "
                                    "Dynamo's and AOTAutograd's tracing", 0.0)

    process_group: float = _field("setting up ``torch.distributed``: ``init_process_group``, ``new_group``, "
                                  "``init_device_mesh`` (the rendezvous with the other ranks), less the shares above "
                                  "inside them", 0.0)
    collective_wait: float = _field("the host waiting in collectives: ``torch.distributed``'s blocking calls, "
                                    "``Work.wait()``, DDP's collectives at construction, a backward pass's final "
                                    "callbacks (DDP's wait for its gradients' all-reduce, FSDP's for its "
                                    "reduce-scatter); on a GPU only what blocks the host", 0.0)
    waiting_for_ranks: float = _field("a launcher (torchrun) running its ranks and waiting for them", 0.0)
    exit: float = _field("the interpreter's exit, from the return of the program's main module: threads joined, "
                         "``atexit`` handlers (inductor's compile-worker pool shut down, ``compile_workers_exit``), "
                         "and, where the process that waited for it saw it exit, the interpreter's teardown after "
                         "the observation ended (the observer's own work there left out)", 0.0)
    compile_workers_exit: float = _field("of ``exit``: inductor's compile-worker pool shutting down", 0.0)
    helpers: int = _field("helper processes folded into this one: Python children it started with ``-c`` "
                          "(torch's checks during a compile), run within its time and not listed apart", 0)
    helper_seconds: float = _field("the helpers' own observed seconds, summed (within this process's wall)", 0.0)

    SHARES = ("imports", "process_group", "tracing", "backend_compile", "xla_compile", "execution", "lazy", "eager",
              "transfers", "cpu_fallback", "collective_wait", "waiting_for_ranks", "exit",
              "other")

    def shares(self) -> dict[str, float]:
        """Each share as a fraction of the wall time."""
        return {name: (getattr(self, name) / self.wall if self.wall > 0 else 0.0) for name in self.SHARES}
