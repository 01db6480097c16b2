"""The events of graphs compiled by backends that are not XLA front ends (inductor, eager,
aot_eager...): their compiles and calls (the time split), and the TPU view's programs of them and
slice answers. Facts only, recorded raw, like every event (``_types``)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from xlabridge.diagnostics._fields import field as _field
from xlabridge.diagnostics.events._base import Event, EventType, Frame, HloFormat


@dataclasses.dataclass(frozen=True)
class LoweringBreak:
    """One FX node whose ATen op has no TPU lowering (torchax has none, torch no decomposition into ops it has)."""

    op: str = _field("the ATen op (``aten::adaptive_max_pool2d``)")
    node: str = _field("the FX node's name")
    frames: tuple[Frame, ...] = _field("the node's ``stack_trace``, outermost first", ())


@dataclasses.dataclass(kw_only=True)
class FxProgram(Event):
    """A program a TPU would compile for one Dynamo graph handed to a backend that is not an XLA
    front end (inductor, eager, aot_eager...): its forward or backward as AOTAutograd traces it,
    lowered to StableHLO by torchax after the run (``hlo_file``), or why not."""

    type: ClassVar[EventType] = EventType.FX_PROGRAM
    compile_id: str = _field("the Dynamo graph's compile id")
    backend: str = _field("the backend the run handed the graph to (``inductor``)")
    role: str = _field("``inference``, ``forward``, ``backward``, or ``training-step`` (forward and backward as "
                       "one program, compiled only to find the slice that fits)")
    hash: str = _field("SHA-256 of the StableHLO, hex (the ``tpu_compiled`` events name it); empty without one", "")
    hlo_file: str | None = _field("the StableHLO saved beside the log, relative to it", None)
    hlo_format: HloFormat = _field("``stablehlo``", HloFormat.STABLEHLO)
    error: str = _field("why there is no program: tracing or lowering failed, torchax missing", "")
    breaks: list[LoweringBreak] = _field("nodes whose op has no TPU lowering (then ``hlo_file`` is null)", factory=list)
    frames: list[Frame] = _field("stack of the graph's first op, outermost first", factory=list)
    fx_ops: int = _field("call nodes of the program's ATen graph", 0)
    batch: int | None = _field("the batch (first dimension of the graph's data inputs), for data parallelism", None)
    mesh_axis: str = _field("``training-step``: the mesh axis its batch inputs are sharded over in ``hlo_file`` "
                            "(a mesh of 2 there; the TPU pass sets its size per slice)", "")
    seconds: float = _field("tracing and lowering time (after the run)", 0.0)


@dataclasses.dataclass(kw_only=True)
class TpuSlice(Event):
    """The smallest slice of a TPU generation whose per-chip HBM fits one training step, found by
    compiling the step with its batch sharded over N chips for N = 1, 2, 4, ... (data parallelism)."""

    type: ClassVar[EventType] = EventType.TPU_SLICE
    compile_id: str = _field("the Dynamo graph whose training step it is")
    hash: str = _field("the ``training-step`` program's hash")
    generation: str = _field("TPU generation (``v5e``)")
    batch: int | None = _field("the batch sharded over the chips", None)
    mesh: dict[str, int] = _field("the mesh of the slice that fits, axis -> chips (``{\"data\": 4}``)", factory=dict)
    chips: int | None = _field("chips of the smallest slice that fits (null: none tried fits)", None)
    topology: str = _field("the topology compiled for that slice", "")
    tried: list[dict[str, Any]] = _field(
        "each compile: ``chips``, ``topology``, ``fits``, ``hbm_bytes`` per chip, ``capacity_bytes``, ``error``",
        factory=list)
    reason: str = _field("why the search stopped without a fit (the batch does not split further, ...)", "")


@dataclasses.dataclass(kw_only=True)
class BackendCompile(Event):
    """A backend compiled one graph AOTAutograd handed it, from ``start`` to ``t`` (inductor: code
    generation, the C++/Triton compile, autotuning, waiting on its compile workers)."""

    type: ClassVar[EventType] = EventType.BACKEND_COMPILE
    start: float = _field("monotonic start")
    compile_id: str = _field("Dynamo's compile id (empty for a deferred backward compiled outside Dynamo)", "")
    backend: str = _field("the compiler (``inductor``)", "inductor")
    role: str = _field("``forward``, ``backward`` or ``inference``", "forward")


@dataclasses.dataclass(kw_only=True)
class CompiledCalls(Event):
    """The calls of one compiled graph of a backend that is not an XLA front end (inductor, eager,
    aot_eager...), timed on the host clock around the call, over the observation: the forward as
    Dynamo calls it, the backward as autograd runs AOTAutograd's compiled backward node. On CUDA a
    call's host time is its launches', not the GPU's, unless the program synchronizes inside it."""

    type: ClassVar[EventType] = EventType.COMPILED_CALLS
    compile_id: str = _field("Dynamo's compile id of the graph")
    backend: str = _field("the backend as its user names it (``inductor``)")
    role: str = _field("``forward`` (the call Dynamo makes: an inference call too) or ``backward``")
    calls: int = _field("calls")
    seconds: float = _field("their host time summed")
    spans: list[list[float]] = _field("``[start, seconds]`` of each call, for the timeline (the first "
                                      "``compiled_calls.TIMELINE_CALLS``)", factory=list)
    device_spans: list[list[float]] = _field(
        "CUDA: ``[start, seconds]`` of each of those calls on the GPU (CUDA timing events read when the observation "
        "ended), ``start`` on the host clock, no later than the work ran", factory=list)
