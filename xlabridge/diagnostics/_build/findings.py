"""What each problem cost in this run, and the findings ranked by it: what to fix first.

Run when every row of a report is built, from the rows alone:

* a **Dynamo graph break** costs the compilation of the graph that resumes after it (Dynamo's
  tracing, then the bridge's extraction at its first call, which holds XLA's compilation of it);
  its recompilations are the recompile finding's;
* a place that **recompiles** costs every recompilation there: tracing, extraction and XLA
  compilation of each recompiled graph (intervals that hold each other are counted once);
* an **HLO lowering break** costs the time its FX graphs spent in CPU nodes over all their calls
  (the host work and transfers around them are inside that time);
* a **collective split** (TorchTPU compiles a collective as a program of its own) costs what XLA
  cannot fuse or overlap across the cut, which a compile-only view cannot time: no cost;
* findings read from compiled TPU programs (padding, f32 matmuls, copies, HBM: ``compiled_for``)
  carry the cost model's seconds, not a cost in this run: they rank after the measured findings,
  by those seconds;
* findings that are not about time (a graph that does not fit a TPU, a probe that cannot see)
  carry no cost and rank after those that do, in the order found.

Dynamo's own code for a graph break (``GB0124``) and its page are read from the reason, where
torch's message names them (torch 2.9 and newer).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

from xlabridge.diagnostics._build import causes
from xlabridge.diagnostics.report import DynamoBreak, Finding, HloBreak, Recompile, Report, XlaGraph

_GB_PAGE = re.compile(r"(https?://\S+/gb/gb(\d+)\.html)")


def graph_break_code(detail: str) -> tuple[str, str]:
    """``("GB0124", page url)`` named in a Dynamo break's full reason, else ``("", "")``."""
    match = _GB_PAGE.search(detail)
    return (f"GB{match.group(2)}", match.group(1)) if match else ("", "")


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value >= 1 else f"{value * 1e3:.0f} ms"


class _Costs:
    """Compile seconds per (process, compile id), from the Dynamo and XLA graph rows."""

    def __init__(self, report: Report) -> None:
        self.tracing: dict[tuple[int, str], float] = defaultdict(float)
        self.functions: dict[tuple[int, str], str] = {}
        for graph in report.dynamo_graphs:
            self.tracing[(graph.pid, graph.compile_id)] += graph.tracing_seconds or 0.0
            self.functions[(graph.pid, graph.compile_id)] = graph.function
        self.xla: dict[tuple[int, str], list[XlaGraph]] = defaultdict(list)
        for xla in report.xla_graphs:
            self.xla[(xla.pid, xla.compile_id)].append(xla)

    def compile(self, pid: int, compile_id: str) -> tuple[float, float, float]:
        """``(tracing, extraction, XLA compile)`` seconds of one compilation: Dynamo's, the bridge's
        extraction at the first call (its XLA compilation included), and XLA compilations outside
        an extraction (a graph whose extraction was not observed)."""
        graphs = self.xla.get((pid, compile_id), [])
        extraction = sum(g.extraction_seconds or 0.0 for g in graphs)
        unextracted = sum(g.compile_seconds for g in graphs if g.extraction_seconds is None)
        return self.tracing.get((pid, compile_id), 0.0), extraction, unextracted

    def resumed_after(self, pid: int, row: DynamoBreak) -> list[str]:
        """The first compilations of the frames Dynamo resumes in after the break at ``row``."""
        resume = f"torch_dynamo_resume_in_{row.function}_at_{row.lineno}"
        return sorted(cid for (p, cid), function in self.functions.items()
                      if p == pid and function == resume and cid.endswith("/0"))


def _words(tracing: float, extraction: float, xla: float) -> str:
    parts = [f"Dynamo tracing {_seconds(tracing)}"]
    if extraction:
        parts.append(f"the bridge's extraction and XLA compilation {_seconds(extraction)}")
    if xla:
        parts.append(f"XLA compilation {_seconds(xla)}")
    return ", ".join(parts)


