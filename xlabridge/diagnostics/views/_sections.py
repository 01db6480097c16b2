"""The section model: what a report shows, in order, independent of how it is laid out.

The types and the number formats are in ``model``, the opening sections (ranked findings, time
split, timeline) in ``overview``; this module orders them and builds the tables after them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from xlabridge.diagnostics.report._report import TRACE_SOURCE
from xlabridge.diagnostics.views import _overview as overview, _pod
from xlabridge.diagnostics.views._model import (
    Box,
    Figure,
    Lane,
    Part,
    Ranked,
    Section,
    Table,
    Timeline,
    byte_size,
    count,
    first_line,
    plural,
    seconds,
    short_path,
    size,
    where,
)
from xlabridge.diagnostics.views._overview import (
    FIX_FIRST,
    KIND_COLOURS,
    OTHER_COLOUR,
    SHARE_LABEL_OF_KIND,
    SHARE_LABELS,
    SHARE_OF_KIND,
    process_name,
    short_process_name,
    ranked,
    share_cells,
    share_colour,
)

if TYPE_CHECKING:
    from xlabridge.diagnostics.report import DynamoBreak, DynamoGraph, Recompile, Report, TpuGraph, XlaGraph

__all__ = [
    "FIX_FIRST", "KIND_COLOURS", "OTHER_COLOUR", "SHARE_LABELS", "SHARE_LABEL_OF_KIND", "SHARE_OF_KIND", "Box",
    "Figure", "Lane", "Part", "Ranked", "Section", "Table", "Timeline", "build", "byte_size", "count",
    "environment_line", "first_line", "guard", "plural", "process_name", "ranked", "seconds", "share_cells",
    "share_colour", "short_path", "size", "where",
]

_ENVIRONMENT_KEYS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("torch", ("torch",)),
    ("torch_xla", ("torch_xla",)),
    ("torch_tpu", ("torch_tpu",)),
    ("PJRT", ("pjrt_device", "xla_device_type")),
    ("TPU", ("tpu_type",)),
)
"""Header labels and the environment keys each is read from, first present wins."""


def environment_line(report: Report) -> str:
    """``torch 2.9.0 | torch_xla 2.9.0 | PJRT CPU`` from the known keys."""
    parts = []
    for label, keys in _ENVIRONMENT_KEYS:
        value = next((report.environment[k] for k in keys if report.environment.get(k)), None)
        if value is not None:
            parts.append(f"{label} {value}")
    return " | ".join(parts) or "environment not recorded"


def _observed(report: Report) -> bool:
    return bool(report.dynamo_graphs or report.dynamo_breaks or report.xla_graphs or report.hlo_breaks)


def _dynamo(report: Report) -> Section:
    section = Section(
        "dynamo", "Dynamo",
        summary=f"{plural(report.graph_count, 'graph')}, {plural(report.break_count, 'break')}, "
        f"{plural(len(report.recompiles), 'recompile')}",
    )
    ranked = len({g.pid for g in report.dynamo_graphs} | {b.pid for b in report.dynamo_breaks}) > 1
    rank = ([lambda pid: [short_process_name(report, pid)]], ["rank"], [9]) if ranked else ([lambda pid: []], [], [])
    if report.dynamo_graphs:
        split = any(g.ddp_buckets for g in report.dynamo_graphs)  # the column only where DDPOptimizer ran
        section.tables.append(Table(
            rank[1] + ["compile", "backend", "path", "ops", "tracing", "where"] + (["DDP buckets"] if split else []),
            [rank[0][0](g.pid) + [g.compile_id, g.backend, g.path or "-", str(g.op_count), seconds(g.tracing_seconds),
                                  where(g.filename, g.lineno, g.function)] + ([_buckets(g)] if split else [])
             for g in report.dynamo_graphs],
            rank[2] + [9, 10, 12, 5, 9, 0] + ([24] if split else []),
        ))
    if report.dynamo_breaks:
        section.tables.append(Table(
            ["#"] + rank[1] + ["category", "where", "reason", "suggestion"],
            # a break inside a library: its frame there after the user's line that reached it, which the
            # suggestion then need not repeat
            [[str(n)] + rank[0][0](b.pid) + [
                b.category, where(b.filename, b.lineno, b.function) + (f", inside {_inside(b)}" if b.library else ""),
                first_line(b.reason),
                b.suggestion.split(" reached from this line. ", 1)[-1] if b.library else b.suggestion]
             for n, b in enumerate(report.dynamo_breaks, start=1)],
            [3] + rank[2] + [22, 34, 30, 0],
        ))
    skipped = [r for r in report.compile_requests if r.compiles_nothing]
    for request in skipped:
        section.notes.append(f"{request.how}() of {request.target} at {where(request.filename, request.lineno, request.function)} "
                             f"compiles nothing of it: Dynamo skips {', '.join(request.skipped)}")
    return section


def _inside(row: DynamoBreak) -> str:
    """The library frame of a break, from its package's directory on (``torch/nn/parallel/distributed.py:1528``)."""
    path = row.library_filename.replace("\\", "/")
    cut = path.rfind(f"/{row.library}/")
    return where(path[cut + 1:] if cut >= 0 else path, row.library_lineno, row.library_function) + (
        ", expected" if row.expected else "")


