"""One FX graph compiled by torch_xla's bridge, observed: how it was split, what each call costs.

``MeteredCall`` does what ``openxla``'s compiled function does (extract the XLA graphs at
the first call, then call them) and reads torch_xla's own metrics around it. Reading a
metric's samples costs tens of microseconds, so the first ``FULLY_MEASURED_CALLS`` calls
are measured in full (executions, transfers, compilations) and later calls only count
compilations, from a counter that costs under a microsecond.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Sequence
from typing import Any

import torch

from xlabridge.diagnostics._collector import Collector, graph_ops

FULLY_MEASURED_CALLS = 3
# ExecuteTime is recorded when an execution finishes, possibly after the call returned;
# RunCachedGraphOutputData is recorded when the bridge launches one of its XLA graphs.
_METRICS = ("CompileTime", "RunCachedGraphOutputData", "TransferToDeviceTime", "TransferFromDeviceTime")


@functools.cache
def _metrics_module() -> Any:
    return importlib.import_module("torch_xla.debug.metrics")


def _snapshot() -> dict[str, int]:
    metrics = _metrics_module()
    return {name: (metrics.metric_data(name) or (0,))[0] for name in _METRICS}


def _uncached_compiles() -> int:
    return _metrics_module().counter_value("UncachedCompile") or 0


class _BridgeObservation:
    """While entered, records how torch_xla's bridge partitions a graph.

    The bridge finds the nodes that leave XLA with ``UnsupportedNodesCollector`` (which
    clears torch_xla's counters before each node, so the fallback ops listed after a node
    are that node's) and compiles each XLA partition with ``extract_internal``.
    """

    def __init__(self) -> None:
        self.segment_ops: dict[Any, list[str]] = {}
        self.fallback_ops: dict[str, list[str]] = {}
        self._restore: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> _BridgeObservation:
        bridge = importlib.import_module("torch_xla._dynamo.dynamo_bridge")
        metrics = _metrics_module()
        observation = self
        base_collector, base_extract = bridge.UnsupportedNodesCollector, bridge.extract_internal

        class RecordingCollector(base_collector):
            def run_node(self, node: torch.fx.Node) -> Any:
                result = super().run_node(node)
                fell_back = metrics.executed_fallback_ops()
                if fell_back:
                    observation.fallback_ops[node.name] = list(fell_back)
                return result

        def recording_extract(xla_model: torch.fx.GraphModule) -> Any:
            compiled = base_extract(xla_model)
            observation.segment_ops[compiled] = graph_ops(xla_model)
            return compiled

        self._restore = [
            (bridge, "UnsupportedNodesCollector", base_collector),
            (bridge, "extract_internal", base_extract),
        ]
        bridge.UnsupportedNodesCollector = RecordingCollector
        bridge.extract_internal = recording_extract
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for owner, name, original in self._restore:
            setattr(owner, name, original)


class MeteredCall:
    """The compiled function of one FX graph, reporting to the collectors active at compile time."""

    def __init__(self, collectors: Sequence[Collector], model: torch.fx.GraphModule, compile_id: str) -> None:
        role = "backward" if any(
            n.op == "placeholder" and n.name.startswith("tangents") for n in model.graph.nodes
        ) else "forward"
        fx_ops = len(graph_ops(model))
        self._model: torch.fx.GraphModule | None = model
        self._compiled: Any = None
        self._calls = 0
        self._graphs = [
            (collector, graph)
            for collector in collectors
            if (graph := collector.safely(collector.new_xla_graph, compile_id, role, fx_ops)) is not None
        ]

    def __call__(self, args: tuple) -> Any:
        if self._compiled is None:
            self._compiled = self._extract(args)
        live = [(c, g) for c, g in self._graphs if c.active]
        if not live:
            return self._compiled(*args)
        self._calls += 1
        if self._calls <= FULLY_MEASURED_CALLS:
            before = self._read(live, _snapshot)
            result = self._compiled(*args)
            after = self._read(live, _snapshot)
            if before is not None and after is not None:
                delta = {k: after[k] - before[k] for k in _METRICS}
                transfers = delta["TransferToDeviceTime"] + delta["TransferFromDeviceTime"]
                for collector, graph in live:
                    collector.safely(
                        collector.record_call, graph, delta["CompileTime"], delta["RunCachedGraphOutputData"], transfers
                    )
            return result
        before = self._read(live, _uncached_compiles)
        result = self._compiled(*args)
        after = self._read(live, _uncached_compiles)
        if before is not None and after is not None:
            for collector, graph in live:
                collector.safely(collector.record_call, graph, after - before, None, None)
        return result

    @staticmethod
    def _read(live: Sequence[tuple[Collector, Any]], reader: Any) -> Any:
        return live[0][0].safely(reader)

    def _extract(self, args: tuple) -> Any:
        bridge = importlib.import_module("torch_xla.core.dynamo_bridge")
        model, self._model = self._model, None
        collectors = [c for c, _ in self._graphs]
        before = collectors[0].safely(_snapshot) if collectors else None
        observation = _BridgeObservation()
        try:
            observation.__enter__()
        except Exception as error:
            for collector in collectors:
                collector.warn("observing torch_xla's graph partitioning", error)
            return bridge.extract_compiled_graph(model, args)
        try:
            compiled = bridge.extract_compiled_graph(model, args)
        finally:
            observation.__exit__(None, None, None)
        after = collectors[0].safely(_snapshot) if collectors else None
        compiles = after["CompileTime"] - before["CompileTime"] if before and after else 0
        for collector, graph in self._graphs:
            collector.safely(
                collector.record_extraction, graph, compiled, observation.segment_ops, observation.fallback_ops, compiles
            )
        return compiled
