"""The diagnostics report: plain data first; the terminal table, JSON and HTML are views of it.

The JSON form is versioned by ``SCHEMA`` (``xlabridge.report/1``); its fields are documented
in ``docs/report-schema.md``. A reader of a report from a TPU VM needs nothing but the JSON.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

SCHEMA = "xlabridge.report/1"


@dataclasses.dataclass
class DynamoBreak:
    """Dynamo stopped capturing: the FX graph before this point ends here."""

    reason: str
    category: str
    filename: str
    lineno: int
    function: str
    suggestion: str
    detail: str = ""
    compile_id: str = ""


@dataclasses.dataclass
class Recompile:
    """Dynamo compiled a frame again because a guard of its earlier compilation failed."""

    reason: str
    filename: str
    lineno: int
    function: str


@dataclasses.dataclass
class DynamoGraph:
    """One FX graph Dynamo captured and handed to a backend."""

    compile_id: str
    op_count: int
    backend: str
    path: str = ""
    path_reason: str = ""
    ends_in_break: bool = False


@dataclasses.dataclass
class HloBreak:
    """One FX node that ran outside XLA, cutting its FX graph into several XLA graphs."""

    op: str
    category: str
    filename: str
    lineno: int
    function: str
    suggestion: str
    graph: int = 0


@dataclasses.dataclass
class Segment:
    """A run of consecutive FX nodes executed one way: one XLA graph, or one op on the CPU."""

    kind: str
    ops: list[str]


@dataclasses.dataclass
class XlaGraph:
    """One FX graph as torch_xla's Dynamo bridge compiled it, and what each call costs."""

    index: int
    compile_id: str
    role: str
    fx_ops: int
    xla_graphs: int
    compiles: int = 0
    executions_per_call: int = 0
    transfers_per_call: int = 0
    calls: int = 0
    segments: list[Segment] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Report:
    """Everything observed over one ``explain`` call, ``diagnose`` block or CLI run."""

    environment: dict[str, Any] = dataclasses.field(default_factory=dict)
    dynamo_graphs: list[DynamoGraph] = dataclasses.field(default_factory=list)
    dynamo_breaks: list[DynamoBreak] = dataclasses.field(default_factory=list)
    recompiles: list[Recompile] = dataclasses.field(default_factory=list)
    xla_graphs: list[XlaGraph] = dataclasses.field(default_factory=list)
    hlo_breaks: list[HloBreak] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)

    @property
    def graph_count(self) -> int:
        """Dynamo FX graphs compiled (``torch._dynamo.explain``'s ``graph_count``)."""
        return len(self.dynamo_graphs)

    @property
    def break_count(self) -> int:
        """Dynamo graph breaks (``len(torch._dynamo.explain(...).break_reasons)``)."""
        return len(self.dynamo_breaks)

    @property
    def hlo_break_count(self) -> int:
        """FX nodes that ran outside XLA, over all FX graphs."""
        return len(self.hlo_breaks)

    def to_dict(self) -> dict[str, Any]:
        """The report in the shape of schema ``xlabridge.report/1``."""
        rows = dataclasses.asdict
        return {
            "schema": SCHEMA,
            "environment": dict(self.environment),
            "dynamo": {
                "graph_count": self.graph_count,
                "break_count": self.break_count,
                "breaks": [rows(b) for b in self.dynamo_breaks],
                "recompiles": [rows(r) for r in self.recompiles],
                "graphs": [rows(g) for g in self.dynamo_graphs],
            },
            "hlo": {
                "break_count": self.hlo_break_count,
                "breaks": [rows(b) for b in self.hlo_breaks],
                "graphs": [rows(g) for g in self.xla_graphs],
            },
            "warnings": list(self.warnings),
        }

    def to_json(self, path: str | Path | None = None, *, indent: int = 2) -> str:
        """The JSON text of ``to_dict()``; also written to ``path`` when one is given."""
        text = json.dumps(self.to_dict(), indent=indent)
        if path is not None:
            Path(path).write_text(text + "\n", encoding="utf-8")
        return text

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        """Read a report back from ``to_dict()``'s form (for example, one made on a TPU VM)."""
        if data.get("schema") != SCHEMA:
            raise ValueError(f"report 'schema' must be {SCHEMA!r}, got {data.get('schema')!r}")
        dynamo, hlo = data["dynamo"], data["hlo"]
        graphs = []
        for graph in hlo["graphs"]:
            fields = dict(graph)
            fields["segments"] = [Segment(**s) for s in fields.get("segments", [])]
            graphs.append(XlaGraph(**fields))
        return cls(
            environment=dict(data.get("environment", {})),
            dynamo_graphs=[DynamoGraph(**g) for g in dynamo.get("graphs", [])],
            dynamo_breaks=[DynamoBreak(**b) for b in dynamo["breaks"]],
            recompiles=[Recompile(**r) for r in dynamo["recompiles"]],
            xla_graphs=graphs,
            hlo_breaks=[HloBreak(**b) for b in hlo["breaks"]],
            warnings=list(data.get("warnings", [])),
        )

    def merge(self, other: Report) -> None:
        """Add ``other``'s observations (another process of the same run) to this report."""
        offset = len(self.xla_graphs)
        for graph in other.xla_graphs:
            self.xla_graphs.append(dataclasses.replace(graph, index=graph.index + offset))
        for hlo_break in other.hlo_breaks:
            self.hlo_breaks.append(dataclasses.replace(hlo_break, graph=hlo_break.graph + offset))
        self.dynamo_graphs += other.dynamo_graphs
        self.dynamo_breaks += other.dynamo_breaks
        self.recompiles += other.recompiles
        self.warnings += [w for w in other.warnings if w not in self.warnings]

    def __str__(self) -> str:
        from xlabridge.diagnostics.render import format_table

        return format_table(self)

    def to_html(self, path: str | Path) -> Path:
        """Write a self-contained HTML page with a picture of how each FX graph is split."""
        from xlabridge.diagnostics.render import write_html

        return write_html(self, Path(path))