def _buckets(graph: DynamoGraph) -> str:
    """``6 (split), cap 1 MiB``: DDPOptimizer's buckets of a graph and the size it cut them at."""
    if not graph.ddp_buckets:
        return "-"
    count = len(graph.ddp_buckets)
    return f"{count}{' (split)' if count > 1 else ''}, cap {(graph.ddp_bucket_cap_bytes or 0) / 2**20:.3g} MiB"


def _known(filename: str, lineno: int) -> bool:
    """Whether a place names a line (``<unknown>:0`` does not)."""
    return lineno > 0 or not filename.startswith("<")


def _figure(graph: XlaGraph) -> Figure:
    boxes, count = [], 0
    for segment in graph.segments:
        kind = segment.kind.lower()
        xla = kind in ("xla", "collective")  # TorchTPU compiles a collective as an XLA program of its own
        if kind == "collective":
            count += 1
            label = f"XLA graph {count}: collective {segment.ops[0] if segment.ops else ''}".rstrip()
        elif xla:
            count += 1
            label = f"XLA graph {count} ({plural(len(segment.ops), 'op')})"
        else:
            label = ", ".join(segment.ops) or "CPU"
        boxes.append(Box(xla, label, list(segment.ops)))
    place = f" at {where(graph.filename, graph.lineno, graph.function)}" if _known(graph.filename, graph.lineno) else ""
    caption = (f"FX graph {graph.index} ({graph.role}){place}: {graph.fx_ops} ops, "
               f"{plural(graph.xla_graphs, 'XLA graph')}")
    return Figure(graph.index, caption, boxes, [graph.index])


def _figures(graphs: list[XlaGraph]) -> list[Figure]:
    """One picture per place and shape: FX graphs of one user line, role and segments (a recompiled
    frame's) share one, captioned with their numbers and count."""
    groups: dict[tuple, list[XlaGraph]] = {}
    for graph in graphs:
        shape = tuple((segment.kind, tuple(segment.ops)) for segment in graph.segments)
        groups.setdefault((graph.filename, graph.lineno, graph.function, graph.role, shape), []).append(graph)
    figures = []
    for (filename, lineno, function, role, _), members in groups.items():
        figure = _figure(members[0])
        if len(members) > 1:
            first = members[0]
            place = f"at {where(filename, lineno, function)}" if _known(filename, lineno) else "with the same segments"
            figure.graphs = [g.index for g in members]
            figure.caption = (
                f"FX graph {', '.join(str(g.index) for g in members)}: {len(members)} {role} graphs {place}: "
                f"{first.fx_ops} ops, {plural(first.xla_graphs, 'XLA graph')} each"
            )
        figures.append(figure)
    return figures


_FRONT_ENDS = {"torch_xla": "the XLA bridge", "torchtpu": "TorchTPU's split compiler"}


def _front_ends(report: Report) -> str:
    """The XLA front ends the report's graphs went through, in words (the bridge when there are none)."""
    names = dict.fromkeys(g.compiler for g in report.xla_graphs) or {"torch_xla": None}
    return " and ".join(_FRONT_ENDS.get(name, name) for name in names)


