"""A launcher's wait for its ranks: torchrun's elastic agent running its worker group.

``torchrun`` (``torch.distributed.run``) hands its ranks to an elastic agent, whose ``run``
(``SimpleElasticAgent.run``, public in ``torch.distributed.elastic.agent.server``) rendezvouses,
starts the workers and monitors them until they end; the launcher does nothing else meanwhile.
Each ``run`` becomes a ``ranks_waited`` event (the time split's "waiting for ranks" share).
Checked on torch 2.8.0, 2.9.0 and 2.15.0.
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any

from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe import recorder as _recorder
from xlabridge.diagnostics._observe.probes import Installation, ProbeInfo, imports

INFO = ProbeInfo(
    name="torch.distributed.launcher",
    surface="torch.distributed.elastic.agent.server.api.SimpleElasticAgent.run (wrapped)",
    checked="torch 2.8.0, 2.9.0, 2.15.0",
    patch=True,
    why="the agent's run is where torchrun waits for its ranks; the agent offers no hook around it",
    sees="a launcher's time waiting for its ranks (the waiting-for-ranks share)",
)


def _workers(agent: Any) -> int:
    group = getattr(agent, "get_worker_group", None)
    spec = group().spec if callable(group) else None
    return int(getattr(spec, "local_world_size", 0) or 0)


def _wrap(original: Any) -> Any:
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _recorder.active():
            return original(self, *args, **kwargs)
        start = time.monotonic()
        result = None
        try:
            result = original(self, *args, **kwargs)
            return result
        finally:
            end = time.monotonic()
            state = getattr(getattr(result, "state", None), "name", "")
            _recorder.safely(INFO.name, "recording the wait for the ranks", lambda: _recorder.emit(ev.RanksWaited(
                **_recorder.stamp(end), start=start, workers=_recorder.safely(
                    INFO.name, "reading the worker group", _workers, self) or 0, state=state)))

    run.__name__, run.__doc__ = getattr(original, "__name__", "run"), getattr(original, "__doc__", None)
    return run


def install(installation: Installation) -> None:
    def patch(module: ModuleType) -> None:
        installation.replace(module.SimpleElasticAgent, "run", _wrap)

    imports.after_import(installation, "torch.distributed.elastic.agent.server.api", patch)
