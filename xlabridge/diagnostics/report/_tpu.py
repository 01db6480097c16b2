"""The TPU view's rows: each distinct XLA graph of a run as XLA:TPU compiled it (compiled on
this machine by libtpu's compile-only client, not run)."""

from __future__ import annotations

import dataclasses
from typing import Any

from xlabridge.diagnostics._fields import field as _field
from xlabridge.diagnostics.report._rows import UNKNOWN_NAME


@dataclasses.dataclass
class TpuGraph:
    """One distinct XLA graph of the run as XLA:TPU compiled it (compiled here, not run)."""

    hash: str = _field("torch_xla's graph hash (``XlaGraph.hashes``)")
    origin: str = _field("``dynamo`` (from a compiled FX graph) or ``lazy``", "dynamo")
    xla_graphs: list[int] = _field("``XlaGraph.index`` of each FX graph it belongs to", factory=list)
    pids: list[int] = _field("processes that ran it", factory=list)
    num_partitions: int = _field("devices it is partitioned over (SPMD), else 1", 1)
    compiled: bool = _field("whether libtpu compiled it (false: see ``error``)", False)
    error: str = _field("why not: XLA:TPU's refusal, a dead worker, no HLO captured", "")
    kernels: int | None = _field("kernels in the optimized TPU HLO (``xlabridge.hlo.parse_kernels``)", None)
    kernel_names: list[str] = _field("their names", factory=list)
    hbm_bytes: int | None = _field(
        "HBM one device needs: arguments + outputs - aliased + temporaries + code", None)
    hbm_capacity_bytes: int | None = _field("one device's HBM (the chip's; half of a v4 chip per TensorCore)", None)
    argument_bytes: int | None = _field("of which arguments", None)
    output_bytes: int | None = _field("outputs", None)
    alias_bytes: int | None = _field("outputs written in place of donated arguments (subtracted)", None)
    temp_bytes: int | None = _field("temporaries (peak)", None)
    code_bytes: int | None = _field("generated code", None)
    fits: bool | None = _field("whether it fits one device's HBM (null: not compiled)", None)
    out_of_memory: str | None = _field("XLA:TPU's message when it ran out of HBM while compiling", None)
    compile_seconds: float | None = _field("libtpu's compile time for it, on this machine", None)
    flops: float | None = _field("XLA cost analysis: floating-point operations per run, per device", None)
    bytes_accessed: float | None = _field("XLA cost analysis: bytes read and written per run, per device", None)
    cost_model_seconds: float | None = _field(
        "XLA's cost-model estimate (``optimal_seconds``; see ``xlabridge.tpu._result.COST_MODEL_NOTE``)", None)
    hbm_seconds: float | None = _field("``bytes_accessed`` at the chip's HBM bandwidth: a floor, not a prediction", None)
    uncosted: list[str] = _field("custom calls the cost model cannot cost, one target per call: the cost figures are "
                                 "the rest of the program's", factory=list)
    findings: list[dict[str, Any]] = _field(
        "what to fix for the TPU read from this compiled program (``xlabridge.tpu.TpuFinding.to_dict()``: ``kind``, "
        "``message``, ``cost_model_seconds``, ``bytes``, ``flops``, ``count``, ``op_name``, ``source_file``, "
        "``source_line``, ``detail``), costliest first; the report's findings group them across programs",
        factory=list)
    devices: int | None = _field("devices of the compiled program", None)
    chips: int | None = _field("chips they sit on", None)
    collectives: list[dict[str, Any]] = _field(
        "collectives as XLA:TPU scheduled them, per kind: ``kind``, ``count``, ``bytes`` per device per run",
        factory=list)
    tpu_hlo_file: str | None = _field("the optimized TPU HLO text, relative to the event logs", None)
    filename: str = _field("user source line of the graph (its FX graph's first op, or a lazy graph's trigger)",
                           UNKNOWN_NAME)
    lineno: int = _field("line", 0)
    function: str = _field("function", UNKNOWN_NAME)
    compile_id: str = _field("the Dynamo graph it belongs to (a graph of a backend that is not an XLA front end: "
                             "``route`` ``torchax``)", "")
    role: str = _field("its program: ``inference``, ``forward`` or ``backward`` (AOTAutograd's)", "")
    backend: str = _field("the backend the run handed its Dynamo graph to (``inductor``)", "")
    route: str = _field("how the program reached libtpu: ``torch_xla`` (its HLO), ``torchtpu`` or ``torchax`` "
                        "(lowered from the FX graph by torchax and jax.export)", "torch_xla")


@dataclasses.dataclass
class TpuBreak:
    """One FX node of a Dynamo graph whose op has no TPU lowering: its graph gets no TPU program."""

    op: str = _field("the ATen op (``aten::adaptive_max_pool2d``)")
    category: str = _field("the matching row of ``causes.TPU_CAUSES``")
    suggestion: str = _field("a rewrite that lowers, where one is known")
    compile_id: str = _field("the Dynamo graph")
    role: str = _field("``inference``, ``forward`` or ``backward``")
    node: str = _field("the FX node's name", "")
    backend: str = _field("the backend the run handed the graph to", "")
    filename: str = _field("user source line of the node", UNKNOWN_NAME)
    lineno: int = _field("line", 0)
    function: str = _field("function", UNKNOWN_NAME)


@dataclasses.dataclass
class TpuSlice:
    """The smallest slice of the generation that fits one training step with data parallelism over
    its batch, found by compiling the step at each size (compiled here, not run)."""

    compile_id: str = _field("the Dynamo graph whose forward and backward make the step")
    generation: str = _field("TPU generation")
    chips: int | None = _field("chips of the smallest slice that fits (null: none tried fits)", None)
    topology: str = _field("the topology that slice was compiled on", "")
    mesh: dict[str, int] = _field("its mesh, axis -> devices", factory=dict)
    batch: int | None = _field("the batch split over the chips", None)
    hbm_bytes: int | None = _field("per-chip HBM of the step on that slice", None)
    capacity_bytes: int | None = _field("one chip's HBM", None)
    tried: list[dict[str, Any]] = _field("each compile: ``devices``, ``topology``, ``fits``, ``chips``, ``hbm_bytes``, "
                                         "``capacity_bytes``, ``error``", factory=list)
    reason: str = _field("why no slice fits", "")
    filename: str = _field("user source line of the graph", UNKNOWN_NAME)
    lineno: int = _field("line", 0)
    function: str = _field("function", UNKNOWN_NAME)


@dataclasses.dataclass
class TpuView:
    """Every distinct XLA graph of the run compiled for one TPU topology after the run."""

    topology: str = _field("libtpu topology name (``v5e:2x2``)")
    generation: str = _field("TPU generation", "")
    libtpu_version: str = _field("libtpu that compiled", "")
    jax_version: str = _field("JAX that drove it", "")
    label: str = _field("what the figures are: compiled for TPU by libtpu on this machine, not run", "")
    seconds: float = _field("wall time of the TPU compiles (after the run; worker start-up included)", 0.0)
    compile_seconds: float = _field("libtpu's compile time summed over the graphs", 0.0)
    hbm_capacity_bytes: int | None = _field("one device's HBM", None)
    graphs: list[TpuGraph] = _field("one row per distinct XLA graph, and per program of a Dynamo graph of any "
                                    "other backend (``route`` ``torchax``)", factory=list)
    breaks: list[TpuBreak] = _field("ops of those Dynamo graphs with no TPU lowering", factory=list)
    slices: list[TpuSlice] = _field("per training step, the smallest slice that fits it", factory=list)
    error: str = _field("why nothing was compiled (libtpu missing, the worker did not start)", "")
