"""Events of the time a process spends outside its graphs and its Python: setting up its process
group, waiting in collectives, exiting, and, for a launcher, waiting for its ranks. Facts only,
recorded raw, like every event (``_types``)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from xlabridge.diagnostics._fields import field as _field
from xlabridge.diagnostics.events._base import Event, EventType


@dataclasses.dataclass(kw_only=True)
class DistSetup(Event):
    """One call that sets up ``torch.distributed`` (``init_process_group``, ``new_group``,
    ``init_device_mesh``), from ``start`` to ``t``: the rendezvous with the other ranks and the
    backend's connections. Calls nested in another (a mesh's groups) lie inside its interval."""

    type: ClassVar[EventType] = EventType.DIST_SETUP
    start: float = _field("monotonic start of the call")
    what: str = _field("the call: ``init_process_group``, ``new_group`` or ``init_device_mesh``")
    backend: str = _field("the process-group backend asked for (``nccl``, ``gloo``), where the call names one", "")


@dataclasses.dataclass(kw_only=True)
class CollectiveWaits(Event):
    """The host's time in the blocking calls of one kind of collective, summed over the observation
    (cumulative: of the ``collective_waits`` of an ``op`` the latest counts): ``torch.distributed``'s
    collectives called without ``async_op``, ``Work.wait()``, DDP's collectives at construction and
    the final callbacks of a backward pass, where DDP's reducer waits for its gradients' all-reduce
    (FSDP's for its reduce-scatter). Where the backend does not block the host (NCCL launches on a
    stream and returns), the host's time is what it is: nothing is synchronized to measure it."""

    type: ClassVar[EventType] = EventType.COLLECTIVE_WAITS
    op: str = _field("the call (``all_reduce``, ``barrier``, ``Work.wait``, ``backward final callbacks``, "
                     "``DDP construction``)")
    calls: int = _field("calls")
    seconds: float = _field("their host time summed (calls inside another observed one count once, in it)")
    spans: list[list[float]] = _field(
        "the calls in time: ``[start, seconds]`` for one call, ``[start, seconds, calls, end]`` for several in a row "
        "summed (at most ``xlabridge.diagnostics._observe.tally.SPANS`` entries)", factory=list)


@dataclasses.dataclass(kw_only=True)
class Exiting(Event):
    """The interpreter began to exit (``t``): the program's main module returned, or raised. What follows
    to ``process_end`` is exit work: joining threads, ``atexit`` handlers (inductor's compile workers)."""

    type: ClassVar[EventType] = EventType.EXITING


@dataclasses.dataclass(kw_only=True)
class ExitWork(Event):
    """One piece of shutdown work, from ``start`` to ``t``: inductor's compile-worker pool shut down
    (``SubprocPool.shutdown``: the pool's process and its workers asked to stop and waited for), or the
    observer's own work at the end."""

    type: ClassVar[EventType] = EventType.EXIT_WORK
    OBSERVER: ClassVar[str] = "xlabridge"
    """The ``what`` of the observer's own work after the observation ended (not the process's exit)."""
    start: float = _field("monotonic start")
    what: str = _field("``inductor compile workers``, or ``xlabridge``: the observer's own work after the "
                       "observation ended (reading captures, closing the log), which is not the process's")
    workers: int = _field("worker processes of the pool", 0)
    jobs: int = _field("jobs the pool was given over its life, its readiness check included", 0)
    created: float | None = _field("monotonic time the pool was started, where seen", None)


@dataclasses.dataclass(kw_only=True)
class RanksWaited(Event):
    """A launcher ran its ranks and waited for them, from ``start`` to ``t`` (torchrun's elastic agent:
    rendezvous, starting the workers, monitoring them until they ended)."""

    type: ClassVar[EventType] = EventType.RANKS_WAITED
    start: float = _field("monotonic start of the agent's run")
    workers: int = _field("worker processes it ran on this host (``--nproc_per_node``)", 0)
    state: str = _field("how the run ended, as the agent says (``SUCCEEDED``, ``FAILED``); empty if it raised", "")
