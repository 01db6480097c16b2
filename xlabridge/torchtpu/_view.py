"""Compile captured TorchTPU graphs for a TPU topology: kernels, HBM per chip, fits, seconds."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any

from xlabridge.torchtpu._capture import TpuGraph
from xlabridge.torchtpu._lower import lower_to_stablehlo

logger = logging.getLogger(__name__)

__all__ = ["TorchTpuGraphResult", "compile_graphs"]

ROUTE = "torchax+jax.export"
"""How the graphs are lowered (TorchTPU's own lowering needs a TPU): docs/guides/torchtpu.md."""


@dataclasses.dataclass
class TorchTpuGraphResult:
    """One captured graph: its StableHLO (by ``ROUTE``) and what libtpu compiled of it, or why not."""

    graph: TpuGraph
    stablehlo: str | None
    lower_seconds: float
    result: Any | None
    """``xlabridge.tpu.TpuCompileResult``, None when lowering or compiling failed."""
    error: str | None = None
    route: str = ROUTE

    def to_dict(self) -> dict[str, Any]:
        """Plain data for an event log (without the StableHLO and the optimized HLO)."""
        result = None
        if self.result is not None:
            result = {key: value for key, value in self.result.to_dict().items() if key != "hlo"}
        return {
            "graph": self.graph.to_dict(),
            "route": self.route,
            "lower_seconds": self.lower_seconds,
            "tpu": result,
            "error": self.error,
        }


def compile_graphs(
    graphs: Sequence[TpuGraph], target: str = "v6e:2x2", *, compiler: Any | None = None
) -> list[TorchTpuGraphResult]:
    """Lower each graph and compile it for ``target`` with libtpu's compile-only client (the TPU
    view, ``xlabridge.tpu.compile_row``).

    ``compiler``: an open ``xlabridge.tpu.TpuCompiler`` to reuse (one worker for many calls);
    by default one is started for this call. A graph that fails to lower or that XLA refuses
    gets its error in ``error``; the others are compiled all the same.
    """
    from xlabridge import tpu

    graphs = list(graphs)
    wrong = [i for i, g in enumerate(graphs) if not isinstance(g, TpuGraph)]
    if wrong:
        raise TypeError(f"graphs must be TpuGraphs (GraphCapture().graphs); not so at position(s) {wrong}")
    own = compiler is None
    compiler = tpu.TpuCompiler(target) if own else compiler
    rows = []
    try:
        for graph in graphs:
            started = time.perf_counter()
            try:
                text = lower_to_stablehlo(graph)
            except Exception as error:  # noqa: BLE001 - torchax lacks an op, JAX refuses a shape: the row says so
                logger.warning("lowering %s to StableHLO failed: %s", graph.name, error)
                rows.append(TorchTpuGraphResult(graph, None, time.perf_counter() - started, None,
                                                f"lowering failed: {type(error).__name__}: {error}"))
                continue
            lowered = time.perf_counter() - started
            row = tpu.compile_row(compiler, tpu.Program(graph.name, text, tpu.ProgramFormat.STABLEHLO), topology=target)
            rows.append(TorchTpuGraphResult(graph, text, lowered, row.result, row.error))
    finally:
        if own:
            compiler.close()
    return rows