def _hlo(report: Report) -> Section:
    section = Section(
        "hlo", "HLO lowering",
        summary=f"{plural(len(report.xla_graphs), 'FX graph')} through {_front_ends(report)}, "
        f"{plural(report.hlo_break_count, 'break')}",
    )
    if any(g.compiler == "torchtpu" for g in report.xla_graphs):
        section.notes.append(
            "TorchTPU: its split compiler cuts a graph at each collective outside spmd_safe regions and compiles "
            "that collective as a program of its own (a 'collective-split' break); exec/call counts the programs "
            "one call runs")
    for g in report.xla_graphs:
        if g.buckets:
            section.notes.append(
                f"graph {g.index} has dynamic shapes: TorchTPU compiles it once per bucket, each program at the "
                f"bucket's bound with its dynamic inputs padded in the graph ({'; '.join(g.buckets)}); its TPU "
                "rows are those programs. On a TPU a bucket compiles at its first call (async), inside that "
                "call's time")
    if report.xla_graphs:
        section.tables.append(Table(
            ["graph", "role", "fx_ops", "xla_graphs", "compiles", "compile", "exec/call", "transfers/call",
             "bytes/call", "time/call", "calls"],
            [[str(g.index), g.role, str(g.fx_ops), str(g.xla_graphs), str(g.compiles), seconds(g.compile_seconds),
              str(g.executions_per_call), str(g.transfers_per_call), str(g.bytes_per_call),
              seconds(g.seconds_per_call), str(g.calls)] for g in report.xla_graphs],
            [5, 8, 6, 10, 8, 8, 9, 14, 10, 9, 5],
        ))
    if report.hlo_breaks:
        section.tables.append(Table(
            ["graph", "op", "category", "where", "suggestion"],
            [[str(b.graph), b.op, b.category, where(b.filename, b.lineno, b.function), b.suggestion]
             for b in report.hlo_breaks],
            [5, 24, 14, 34, 0],
        ))
    section.figures = _figures(report.xla_graphs)
    return section


_ROLES = {"inference": "inf", "forward": "fwd", "backward": "bwd"}


def _tpu_graph_label(row: TpuGraph) -> str:
    if row.route == "torchax":
        return f"{row.compile_id} {_ROLES.get(row.role, row.role)}".strip()
    if row.xla_graphs:
        return ",".join(str(i) for i in row.xla_graphs)
    return "lazy"


