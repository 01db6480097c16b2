"""Turns what the hooks observe into a ``Report``; never lets its own failure reach the user.

The hooks (``_hooks.py``) call the ``record_*`` methods through ``safely``: an exception in
the bookkeeping becomes one ``DiagnosticsWarning`` and a line in ``report.warnings``, and
the user's compilation and run go on exactly as without xlabridge.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from xlabridge.diagnostics._environment import environment
from xlabridge.diagnostics._frames import frame_from_stack_trace, innermost_user_frame
from xlabridge.diagnostics.causes import classify_dynamo_break, classify_hlo_break
from xlabridge.diagnostics.report import (
    DynamoBreak,
    DynamoGraph,
    HloBreak,
    Recompile,
    Report,
    Segment,
    XlaGraph,
)
from xlabridge.errors import DiagnosticsWarning


def op_name(target: Any) -> str:
    """``aten::exp2`` for an aten overload; the callable's name otherwise."""
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return schema.name
    return getattr(target, "__name__", None) or str(target)


def graph_ops(gm: torch.fx.GraphModule) -> list[str]:
    """The op names of ``gm``'s computing nodes, in order (tuple unpacking left out)."""
    return [
        op_name(node.target)
        for node in gm.graph.nodes
        if node.op in ("call_function", "call_method", "call_module") and node.target is not operator.getitem
    ]


class Collector:
    """Collects one report while active."""

    def __init__(self) -> None:
        self.report = Report()
        self.active = False

    def safely(self, record: Callable[..., Any], *args: Any) -> Any:
        """Run one bookkeeping step; a failure is reported once and otherwise ignored."""
        try:
            return record(*args)
        except Exception as error:
            self.warn(record.__name__.lstrip("_").replace("_", " "), error)
            return None

    def warn(self, what: str, error: BaseException) -> None:
        message = (
            f"xlabridge diagnostics: {what} failed ({type(error).__name__}: {error}); "
            "the model runs unchanged, but the report lacks this part"
        )
        if message not in self.report.warnings:
            self.report.warnings.append(message)
            warnings.warn(message, DiagnosticsWarning, stacklevel=3)

    def finish(self) -> None:
        """Record the environment as it is at the end (torch_xla may be imported late)."""
        self.safely(self._record_environment)

    def _record_environment(self) -> None:
        self.report.environment = environment()

    def record_dynamo_graph(self, gm: torch.fx.GraphModule, compile_id: str, backend: str) -> None:
        reason = getattr(gm, "compile_subgraph_reason", None)
        ends_in_break = bool(reason is not None and reason.graph_break)
        op_count = sum(n.op in ("call_function", "call_method", "call_module") for n in gm.graph.nodes)
        self.report.dynamo_graphs.append(DynamoGraph(compile_id, op_count, backend, ends_in_break=ends_in_break))
        if not ends_in_break:
            return
        frame = innermost_user_frame(reason.user_stack)
        cause = classify_dynamo_break(reason.reason)
        lines = reason.reason.strip().splitlines() or [""]
        self.report.dynamo_breaks.append(
            DynamoBreak(
                reason=lines[0].strip(),
                category=cause.category,
                filename=frame.filename,
                lineno=frame.lineno,
                function=frame.function,
                suggestion=cause.suggestion,
                detail=reason.reason.strip(),
                compile_id=compile_id,
            )
        )

    def record_compile_path(self, compile_id: str, path: str, reason: str) -> None:
        for graph in reversed(self.report.dynamo_graphs):
            if graph.compile_id == compile_id:
                graph.path, graph.path_reason = path, reason
                return

    def record_recompile(self, reasons: Iterable[str], code: Any) -> None:
        """Dynamo lists one failed guard per earlier compilation, newest first; keep the newest."""
        reasons = [r.strip() for r in reasons if r and r.strip()]
        if not reasons:
            return
        self.report.recompiles.append(
            Recompile(
                reason=reasons[0].splitlines()[0],
                filename=code.co_filename,
                lineno=code.co_firstlineno,
                function=code.co_name,
            )
        )

    def new_xla_graph(self, compile_id: str, role: str, fx_ops: int) -> XlaGraph:
        graph = XlaGraph(
            index=len(self.report.xla_graphs), compile_id=compile_id, role=role, fx_ops=fx_ops, xla_graphs=0
        )
        self.report.xla_graphs.append(graph)
        return graph

    def record_extraction(
        self,
        graph: XlaGraph,
        compiled: Any,
        segment_ops: Mapping[Any, list[str]],
        fallback_ops: Mapping[str, list[str]],
        compiles: int,
    ) -> None:
        """Read how the bridge split ``graph`` from the callable it returned.

        ``segment_ops`` maps each XLA-compiled callable the bridge made to its ops;
        ``fallback_ops`` maps FX node names to the aten ops torch_xla ran on the CPU for them.
        """
        graph.compiles += compiles
        if not isinstance(compiled, torch.fx.GraphModule):
            graph.segments = [Segment("xla", ops) for ops in segment_ops.values()]
            graph.xla_graphs = len(graph.segments)
            return
        for node in compiled.graph.nodes:
            if node.op != "call_function" or node.target is operator.getitem:
                continue
            if node.target in segment_ops:
                graph.segments.append(Segment("xla", list(segment_ops[node.target])))
                continue
            fell_back = fallback_ops.get(node.name, [])
            ops = fell_back or [op_name(node.target)]
            graph.segments.append(Segment("cpu", ops))
            cause = classify_hlo_break(ops[0], fell_back=bool(fell_back))
            frame = frame_from_stack_trace(node.meta.get("stack_trace"))
            self.report.hlo_breaks.append(
                HloBreak(
                    op=ops[0],
                    category=cause.category,
                    filename=frame.filename,
                    lineno=frame.lineno,
                    function=frame.function,
                    suggestion=cause.suggestion,
                    graph=graph.index,
                )
            )
        graph.xla_graphs = sum(s.kind == "xla" for s in graph.segments)

    @staticmethod
    def record_call(graph: XlaGraph, compiles: int, executions: int | None, transfers: int | None) -> None:
        graph.calls += 1
        graph.compiles += max(compiles, 0)
        if executions is not None:
            graph.executions_per_call = executions
        if transfers is not None:
            graph.transfers_per_call = transfers
