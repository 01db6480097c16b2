"""The pod rows (``--pod``): every XLA graph the processes ran, the collectives compiled into
them, and where processes differed."""

from __future__ import annotations

import dataclasses

from xlabridge.diagnostics._fields import field as _field
from xlabridge.diagnostics.report._rows import UNKNOWN_NAME


@dataclasses.dataclass
class RunGraph:
    """One distinct XLA graph a process ran, as torch_xla's debug file tells it (``--pod``):
    lazily traced graphs, cut at a sync or a host read, and Dynamo-compiled ones."""

    hash: str = _field("torch_xla's graph hash")
    origin: str = _field("``lazy`` (traced outside ``torch.compile``) or ``dynamo``")
    cause: str = _field("what cut it: ``sync``, ``torch-xla-compile``, ``pending-flush``, ``host-read``, "
                        "``dynamo-compile``, ``dynamo-execute`` or ``other`` (``xlabridge.pod.GraphCause``)")
    cause_text: str = _field("torch_xla's words for it")
    compiles: int = _field("XLA compilations of it")
    executions: int = _field("its executions")
    filename: str = _field("user source line that cut it (the sync, the host read, the compiled call)")
    lineno: int = _field("line")
    function: str = _field("function")
    place_note: str = _field("how the line was found where torch_xla's stack had no frame of the user's "
                             "(a backward graph: its forward's line), or why there is none", "")
    module: str = _field("the module XLA compiled for it, in XLA's dump", "")
    num_partitions: int = _field("devices it is partitioned over (SPMD)", 1)
    collectives: int = _field("collectives per run of it", 0)
    collective_bytes: int = _field("their bytes per run, per device", 0)
    pid: int = _field("process", 0)
    process: str = _field("``rank N`` where known, else ``pid N``", "")


@dataclasses.dataclass
class CollectiveGroup:
    """The collectives of one XLA graph of one kind, cause and user line, per run of the graph."""

    hash: str = _field("the graph's hash (``RunGraph.hash``)")
    module: str = _field("its compiled module's name")
    module_id: int = _field("its number in the process's XLA dump (``pod-<pid>/xla_dump/module_NNNN.*``)")
    kind: str = _field("``all-gather``, ``all-reduce``, ``reduce-scatter``, ``all-to-all``, ``collective-permute``...")
    count: int = _field("collectives per run of the graph (loop trip counts applied)")
    bytes: int = _field("bytes per run, per device: the whole tensor each works on (``xlabridge.pod._collectives``)")
    replica_groups: list[list[int]] = _field("device groups of the first (empty: all devices)", factory=list)
    category: str = _field("the matching row of the collective causes (``COLLECTIVE_CAUSES``)", "other")
    avoidable: bool = _field("whether that cause is usually avoidable", False)
    suggestion: str = _field("what to change", "")
    filename: str = _field("user source line that produced the tensor (none in its HLO, as for a backward pass's "
                           "gradient reduction: its graph's line, and ``place_note`` says so)", UNKNOWN_NAME)
    lineno: int = _field("line", 0)
    function: str = _field("function", UNKNOWN_NAME)
    op_type: str = _field("the op that needed it (HLO metadata)", "")
    unknown_executions: int = _field("collectives in loops of unknown trip count, counted once", 0)
    place_note: str = _field("where the line comes from when the collective has none of its own", "")
    pid: int = _field("process", 0)


@dataclasses.dataclass
class ProcessDivergence:
    """At one step and position the processes ran different graphs."""

    step: int = _field("training step (syncs before it)")
    position: int = _field("index of the graph among the step's executions")
    graphs: dict[str, str | None] = _field("process → graph hash it ran there (``null``: none)", factory=dict)
    differences: dict[str, list[str]] = _field(
        "process → source lines of its graph that the others' lack (HLO metadata and user frames)", factory=dict)


@dataclasses.dataclass
class UnevenCompile:
    """The same graph at the same place compiled on some processes only (the others wait)."""

    step: int = _field("training step")
    position: int = _field("index among the step's executions")
    hash: str = _field("the graph")
    compiled_on: list[str] = _field("processes that compiled it there", factory=list)
    cached_on: list[str] = _field("processes that had it compiled", factory=list)


@dataclasses.dataclass
class RankDifference:
    """Dynamo compilations of one frame that some ranks of a ``torch.distributed`` job made and the
    others did not (any backend): the others wait for them at their next collective."""

    kind: str = _field("``compile``: Dynamo compilations (first compiles, recompiles, the frames after a break)")
    code: str = _field("the compiled frame's code, ``file:line (function)`` (the same on every rank)")
    ranks: list[str] = _field("the ranks that made them", factory=list)
    others: list[str] = _field("the ranks that did not", factory=list)
    compiles: dict[str, int] = _field("rank → compilations of this frame over the whole run", factory=dict)
    steps: list[int] = _field("optimizer steps taken before each of them (empty: no optimizer stepped)",
                              factory=list)
    seconds: float = _field("their compile seconds on the first of ``ranks``", 0.0)
    compile_ids: list[str] = _field("their Dynamo compile ids on that rank", factory=list)
    breaks: list[str] = _field("graph breaks that ended them, ``file:line: reason``", factory=list)
    guards: list[str] = _field("guards whose failure recompiled them", factory=list)
    others_doing: dict[str, str] = _field("rank → what it did meanwhile, from its timeline", factory=dict)
    filename: str = _field("user source line behind them (the break's, the recompile's, the graph's)", UNKNOWN_NAME)
    lineno: int = _field("line", 0)
    function: str = _field("function", UNKNOWN_NAME)


@dataclasses.dataclass
class CompileRequest:
    """Something handed to Dynamo: ``torch.compile``, ``Module.compile()``, the decorator,
    ``torch._dynamo.optimize``, by the user or a library."""

    how: str = _field("``torch.compile``, ``Module.compile`` or ``torch._dynamo.optimize``")
    target: str = _field("a module's class or a function's qualified name")
    backend: str = _field("the backend as named", "")
    code: str = _field("the code Dynamo is asked to trace, ``file:line (function)``", "")
    skipped: list[str] = _field("frames Dynamo skips before anything of the target (torch's own code), outermost "
                                "first", factory=list)
    compiles_nothing: bool = _field("Dynamo skips the target's own code (its ``forward`` too): only modules of the "
                                    "user's inside it are compiled, each on its own", False)
    filename: str = _field("user source line that asked", UNKNOWN_NAME)
    lineno: int = _field("line", 0)
    function: str = _field("function", UNKNOWN_NAME)
    pid: int = _field("process", 0)