def _tpu(report: Report) -> Section | None:
    view = report.tpu
    if view is None:
        return None
    section = Section("tpu", f"TPU view ({view.topology})")
    if view.error:
        section.summary = "nothing compiled"
        section.notes.append(view.error)
        return section
    fits = sum(1 for g in view.graphs if g.fits)
    lowered = [g for g in view.graphs if g.route == "torchax"]
    what = plural(len(view.graphs) - len(lowered), "XLA graph")
    if lowered:
        what = (f"{plural(len(lowered), 'program')} of Dynamo graphs (backend "
                f"{', '.join(sorted({g.backend for g in lowered}))})"
                + (f" and {what}" if len(view.graphs) > len(lowered) else ""))
    section.summary = (
        f"{what} {view.label}; {fits} of {len(view.graphs)} fit one device's "
        f"{size(view.hbm_capacity_bytes)} of HBM; the TPU compiles took {seconds(view.seconds)} after the run "
        f"(libtpu's own compile time {seconds(view.compile_seconds)})"
    )
    if any(g.compiler == "torchtpu" for g in report.xla_graphs):
        if report.environment.get("source") == TRACE_SOURCE:
            section.notes.append(
                "TorchTPU's graphs were compiled from the StableHLO TorchTPU wrote into its trace "
                "(torchtpu_stablehlo_graph: its own lowering, on a TPU), by this machine's libtpu: kernels and HBM are "
                "XLA:TPU's for TorchTPU's program; a partition without it has no row")
        else:
            section.notes.append(
                "TorchTPU's graphs were lowered to StableHLO here by torchax and jax.export, not by TorchTPU's own "
                "lowering (it runs only on a TPU): kernels and HBM are XLA:TPU's for that StableHLO, whose ops can "
                "differ from TorchTPU's (its Pallas and fused kernels; docs/guides/torchtpu.md)")
    if lowered:
        section.notes.append(
            "graphs of backends that are not XLA front ends (graph 'ID fwd'/'bwd'/'inf': Dynamo's compile id and "
            "AOTAutograd's forward, backward or inference program) were traced after the run and lowered to "
            "StableHLO by torchax and jax.export: what XLA:TPU makes of the model, not of the backend's kernels")
    rows = []
    for g in view.graphs:
        if not g.compiled:
            rows.append([_tpu_graph_label(g), g.hash[:12], "error", "-", "-", "-", "-", "-", "-",
                         where(g.filename, g.lineno, g.function)])
            continue
        rows.append([
            _tpu_graph_label(g), g.hash[:12], str(g.kernels) if g.kernels is not None else "-", size(g.hbm_bytes),
            "yes" if g.fits else "NO", seconds(g.compile_seconds),
            seconds(g.cost_model_seconds) + ("*" if g.uncosted and g.cost_model_seconds is not None else ""),
            seconds(g.hbm_seconds), count(g.flops), where(g.filename, g.lineno, g.function),
        ])
    if not rows:
        section.notes.append("the run executed no XLA graph to compile")
        return section
    section.tables.append(Table(
        ["graph", "hash", "kernels", "HBM", "fits", "compile", "cost model", "HBM floor", "flops", "where"],
        rows, [10, 12, 7, 10, 4, 9, 10, 9, 8, 0],
    ))
    if len({p for g in view.graphs for p in g.pids}) > 1:
        section.notes.append("ranks: " + "; ".join(
            f"{_tpu_graph_label(g)} {', '.join(short_process_name(report, p) for p in g.pids)}" for g in view.graphs
            if g.pids) + " (ranks that compiled the same program share its row)")
    if uncosted := sorted({t for g in view.graphs for t in g.uncosted}):
        section.notes.append(f"cost model *: the time of the rest of the program, without the custom calls XLA's "
                             f"cost model cannot cost ({', '.join(uncosted)})")
    sharded = [g for g in view.graphs if g.collectives]
    if sharded:
        section.tables.append(Table(
            ["graph", "hash", "devices", "collectives on TPU (count, bytes per device per run)"],
            [[_tpu_graph_label(g), g.hash[:12], str(g.num_partitions),
              "; ".join(f"{c['kind']} x{c['count']} ({size(c['bytes'])})" for c in g.collectives)]
             for g in sharded],
            [6, 12, 7, 0],
        ))
    for g in view.graphs:
        if g.error:
            label = f" ({g.hash[:12]})" if g.hash else ""
            section.notes.append(f"graph {_tpu_graph_label(g)}{label}: {first_line(g.error)}")
    if view.breaks:
        section.tables.append(Table(
            ["graph", "op", "category", "where", "suggestion"],
            [[f"{b.compile_id} {_ROLES.get(b.role, b.role)}", b.op, b.category,
              where(b.filename, b.lineno, b.function), b.suggestion] for b in view.breaks],
            [9, 24, 15, 34, 0],
        ))
    if view.slices:
        section.tables.append(Table(
            ["graph", "batch", "smallest slice that fits", "HBM per chip", "tried (chips: HBM per chip, fits)"],
            [[sl.compile_id, str(sl.batch) if sl.batch is not None else "-",
              f"{sl.chips} chip{'s' if sl.chips != 1 else ''} ({sl.topology})" if sl.chips else "none",
              size(sl.hbm_bytes),
              "; ".join(f"{t['devices']}: {size(t.get('hbm_bytes'))} {'yes' if t.get('fits') else 'no'}"
                        for t in sl.tried)]
             for sl in view.slices],
            [6, 5, 24, 12, 0],
        ))
        section.notes.append(
            f"slice: each training step's forward and backward compiled as one program with its batch split over "
            f"1, 2, 4, ... {view.generation} chips (data parallelism, parameters replicated) until its HBM per chip "
            "fits; graphs cut by a Dynamo break are compiled apart (what one holds while the other runs is not added)")
        for sl in view.slices:
            if sl.reason:
                section.notes.append(f"slice of graph {sl.compile_id}: {sl.reason}")
    section.notes.append(
        "cost model: XLA's cost analysis, at rates fixed inside libtpu rather than the chip's: it ranks "
        "graphs, it does not predict a step time ('-': the graph holds a custom call it cannot cost); "
        "HBM floor: the bytes it counts at the chip's HBM bandwidth"
    )
    return section


_COMPILE_ID = re.compile(r"^\s*\d+/\d+:\s*")
_SOURCE_COMMENT = re.compile(r"\s{2,}#.*$|\s+#\s.*$")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e-?\d+)?(?![\w.])")


