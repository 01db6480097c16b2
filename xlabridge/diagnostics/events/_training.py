"""Events of how a training job reaches Dynamo and how far it got: each request to compile (every
way into Dynamo is one), and the optimizer steps it took.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from xlabridge.diagnostics._fields import field as _field
from xlabridge.diagnostics.events._base import Event, EventType, Frame


@dataclasses.dataclass(kw_only=True)
class CompileRequest(Event):
    """Something was handed to Dynamo to compile: ``torch.compile(fn or module)``, ``nn.Module.compile()``,
    the ``@torch.compile`` decorator or ``torch._dynamo.optimize(backend)(fn)``, by the user or by a
    library. Nothing is compiled yet: Dynamo compiles frames when they are called."""

    type: ClassVar[EventType] = EventType.COMPILE_REQUEST
    how: str = _field("``torch.compile``, ``Module.compile`` or ``torch._dynamo.optimize``: the call that asked")
    target: str = _field("what was handed over: a module's class (``Sequential``) or a function's qualified name")
    backend: str = _field("the backend as its user named it (``inductor``, ``openxla``), where it could be told", "")
    code: Frame | None = _field("the code Dynamo will be asked to trace: the module's ``forward``, the function", None)
    skipped: list[Frame] = _field(
        "the frames Dynamo will skip before it traces anything of the target, outermost first (torch's own files, "
        "which its frame callback skips: ``trace_rules.check``); empty where it traces the target", factory=list)
    frames: list[Frame] = _field("the Python stack that asked, outermost first", factory=list)


@dataclasses.dataclass(kw_only=True)
class OptimizerSteps(Event):
    """The optimizer steps the process took so far (cumulative: the latest counts): every
    ``torch.optim.Optimizer.step`` call, seen by torch's global step hook."""

    type: ClassVar[EventType] = EventType.OPTIMIZER_STEPS
    steps: int = _field("steps taken (of the most stepped optimizer, where there are several)")
    last: float | None = _field("monotonic time the last step ended", None)
    spans: list[list[float]] = _field(
        "the steps in time: ``[start, seconds]`` per step, or ``[start, seconds, steps, end]`` where merged (from the "
        "end of one step to the end of the next; the first from the start of the observation)", factory=list)
