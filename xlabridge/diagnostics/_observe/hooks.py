"""What a backend tells the diagnostics: the graphs it compiles, the path it takes for each, and
whether TorchTPU's programs run on CPU in a TPU's place.

The ``xlabridge`` backend calls these for every graph, observed or not, so this module stays
light: it imports the recorder only, and the probes it reports through when a report is being
collected.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xlabridge import _optional
from xlabridge.diagnostics._observe import recorder as _recorder

if TYPE_CHECKING:
    import torch


def record_graph(gm: torch.fx.GraphModule, *, backend: str) -> None:
    """A backend reports an FX graph Dynamo handed it (the ``xlabridge`` backend does, for each
    one): the graph, its op count and the graph break that ends it, as ``torch._dynamo.explain``
    reads them. Does nothing unless a report is being collected."""
    if not _recorder.active():
        return
    from xlabridge.diagnostics._observe.probes import dynamo_graphs

    dynamo_graphs.record(gm, backend)


def record_compile_path(*, target: str, path: str, reason: str, cpu_only: bool = False) -> None:
    """A backend reports where and how it compiles the graph Dynamo is compiling now."""
    if not _recorder.active():
        return
    from xlabridge.diagnostics import events as ev
    from xlabridge.diagnostics._observe.probes import dynamo_graphs

    _recorder.emit(ev.CompilePath(
        **_recorder.stamp(), compile_id=dynamo_graphs.current_compile_id(), target=target, path=path,
        reason=reason, cpu_only=cpu_only,
    ))


def torchtpu_stand_in() -> bool:
    """Whether TorchTPU's programs run on CPU in their place now: observed, torch_tpu installed, no TPU.

    Then ``backend="tpu"`` (and ``xlabridge`` on a TorchTPU machine) compiles as far as TorchTPU can
    without a chip, and each partition it would lower runs on CPU and is reported (``torchtpu`` probe).
    """
    if not (_recorder.active() and _optional.is_available("torch_tpu")):
        return False
    from xlabridge.diagnostics._observe.probes import torchtpu

    return torchtpu.stand_in()


def tpu_present() -> bool:
    """Whether torch_tpu finds a TPU on this machine (False without torch_tpu)."""
    if not _optional.is_available("torch_tpu"):
        return False
    from xlabridge.diagnostics._observe.probes import torchtpu

    return torchtpu.tpu_present()