def guard(recompile: Recompile) -> str:
    """The guard that failed, shortly (``___stack0 == 4.24``): ``Recompile.guard``, or for a report of
    schema /3 its reason without Dynamo's ``frame/n:`` and the source comment it appends; numbers
    cut to three significant digits."""
    text = recompile.guard or _SOURCE_COMMENT.sub("", _COMPILE_ID.sub("", first_line(recompile.reason))).strip()
    return _NUMBER.sub(lambda m: f"{float(m.group()):.3g}" if "." in m.group() else m.group(), first_line(text))


def _guards(recompiles: list[Recompile]) -> str:
    """The failed guards of one cause, once: ``___stack0 == 4.24, 4.18, 4.22, 4.15`` when only one
    number changes between them, else the first with how many others there were."""
    guards = list(dict.fromkeys(guard(r) for r in recompiles))
    if len(guards) == 1:
        return guards[0]
    numbers = [_NUMBER.findall(g) for g in guards]
    varying = {i for i in range(len(numbers[0])) if len({tuple(n)[i] for n in numbers}) > 1}
    if len(varying) == 1:
        index = varying.pop()
        values = list(dict.fromkeys(n[index] for n in numbers))
        shown = values if len(values) <= 4 else [*values[:3], "…", values[-1]]
        match = list(_NUMBER.finditer(guards[0]))[index]
        listed = ", ".join(shown) + (f" ({len(values)} values)" if len(values) > 4 else "")
        return guards[0][: match.start()] + listed + guards[0][match.end():]
    return f"{guards[0]} (and {plural(len(guards) - 1, 'other guard')})"


def _cause_key(recompile: Recompile) -> tuple:
    shape = _NUMBER.sub("#", guard(recompile))
    return (recompile.filename, recompile.lineno, recompile.function, recompile.category, shape)


def _recompiles(report: Report) -> Section | None:
    if not report.recompiles:
        return None
    groups: dict[tuple, list[Recompile]] = {}
    for recompile in report.recompiles:
        groups.setdefault(_cause_key(recompile), []).append(recompile)
    locations = {key[:3] for key in groups}
    ranked = len({r.pid for r in report.recompiles}) > 1
    section = Section(
        "recompiles", "Recompiles",
        summary=f"{len(report.recompiles)} at {plural(len(locations), 'location')}, "
        f"{plural(len(groups), 'cause')}",
        tables=[Table(
            ["where", "count"] + (["ranks"] if ranked else []) + ["cause", "guard that failed"],
            [[where(*key[:3]), str(len(members))]
             + ([", ".join(dict.fromkeys(short_process_name(report, r.pid) for r in members))] if ranked else [])
             + [key[3], _guards(members)]
             for key, members in groups.items()],
            [40, 5] + ([14] if ranked else []) + [20, 0],
        )],
    )
    for category in dict.fromkeys(key[3] for key in groups):
        suggestion = next((r.suggestion for r in report.recompiles if r.category == category and r.suggestion), "")
        if suggestion:
            section.notes.append(f"{category}: {suggestion}")
    return section


def build(report: Report) -> list[Section]:
    """The sections of ``report``, in the order both views show them: the ranked findings and
    where the time went first, then the tables."""
    out = [Section("environment", "xlabridge report", summary=environment_line(report))]
    summary, tpu_summary = overview.summary(report), overview.tpu_summary(report)
    out += [s for s in (summary, tpu_summary, overview.time(report), overview.timeline(report)) if s is not None]
    if not _observed(report) and not report.run_graphs:
        out.append(Section("empty", "", notes=["no graphs observed"]))
    elif _observed(report):
        out += [_dynamo(report), _hlo(report)]
    out += [s for s in (_pod.run_graphs(report), _pod.collectives(report), _pod.processes(report),
                        _recompiles(report), _tpu(report)) if s is not None]
    shown = {item.rank for section in (summary, tpu_summary) if section is not None for item in section.items}
    rest = [item for item in ranked(report) if item.rank not in shown]
    if rest:
        out.append(Section("findings", "Findings" if not shown else "Other findings",
                           notes=[_finding_note(item) for item in rest]))
    if report.warnings:
        out.append(Section("warnings", "Warnings", notes=list(report.warnings)))
    return out


def _finding_note(item: Ranked) -> str:
    cost = f" ({item.cost})" if item.share is not None or item.compiled else ""
    code = f" [{item.code}]" if item.code else ""
    return f"{item.where}: {item.what}{cost}{code}: {item.message}"
