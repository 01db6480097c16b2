"""The TPU view in a report: ``tpu_compiled`` events (each distinct XLA graph of the run as libtpu
compiled it, after the run) joined to the run's XLA graphs by hash, and to the programs of the
Dynamo graphs of other backends (``fx_program``: lowered by torchax) the same way, with each
graph's user line; the ops of those graphs with no TPU lowering (``TPU_CAUSES``), the smallest
slice that fits each training step (``tpu_slice``), and the findings for graphs that do not fit,
that XLA:TPU refuses or that do not lower; and the findings read from each compiled program
(padding, f32 matmuls, copies, HBM, what the cost model cannot cost: ``xlabridge.tpu.TpuFinding``),
grouped across programs at the user's line."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from xlabridge.diagnostics._build import causes
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._frames import UNKNOWN, UserCodeRule
from xlabridge.diagnostics.report import (
    UNKNOWN_NAME,
    Finding,
    Report,
    TpuBreak,
    TpuGraph,
    TpuSlice,
    TpuView,
    XlaGraph,
)

_GIB = 2**30

_TPU_MEMORY_FIELDS = (
    ("hbm_bytes", "total_bytes"), ("hbm_capacity_bytes", "capacity_bytes"), ("argument_bytes", "argument_bytes"),
    ("output_bytes", "output_bytes"), ("alias_bytes", "alias_bytes"), ("temp_bytes", "temp_bytes"),
    ("code_bytes", "generated_code_bytes"),
)
"""``TpuGraph`` fields and the ``HbmUsage.to_dict()`` keys they are read from."""


def add_tpu_view(
    report: Report, processes: Sequence[tuple[Sequence[ev.Event], UserCodeRule]], events: Sequence[ev.Event]
) -> None:
    """Add the TPU view of ``events`` (``tpu_pass``, ``tpu_compiled``) to ``report``, whose
    processes' rows are built; ``processes``: each process's events and user-code rule."""
    _TpuBuilder(report, processes, events).build()


class _TpuBuilder:
    """The TPU view: ``tpu_compiled`` events joined to the run's XLA graphs by hash."""

    def __init__(
        self, report: Report, processes: Sequence[tuple[Sequence[ev.Event], UserCodeRule]], events: Sequence[ev.Event]
    ) -> None:
        self.report = report
        self.passes = [e for e in events if isinstance(e, ev.TpuPass)]
        self.compiled = [e for e in events if isinstance(e, ev.TpuCompiled)]
        self.slices = [e for e in events if isinstance(e, ev.TpuSlice)]
        # the programs of Dynamo graphs no XLA front end compiled, by hash, and those that have none
        self.rules = {events[0].pid: rule for events, rule in processes if events}
        self.programs: dict[str, tuple[ev.FxProgram, UserCodeRule]] = {}
        self.program_pids: dict[str, set[int]] = {}
        """Every process whose Dynamo graph lowered to a program (the ranks of a job compile the same)."""
        self.unlowered: list[tuple[ev.FxProgram, UserCodeRule]] = []
        for process_events, rule in processes:
            for program in process_events:
                if isinstance(program, ev.FxProgram):
                    if program.hash:
                        self.programs.setdefault(program.hash, (program, rule))
                        self.program_pids.setdefault(program.hash, set()).add(program.pid)
                    elif program.role != "training-step":
                        self.unlowered.append((program, rule))
        # Where each graph comes from, looked up once: a Dynamo graph's first op by (compile id,
        # process); a lazily traced graph's trigger, the innermost user frame of its stack.
        self.dynamo_places = {(g.compile_id, g.pid): (g.filename, g.lineno, g.function) for g in report.dynamo_graphs}
        self.lazy_places: dict[str, tuple[str, int, str]] = {}
        for process_events, rule in processes:
            for seen in process_events:
                if not isinstance(seen, ev.XlaGraphSeen):
                    continue
                if seen.frames and seen.hash not in self.lazy_places:
                    frame = rule.innermost(seen.frames)
                    if frame.lineno:
                        self.lazy_places[seen.hash] = (frame.filename, frame.lineno, frame.function)

    def build(self) -> None:
        if not self.passes:
            return
        last = self.passes[-1]
        view = TpuView(
            topology=last.topology, generation=last.generation, libtpu_version=last.libtpu_version,
            jax_version=last.jax_version, seconds=sum(p.t - p.start for p in self.passes),
            error="; ".join(p.error for p in self.passes if p.error),
        )
        if last.libtpu_version:
            view.label = (f"compiled for TPU {last.generation} ({last.topology}) by libtpu {last.libtpu_version} "
                          "on this machine, not run")
        self.report.tpu = view
        if view.error:
            self.report.warnings.append(f"TPU view: nothing compiled: {view.error}")
        for compiled in self.compiled:
            view.graphs.append(self._row(compiled))
        self._unlowered(view)
        self._slices(view)
        view.compile_seconds = sum(g.compile_seconds or 0.0 for g in view.graphs)
        view.hbm_capacity_bytes = next((g.hbm_capacity_bytes for g in view.graphs if g.hbm_capacity_bytes), None)
        if view.hbm_capacity_bytes is None:
            from xlabridge.tpu import CHIPS

            chip = CHIPS.get(view.generation)
            view.hbm_capacity_bytes = chip.hbm_bytes if chip else None
        missing = {h for g in self.report.xla_graphs for h in g.hashes} - {g.hash for g in view.graphs}
        missing -= set(self.programs)
        if missing and not view.error:
            self.report.warnings.append(
                f"TPU view: {len(missing)} XLA graph(s) of the run were not compiled for TPU (no HLO saved)")
        self._findings(view)

    def _row(self, compiled: ev.TpuCompiled) -> TpuGraph:
        xla = [g for g in self.report.xla_graphs if compiled.hash in g.hashes]
        row = TpuGraph(hash=compiled.hash, num_partitions=compiled.num_partitions, error=compiled.error,
                       xla_graphs=[g.index for g in xla], pids=sorted({g.pid for g in xla}),
                       collectives=[dict(c) for c in compiled.collectives], tpu_hlo_file=compiled.tpu_hlo_file)
        program = self.programs.get(compiled.hash)
        if program is not None:
            event, rule = program
            row.compile_id, row.role, row.backend, row.route = event.compile_id, event.role, event.backend, "torchax"
            row.pids = sorted(self.program_pids.get(compiled.hash, {event.pid}))
            frame = rule.innermost(event.frames)
            if frame is UNKNOWN:  # its first op has no line of the user's (a hook's): its Dynamo graph's line
                graph = next((g for g in self.report.dynamo_graphs
                              if g.pid == event.pid and g.compile_id == event.compile_id), None)
                frame = ev.Frame(graph.filename, graph.lineno, graph.function) if graph is not None else frame
            row.filename, row.lineno, row.function = frame.filename, frame.lineno, frame.function
        elif not xla:
            row.origin = ev.GraphOrigin.LAZY.value
        if program is None:
            row.filename, row.lineno, row.function = self._where(compiled.hash, xla)
            row.route = "torchtpu" if any(g.compiler == "torchtpu" for g in xla) else "torch_xla"
            if xla:
                row.compile_id, row.role = xla[0].compile_id, xla[0].role
        result = compiled.result
        if result is None:
            return row
        memory = result.get("memory") or {}
        row.compiled = True
        row.kernels = result.get("kernel_count")
        row.kernel_names = list(result.get("kernels", []))
        for name, key in _TPU_MEMORY_FIELDS:
            setattr(row, name, memory.get(key))
        row.fits = bool(result.get("fits"))
        row.out_of_memory = result.get("out_of_memory")
        for name in ("compile_seconds", "flops", "bytes_accessed", "cost_model_seconds", "hbm_seconds",
                     "devices", "chips"):
            setattr(row, name, result.get(name))
        row.uncosted = list(result.get("uncosted", []))
        row.findings = [dict(f) for f in result.get("findings", [])]
        return row

    def _unlowered(self, view: TpuView) -> None:
        """A row (not compiled, with why) per program that could not be lowered, and its TPU lowering breaks."""
        unavailable = set()
        for program, rule in self.unlowered:
            frame = rule.innermost(program.frames)
            place = {"filename": frame.filename, "lineno": frame.lineno, "function": frame.function}
            ops = sorted({b.op for b in program.breaks})
            error = (f"no TPU lowering for {', '.join(ops)}" if ops else program.error) or "not lowered"
            view.graphs.append(TpuGraph(hash="", compiled=False, error=error, pids=[program.pid],
                                        compile_id=program.compile_id, role=program.role, backend=program.backend,
                                        route="torchax", **place))
            if program.error and not program.role:
                unavailable.add(program.error)
            for lowering_break in program.breaks:
                cause = causes.classify_tpu_break(lowering_break.op)
                if program.error:  # torchax has a lowering, and it failed on this node
                    cause = causes.Cause("lowering-failed", ".", f"torchax failed to lower it: "
                                         f"{causes.first_line(program.error)}. Rewrite it with other ops, or report it "
                                         "to torchax.")
                where = rule.innermost(list(lowering_break.frames) or program.frames)
                view.breaks.append(TpuBreak(
                    op=lowering_break.op, category=cause.category, suggestion=cause.suggestion,
                    compile_id=program.compile_id, role=program.role, node=lowering_break.node,
                    backend=program.backend, filename=where.filename, lineno=where.lineno, function=where.function))
        for message in sorted(unavailable):
            self.report.warnings.append(f"TPU view: Dynamo graphs without a TPU row: {message}")

    def _slices(self, view: TpuView) -> None:
        for event in self.slices:
            program = self.programs.get(event.hash)
            frame = program[1].innermost(program[0].frames) if program else None
            fit = next((t for t in event.tried if t.get("fits")), None)
            capacity = next((t.get("capacity_bytes") for t in event.tried if t.get("capacity_bytes")), None)
            view.slices.append(TpuSlice(
                compile_id=event.compile_id, generation=event.generation, chips=event.chips, topology=event.topology,
                mesh=dict(event.mesh), batch=event.batch, hbm_bytes=fit.get("hbm_bytes") if fit else None,
                capacity_bytes=capacity, tried=[dict(t) for t in event.tried], reason=event.reason,
                filename=frame.filename if frame else UNKNOWN_NAME, lineno=frame.lineno if frame else 0,
                function=frame.function if frame else UNKNOWN_NAME))

    def _where(self, digest: str, xla: list[XlaGraph]) -> tuple[str, int, str]:
        """The user line of a graph: its FX graph's first op, or (lazy) the stack that cut it."""
        for graph in xla:
            place = self.dynamo_places.get((graph.compile_id, graph.pid))
            if place is not None:
                return place
        if digest in self.lazy_places:
            return self.lazy_places[digest]
        run = next((r for r in self.report.run_graphs if r.hash == digest and r.lineno), None)
        return (run.filename, run.lineno, run.function) if run else (UNKNOWN_NAME, 0, UNKNOWN_NAME)

    def _rule(self, row: TpuGraph) -> UserCodeRule | None:
        program = self.programs.get(row.hash)
        if program is not None:
            return program[1]
        return next((self.rules[pid] for pid in row.pids if pid in self.rules), None)

    def _read_findings(self, view: TpuView) -> None:
        """The findings read from the compiled programs, one per kind, what it is about (a dimension's
        size, a precision, custom calls) and user line, summed over the programs that have it."""
        groups: dict[tuple, list[tuple[TpuGraph, dict[str, Any], tuple[str, int, str]]]] = defaultdict(list)
        for row in view.graphs:
            rule = self._rule(row)
            for found in row.findings:
                source, line = found.get("source_file", ""), int(found.get("source_line") or 0)
                # the line that traced the op, where it is the user's; else the graph's own line
                if source and line and rule is not None and rule.is_user(source):
                    place = (source, line, row.function if source == row.filename else "")
                else:
                    place = (row.filename, row.lineno, row.function)
                detail = found.get("detail") or {}
                about = {"tpu-padding": (detail.get("size"), detail.get("padded")),
                         "tpu-f32-matmul": detail.get("precision"), "tpu-hbm": row.hash,
                         "tpu-uncosted": tuple(detail.get("targets", ()))}.get(found.get("kind"))
                groups[(found.get("kind"), repr(about), place)].append((row, found, place))
        for (kind, _, place), members in groups.items():
            costs = [f.get("cost_model_seconds") for _, f, _ in members if f.get("cost_model_seconds") is not None]
            row, first, _ = max(members, key=lambda m: m[1].get("cost_model_seconds") or 0.0)
            rows = list({id(r): r for r, _, _ in members}.values())
            graphs = ", ".join(self._which(r) for r in rows[:3]) + (f" and {len(rows) - 3} more" if len(rows) > 3 else "")
            message = first.get("message", "")
            if len(rows) > 1:
                message += f" Found in {len(rows)} TPU programs ({graphs}); figures of the costliest."
            else:
                message += f" In {graphs}."
            cost = sum(costs) if costs else None
            self.report.findings.append(Finding(
                str(kind), message, graph=row.xla_graphs[0] if row.xla_graphs else None,
                cost=(f"the cost model's time of what it accounts for, summed over {len(rows)} program(s), one run "
                      "each" if cost is not None else "no figure of the cost model"),
                count=sum(int(f.get("count") or 1) for _, f, _ in members),
                filename=place[0], lineno=place[1], function=place[2],
                pid=rows[0].pids[0] if len({p for r in rows for p in r.pids}) == 1 and rows[0].pids else None,
                compiled_for=view.label or f"compiled for TPU {view.generation}, not run",
                cost_model_seconds=cost,
            ))

    @staticmethod
    def _which(row: TpuGraph) -> str:
        if row.route == "torchax":
            return f"the {row.role} of Dynamo graph {row.compile_id} ({row.backend})"
        if row.xla_graphs:
            return f"XLA graph {row.hash[:12]} (FX graph {', '.join(map(str, row.xla_graphs))})"
        return f"lazy XLA graph {row.hash[:12]}"

    def _findings(self, view: TpuView) -> None:
        self._read_findings(view)
        for found in view.breaks:
            self.report.findings.append(Finding(
                "tpu-lowering-break",
                f"{found.op} (node {found.node}) in the {found.role} of Dynamo graph {found.compile_id} "
                f"({found.backend}) has no TPU lowering: the graph gets no TPU program. {found.suggestion}",
                category=found.category, filename=found.filename, lineno=found.lineno, function=found.function,
            ))
        for row in view.graphs:
            if row.route == "torchax" and not row.compiled:
                if not row.hash:
                    continue
                self.report.findings.append(Finding(
                    "tpu-refused",
                    f"the {row.role} of Dynamo graph {row.compile_id} ({row.backend}), from {row.filename}:{row.lineno} "
                    f"({row.function}), does not compile for TPU {view.generation}: {causes.first_line(row.error)}",
                    filename=row.filename, lineno=row.lineno, function=row.function,
                ))
                continue
            place = f"{row.filename}:{row.lineno} ({row.function})"
            which = (f"XLA graph {row.hash[:12]} (FX graph {', '.join(map(str, row.xla_graphs))})"
                     if row.xla_graphs else f"the {row.role} of Dynamo graph {row.compile_id} ({row.backend})"
                     if row.route == "torchax" else f"lazy XLA graph {row.hash[:12]}")
            graph = row.xla_graphs[0] if row.xla_graphs else None
            if row.compiled and not row.fits:
                need = (f"{row.hbm_bytes / _GIB:.2f} GiB" if row.hbm_bytes is not None
                        else "more than it has")
                total = row.hbm_capacity_bytes or view.hbm_capacity_bytes
                capacity = f"{total / _GIB:.0f} GiB" if total else "its HBM"
                self.report.findings.append(Finding(
                    "tpu-does-not-fit",
                    f"{which}, from {place}, does not fit a {view.generation} device's HBM ({capacity}): it needs "
                    f"{need}{' (XLA:TPU: ' + causes.first_line(row.out_of_memory) + ')' if row.out_of_memory else ''}. "
                    "Shard it over more chips (SPMD, FSDPv2), lower the batch or sequence length, recompute "
                    "activations (gradient checkpointing), or pick a generation with more HBM.",
                    graph=graph, filename=row.filename, lineno=row.lineno, function=row.function,
                ))
            elif not row.compiled and row.error.startswith("XLA:TPU refused"):
                self.report.findings.append(Finding(
                    "tpu-refused",
                    f"{which}, from {place}, does not compile for TPU {view.generation}: {causes.first_line(row.error)}",
                    graph=graph, filename=row.filename, lineno=row.lineno, function=row.function,
                ))
