"""The probes: the only code in xlabridge that touches torch's or torch_xla's internals.

One module per upstream surface. Each names, in its ``INFO``, what it touches, the versions
it was checked against, whether it patches, why that surface (for a patch: why nothing else
gives the fact) and what a report lacks without it. All of them are installed, and removed,
through one mechanism, ``Installation``; every wrapper calls the original it wraps.

=====================  ===================================================================
``dynamo.compiles``    ``torch._dynamo.callback_handler`` start/end callbacks (compile
                       intervals) and ``torch._dynamo.utils.get_compilation_metrics()``
                       (recompile reasons): no patch
``dynamo.graphs``      graphs handed to a backend: the ``xlabridge`` backend reports its own
                       through ``xlabridge.diagnostics._observe.hooks.record_graph``; for other backends a
                       wrapper of ``OutputGraph.call_user_compiler`` (patch)
``dynamo.breaks``      ``torch._logging.trace_structured`` (patch): graph breaks as torch records
                       them (its ``dynamo_graph_break_reason`` artifacts): type, code, hints, stack
``xla.helper``         ``torch._dynamo.backends.torchxla.xla_backend_helper`` (patch): the FX
                       graphs torch_xla's bridge compiles, and each call of them
``xla.bridge``         torch_xla's ``dynamo_bridge`` partitioning, wrapped only while the bridge
                       extracts a graph (patch): segments, fallback ops, graph hashes, HLO
``xla.metrics``        ``torch_xla.debug.metrics`` (public): executions, transfers, compiles
``xla.eager``          ``torch_xla.debug.metrics`` (public): eager-mode ops' executions
``torchtpu.compiler``  TorchTPU's ``backend="tpu"`` (patch): its forward/backward graphs, the
                       partitions its split compiler cuts at collectives, their compile time and
                       calls; without a TPU it runs each partition on CPU in its place
=====================  ===================================================================

A probe that cannot be installed, or that a self-test or an in-run cross-check finds silent,
is reported once (``DiagnosticsWarning``) and in the report's ``probes`` section.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from xlabridge.diagnostics import events as ev


@dataclasses.dataclass(frozen=True)
class ProbeInfo:
    """What a probe touches and why; shown in the report when it cannot see."""

    name: str
    surface: str
    checked: str
    patch: bool
    why: str
    sees: str


class Installation:
    """Patches and registrations made for the active recorders, undone in reverse order."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def replace(self, owner: Any, name: str, make_wrapper: Callable[[Any], Any]) -> None:
        """Replace ``owner.name`` by ``make_wrapper(original)``; ``AttributeError`` if it is gone."""
        original = getattr(owner, name)
        setattr(owner, name, make_wrapper(original))
        self._undo.append(lambda: setattr(owner, name, original))

    def register(self, add: Callable[[Any], Any], remove: Callable[[Any], Any], item: Any) -> None:
        """``add(item)`` now, ``remove(item)`` on restore."""
        add(item)
        self._undo.append(lambda: remove(item))

    def on_restore(self, undo: Callable[[], None]) -> None:
        self._undo.append(undo)

    def restore(self) -> None:
        while self._undo:
            undo = self._undo.pop()
            try:
                undo()
            except (ValueError, AttributeError):  # already removed upstream (torch._dynamo.reset clears callbacks)
                pass


@dataclasses.dataclass
class Status:
    """A probe's state in this process, as its ``probe_status`` event says."""

    info: ProbeInfo
    state: ev.ProbeState = ev.ProbeState.OK
    reason: str = ""

    def event(self, stamp: dict[str, Any]) -> ev.ProbeStatus:
        return ev.ProbeStatus(
            **stamp, probe=self.info.name, state=self.state, reason=self.reason,
            surface=self.info.surface, patch=self.info.patch, sees=self.info.sees,
        )