def _break_findings(report: Report, costs: _Costs) -> list[Finding]:
    groups: dict[tuple, list[DynamoBreak]] = defaultdict(list)
    for row in report.dynamo_breaks:
        groups[(row.pid, row.filename, row.lineno, row.function, row.reason)].append(row)
    found = []
    for (pid, filename, lineno, function, reason), rows in groups.items():
        parts = [costs.compile(pid, cid) for cid in costs.resumed_after(pid, rows[0])]
        totals = tuple(sum(p[i] for p in parts) for i in range(3))
        code, url = (rows[0].code, rows[0].url) if rows[0].code else graph_break_code(rows[0].detail)
        found.append(Finding(
            "dynamo-break",
            f"Dynamo graph break: {reason}. {rows[0].suggestion}",
            cost_seconds=sum(totals) if parts else None,
            cost=(f"compiling the graph that resumes after it: {_words(*totals)}" if parts
                  else "no graph resumed after it was observed"),
            count=len(rows), category=rows[0].category, code=code, url=url,
            filename=filename, lineno=lineno, function=function, pid=pid,
        ))
    return found


def _recompile_findings(report: Report, costs: _Costs) -> list[Finding]:
    groups: dict[tuple, list[Recompile]] = defaultdict(list)
    for row in report.recompiles:
        groups[(row.pid, row.filename, row.lineno, row.function, row.category)].append(row)
    found = []
    for (pid, filename, lineno, function, category), rows in groups.items():
        parts = [costs.compile(pid, r.compile_id) for r in rows]
        totals = tuple(sum(p[i] for p in parts) for i in range(3))
        guards = list(dict.fromkeys(r.guard for r in rows if r.guard))
        failed = (f"guard `{guards[0]}` failed" + (f" (and {len(guards) - 1} other guard(s))" if len(guards) > 1 else "")
                  if guards else rows[0].reason)
        plural = "recompile" if len(rows) == 1 else "recompiles"
        found.append(Finding(
            "recompiles",
            f"{len(rows)} {plural} ({category}): {failed}. {rows[0].suggestion}".rstrip(),
            cost_seconds=sum(totals), cost=_words(*totals),
            count=len(rows), category=category, filename=filename, lineno=lineno, function=function, pid=pid,
        ))
    return found


def _hlo_break_findings(report: Report) -> list[Finding]:
    graphs = {g.index: g for g in report.xla_graphs}
    groups: dict[tuple, list[HloBreak]] = defaultdict(list)
    for row in report.hlo_breaks:
        groups[(row.op, row.filename, row.lineno, row.function)].append(row)
    found = []
    for (op, filename, lineno, function), rows in groups.items():
        members = [graphs[r.graph] for r in rows if r.graph in graphs]
        calls = sum(g.calls for g in {g.index: g for g in members}.values())
        seconds = sum(g.cpu_fallback_seconds_per_call * g.calls for g in {g.index: g for g in members}.values())
        transfers = max((g.transfers_per_call for g in members), default=0)
        if rows[0].category == causes.COLLECTIVE_SPLIT.category:
            found.append(Finding(
                "collective-split",
                f"HLO lowering break: {op} is compiled as a program of its own, cutting FX graph "
                f"{', '.join(str(r.graph) for r in rows)} into several XLA programs. {rows[0].suggestion}",
                graph=rows[0].graph, cost=f"a program of its own in each of {calls} call(s)",
                count=calls or len(rows), category=rows[0].category, filename=filename, lineno=lineno,
                function=function, pid=members[0].pid if members else None,
            ))
            continue
        found.append(Finding(
            "hlo-break",
            f"HLO lowering break: {op} ran outside XLA ({rows[0].category}), cutting "
            f"FX graph {', '.join(str(r.graph) for r in rows)} into several XLA graphs. {rows[0].suggestion}",
            graph=rows[0].graph, cost_seconds=seconds,
            cost=f"{_seconds(seconds)} in CPU nodes over {calls} call(s), with {transfers} host-device transfer(s) "
                 "per call",
            count=calls or len(rows), category=rows[0].category, filename=filename, lineno=lineno,
            function=function, pid=members[0].pid if members else None,
        ))
    return found


def rank(report: Report) -> None:
    """Add the break, recompile and HLO-break findings with their costs; rank every finding."""
    costs = _Costs(report)
    report.findings += _break_findings(report, costs) + _recompile_findings(report, costs) + _hlo_break_findings(report)
    report.findings[:] = ranked(report.findings)


def ranked(findings: Sequence[Finding]) -> list[Finding]:
    """Costliest in this run first; then the findings read from compiled TPU programs, costliest by
    the cost model first; then the findings without a cost, in their order."""
    order = {id(f): i for i, f in enumerate(findings)}

    def key(f: Finding) -> tuple:
        if f.cost_seconds is not None:
            return (0, -f.cost_seconds, order[id(f)])
        if f.compiled_for:
            return (1, f.cost_model_seconds is None, -(f.cost_model_seconds or 0.0), order[id(f)])
        return (2, order[id(f)])

    return sorted(findings, key=key)
