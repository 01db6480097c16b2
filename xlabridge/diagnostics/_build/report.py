"""Building a report from events: the only way a ``Report`` is made.

``build_report(events)`` takes the events of one ``diagnose()`` block, or of every process of an
``xlabridge report`` run (process ids kept apart). Causes, suggestions and which frame is the
user's are decided here, from the raw facts in the events, so a newer xlabridge re-reads an
older log with its newer knowledge. The TPU view's rows are joined in by ``_build_tpu`` and the
pod rows by ``_pod_report``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from xlabridge.diagnostics._build import (
    tpu as _build_tpu,
    endings as _endings,
    findings as _findings,
    pod as _pod_report,
    timeline as _timeline,
    timesplit as _timesplit,
    torch_breaks,
    causes,
    ranks as _ranks,
    requests as _requests,
)
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._frames import UNKNOWN, UserCodeRule
from xlabridge.diagnostics.report import (
    CompileRequest,
    DynamoBreak,
    DynamoGraph,
    Finding,
    HloBreak,
    ProbeReport,
    Recompile,
    RecompileGroup,
    Report,
    Segment,
    TimeSplit,
    XlaGraph,
)

__all__ = ["build_report"]

logger = logging.getLogger(__name__)


def build_report(events: Iterable[ev.Event], *, running: Collection[int] = ()) -> Report:
    """The report of ``events`` (one process's or several's, in any interleaving).

    ``running``: processes the reader saw still running (their report is the report so far); a
    process with no ``process_end`` that is not among them died without a word."""
    by_pid: dict[int, list[ev.Event]] = defaultdict(list)
    tpu_events: list[ev.Event] = []
    for event in latest_sums(events):
        # TPU compiles are made after the run, by whichever process compiled them: not a
        # process of the run.
        (tpu_events if isinstance(event, (ev.TpuCompiled, ev.TpuPass, ev.TpuSlice)) else by_pid[event.pid]).append(event)
    report = Report()
    builders = []
    for pid, process_events in by_pid.items():
        builder = _ProcessBuilder(report, pid, process_events, pid in running)
        try:
            builder.build()
        except Exception as error:  # noqa: BLE001 - one damaged log must not cost the others' report
            logger.debug("building the report of process %s failed", pid, exc_info=True)
            report.warnings.append(f"the report of process {pid} is incomplete: its events could not all be read "
                                   f"into it ({type(error).__name__}: {error})")
        builders.append(builder)
    _ranks.fold_helpers(report, by_pid)
    _ranks.name_launchers(report, by_pid)
    report.recompile_groups = _group_recompiles(report.recompiles)
    for row in report.processes:
        finding = _endings.ending_finding(row, report.processes)
        if finding is not None:
            report.findings.append(finding)
    if tpu_events:
        _build_tpu.add_tpu_view(report, [(b.events, b.rule) for b in builders], tpu_events)
    processes = [(b.pid, b.events, b.rule) for b in builders]
    _pod_report.add_divergences(report, processes)
    _ranks.add_rank_differences(report, processes)
    _ranks.death_chain(report)
    _ranks.holdups(report, processes)
    _findings.rank(report)
    return report


def latest_sums(events: Iterable[ev.Event]) -> list[ev.Event]:
    """``events`` without the cumulative sums a later one of the same graph or call site replaces
    (a log's sums file and its end hold successive states of the same sums)."""
    events = list(events)
    latest: dict[tuple, ev.Event] = {}
    for event in events:
        if isinstance(event, ev.GraphCalls) and event.cumulative:
            key: tuple = ("graph", event.pid, event.graph)
        elif isinstance(event, ev.SyncCalls):
            key = ("site", event.pid, event.site)
        else:
            continue
        if key not in latest or event.t >= latest[key].t:
            latest[key] = event
    if not latest:
        return events
    keep = {id(event) for event in latest.values()}
    return [e for e in events
            if id(e) in keep or not (isinstance(e, ev.SyncCalls) or (isinstance(e, ev.GraphCalls) and e.cumulative))]


class _ProcessBuilder:
    """Adds one process's events to a report."""

    def __init__(self, report: Report, pid: int, events: list[ev.Event], running: bool = False) -> None:
        self.report, self.pid, self.events, self.running = report, pid, events, running
        start = next((e for e in events if isinstance(e, ev.ProcessStart)), None)
        end = next((e for e in reversed(events) if isinstance(e, ev.ProcessEnd)), None)
        self.start = start
        # a script run by a launcher can lose ``__main__.__file__`` before exit: its path from argv then
        argv = (start.environment.get("argv") or [""]) if start else [""]
        script = argv[0] if str(argv[0]).endswith(".py") and os.path.isabs(argv[0]) else None
        program = (end.main_file if end else None) or (start.main_file if start else None) or script
        self.rule = UserCodeRule.of(start.framework_paths, program) if start else UserCodeRule(())

    def of(self, kind: type[ev.Event]) -> list:
        return [e for e in self.events if isinstance(e, kind)]

    def build(self) -> None:
        self._environment()
        self._probes()
        split = _timesplit.split(self.events)
        if split is not None:
            self.report.time.append(split)
            self._compile_workers(split)
        self._dynamo()
        self._requests()
        self._recompiles()
        self._xla_graphs()
        index = {g.graph: g.index for g in self.report.xla_graphs if g.pid == self.pid}
        self.report.timeline += _timeline.spans(self.events, index)
        self.report.findings += _endings.stall_findings(self.events, self.rule, index)
        _pod_report.add_run_graphs(self.report, self.pid, self.events, self.rule)
        self._trace_read()

    def _compile_workers(self, split: TimeSplit) -> None:
        """The exit of inductor's compile-worker pool, as a finding where it costs."""
        if split.compile_workers_exit < COMPILE_WORKERS_COST:
            return
        pools = [e for e in self.of(ev.ExitWork) if e.what != ev.ExitWork.OBSERVER]
        jobs = sum(p.jobs for p in pools)
        workers = max((p.workers for p in pools), default=0)
        # its readiness check is a job of its own: a pool given no more compiled nothing
        idle = jobs <= len(pools)
        did = "compiled nothing (every graph came from the cache)" if idle else f"was given {jobs} jobs"
        self.report.findings.append(Finding(
            "compile-workers-exit",
            f"{split.compile_workers_exit:.1f} s at exit shutting down inductor's compile-worker pool "
            f"({workers} workers), which {did}. Inductor starts the pool when a graph first reaches it and waits for "
            "it at exit. torch documents TORCHINDUCTOR_COMPILE_THREADS (torch._inductor.config.compile_threads): "
            "with 1, no pool is started and compiles run in the process, the choice for runs whose graphs come "
            "from the cache; otherwise start the pool early (torch._inductor.async_compile.AsyncCompile.warm_pool())"
            " so that its start overlaps the program's own work and is done by exit.",
            cost_seconds=split.compile_workers_exit, cost="seconds of the process's exit",
            count=len(pools), pid=self.pid))

    def _trace_read(self) -> None:
        """What a process read from torch's structured trace cannot say, and what Dynamo gave up on."""
        for read in self.of(ev.TraceRead):
            if TRACE_LIMITS not in self.report.warnings:
                self.report.warnings.append(TRACE_LIMITS)
            for failure in read.failures:
                self.report.findings.append(Finding(
                    "compile-failure", f"Dynamo gave up compiling {failure}; the frame ran in eager mode",
                    pid=self.pid))
            if read.eager_batches:
                self.report.warnings.append(
                    f"{read.file}: {read.eager_batches} TorchTPU eager batch(es) (torchtpu_eager_*): eager work, "
                    "not in this report's graphs")
            if read.skipped:
                self.report.warnings.append(f"{read.file}: {read.skipped} line(s) were not records of the trace")

    def _where(self, frames: Sequence[ev.Frame]) -> dict[str, Any]:
        frame = self.rule.innermost(frames)
        return {"filename": frame.filename, "lineno": frame.lineno, "function": frame.function}

    def _environment(self) -> None:
        end = next((e for e in reversed(self.events) if isinstance(e, ev.ProcessEnd)), None)
        environment = (end.environment if end and end.environment else None) or (self.start.environment if self.start else {})
        if not self.report.environment:
            self.report.environment = dict(environment)
        row = _endings.process_row(self.pid, self.events, self.rule, self.running)
        row.role = _ranks.role(self.events)
        self.report.processes.append(row)
        cache = environment.get("compilation_cache") or {}
        if cache.get("state") not in (None, "off", "enabled"):
            self.report.findings.append(Finding(
                "cache", f"persistent cache at {cache.get('directory')}: {cache.get('state')}: {cache.get('reason')}"
            ))

    def _probes(self) -> None:
        statuses = self.of(ev.ProbeStatus)
        for status in statuses:
            if status.state == ev.ProbeState.FAILED and status.reason not in self.report.warnings:
                self.report.warnings.append(status.reason)
        order = {ev.ProbeState.OK: 0, ev.ProbeState.FAILED: 1, ev.ProbeState.SILENT: 2, ev.ProbeState.UNAVAILABLE: 3}
        worst: dict[str, ev.ProbeStatus] = {}
        for status in statuses:
            current = worst.get(status.probe)
            if current is None or order[status.state] > order[current.state] or (
                status.state == current.state and not current.surface
            ):
                worst[status.probe] = status if status.surface or current is None else dataclasses.replace(
                    status, surface=current.surface, patch=current.patch, sees=current.sees)
        known = {p.name: p for p in self.report.probes}
        for name, status in worst.items():
            entry = ProbeReport(name, status.state.value, status.reason if status.state != ev.ProbeState.FAILED
                                else "", status.surface, status.patch, status.sees)
            if name in known:
                if order[ev.ProbeState(known[name].state)] >= order[status.state]:
                    continue
                self.report.probes.remove(known[name])
            self.report.probes.append(entry)
            if status.state in (ev.ProbeState.UNAVAILABLE, ev.ProbeState.SILENT):
                message = f"probe {name} is {status.state.value}: {status.reason}; the report lacks {status.sees}"
                if message not in self.report.warnings:
                    self.report.warnings.append(message)
                    self.report.findings.append(Finding("probe", message))

    def _callers(self, compile_id: str) -> list[ev.Frame]:
        """The stack that called into the compiled code of ``compile_id`` (its frame's callers)."""
        return self.callers.get(compile_id.split("/")[0], [])

    def _dynamo(self) -> None:
        self.callers: dict[str, list[ev.Frame]] = {}
        for compile_event in self.of(ev.DynamoCompile):
            if compile_event.trigger == "dynamo" and compile_event.caller_frames:
                self.callers.setdefault(compile_event.compile_id.split("/")[0], compile_event.caller_frames)
        paths = {e.compile_id: e for e in self.of(ev.CompilePath)}
        tracing: dict[str, float] = defaultdict(float)
        for compile_event in self.of(ev.DynamoCompile):
            if compile_event.trigger == "dynamo":
                tracing[compile_event.compile_id] += compile_event.t - compile_event.start
        ended = set()
        timed: set[str] = set()
        splits = {e.compile_id: e for e in self.of(ev.GraphSplit)}
        for captured in self.of(ev.GraphCaptured):
            path = paths.get(captured.compile_id)
            split = splits.get(captured.compile_id)
            # a compilation that hands its backend several graphs (a restart of Dynamo's analysis) timed once
            seconds = tracing.get(captured.compile_id) if captured.compile_id not in timed else None
            timed.add(captured.compile_id)
            self.report.dynamo_graphs.append(DynamoGraph(
                compile_id=captured.compile_id, op_count=captured.op_count, backend=captured.backend,
                path=path.path if path else "", path_reason=path.reason if path else "",
                ends_in_break=captured.ends_in_break, tracing_seconds=seconds,
                pid=self.pid, **self._where(self._callers(captured.compile_id) + captured.frames),
                ddp_buckets=list(split.bucket_bytes) if split else [],
                ddp_bucket_cap_bytes=split.bucket_cap_bytes if split else None,
                ddp_first_bucket_cap_bytes=split.first_bucket_cap_bytes if split else None,
            ))
            if captured.ends_in_break:
                ended.add(captured.compile_id)
        # Each break as torch recorded it; a graph ending in a break torch's record was not seen for
        # (an older log, a torch that records none) keeps the reason its backend was handed.
        logged = {e.compile_id for e in self.of(ev.TorchBreak)}
        for record in self.of(ev.TorchBreak):
            self._torch_break(record, record.compile_id in ended)
        for graph_break in self.of(ev.GraphBreak):
            if graph_break.compile_id in ended and graph_break.compile_id not in logged:
                cause = causes.classify_dynamo_break(graph_break.reason)
                frames = self._callers(graph_break.compile_id) + graph_break.frames
                self.report.dynamo_breaks.append(DynamoBreak(
                    reason=causes.first_line(graph_break.reason), category=cause.category,
                    detail=graph_break.reason.strip(),
                    compile_id=graph_break.compile_id, pid=self.pid,
                    **self._where(frames), **self._library(graph_break.frames, cause.suggestion),
                ))
        self._splits(splits)

    def _library(self, frames: Sequence[ev.Frame], suggestion: str) -> dict[str, Any]:
        """The library a break is inside, its frame there, and the advice that fits a break there
        (``suggestion`` where the break is in the user's own code)."""
        found = self.rule.library(frames)
        if found is None:
            return {"suggestion": suggestion}
        package, frame = found
        cause = causes.classify_library(package, frame.filename)
        return {"library": package, "library_filename": frame.filename, "library_lineno": frame.lineno,
                "library_function": frame.function, "expected": cause.expected,
                "suggestion": f"Inside {cause.name} ({causes.library_path(package, frame.filename)}:{frame.lineno}), "
                              f"reached from this line. {cause.suggestion}"}

    def _requests(self) -> None:
        """Each request to compile; one Dynamo skips the target of is a finding."""
        compiled = [e.code for e in self.of(ev.DynamoCompile) if e.trigger == "dynamo" and e.code is not None]
        for request in self.of(ev.CompileRequest):
            where = self._where(request.frames)
            nothing = request.code is not None and request.code in request.skipped
            self.report.compile_requests.append(CompileRequest(
                how=request.how, target=request.target, backend=request.backend,
                code=_place(request.code) if request.code else "", skipped=[_place(f) for f in request.skipped],
                compiles_nothing=nothing, pid=self.pid, **where,
            ))
            if nothing:
                self.report.findings.append(_requests.skipped_finding(
                    request, where, [c for c in compiled if self.rule.is_user(c.filename)], self.pid))

    def _torch_break(self, record: ev.TorchBreak, ends_graph: bool) -> None:
        text = torch_breaks.parse(record.text)
        cause = causes.classify_graph_break(text.code, text.reason)
        frames = list(text.frames) or ([text.location] if text.location else [])
        where = self._where(frames if text.frames else self._callers(record.compile_id) + frames)
        self.report.dynamo_breaks.append(DynamoBreak(
            reason=text.gb_type or causes.first_line(text.reason), category=cause.category,
            detail=text.reason, compile_id=record.compile_id, pid=self.pid,
            code=text.code, url=text.url, explanation=text.explanation, hints=list(text.hints), source="torch",
            ends_graph=ends_graph, **where, **self._library(frames, cause.suggestion),
        ))

    def _splits(self, splits: dict[str, ev.GraphSplit]) -> None:
        """A finding per graph DDPOptimizer split at DDP's buckets: how many submodules, at which size."""
        for compile_id, split in splits.items():
            if len(split.bucket_bytes) < 2:
                continue
            graph = next((g for g in self.report.dynamo_graphs if g.pid == self.pid and g.compile_id == compile_id),
                         None)
            place = {"filename": graph.filename, "lineno": graph.lineno, "function": graph.function} if graph else {}
            first = ("" if split.first_bucket_cap_bytes == split.bucket_cap_bytes
                     else f", the first bucket {_mib(split.first_bucket_cap_bytes)}")
            self.report.findings.append(Finding(
                "ddp-split",
                f"DDPOptimizer split Dynamo graph {compile_id} into {len(split.bucket_bytes)} submodules at DDP's "
                f"bucket boundaries (bucket_cap_mb {_mib(split.bucket_cap_bytes)}{first}; buckets of "
                f"{', '.join(_mib(b) for b in split.bucket_bytes)}), each compiled by the backend on its own: "
                "expected, it lets each bucket's all-reduce overlap the backward of the next; the backend "
                "cannot fuse across the cuts. Fewer, larger buckets (DDP(..., bucket_cap_mb=...)) give fewer "
                "splits; torch._dynamo.config.optimize_ddp = False compiles one graph (no overlap).",
                count=len(split.bucket_bytes), pid=self.pid, **place,
            ))

    def _recompiles(self) -> None:
        callers = {e.compile_id: e.caller_frames for e in self.of(ev.DynamoCompile) if e.trigger == "dynamo"}
        for recompile in self.of(ev.Recompile):
            code = recompile.code or UNKNOWN
            where = self._where(callers.get(recompile.compile_id, self._callers(recompile.compile_id)) + [code])
            if where["filename"] == UNKNOWN.filename:
                where = {"filename": code.filename, "lineno": code.lineno, "function": code.function}
            cause = causes.classify_recompile(recompile.reason)
            reason = causes.first_line(recompile.reason)
            if not causes.guard_text(recompile.reason).strip():
                reason = f"{reason.rstrip(': ')}: no guard failed (compiled before for another backend)"
            self.report.recompiles.append(Recompile(
                reason=reason, guard=causes.failed_guard(recompile.reason), category=cause.category, suggestion=cause.suggestion, compile_id=recompile.compile_id,
                code=f"{code.filename}:{code.lineno} ({code.function})", pid=self.pid, **where,
            ))

    def _xla_graphs(self) -> None:
        partitions = {e.graph: e for e in self.of(ev.Partitioned)}
        called: dict[int, list[ev.GraphCalled]] = defaultdict(list)
        for call in self.of(ev.GraphCalled):
            called[call.graph].append(call)
        summed: dict[int, list[ev.GraphCalls]] = defaultdict(list)
        for calls in self.of(ev.GraphCalls):
            summed[calls.graph].append(calls)
        compiles: dict[int, list[ev.XlaCompile]] = defaultdict(list)
        for compile_event in self.of(ev.XlaCompile):
            if compile_event.graph is not None:
                compiles[compile_event.graph].append(compile_event)
        seen: dict[int, list[ev.XlaGraphSeen]] = defaultdict(list)
        for graph_seen in self.of(ev.XlaGraphSeen):
            if graph_seen.graph is not None:
                seen[graph_seen.graph].append(graph_seen)
        dynamo_places = {g.compile_id: {"filename": g.filename, "lineno": g.lineno, "function": g.function}
                         for g in self.report.dynamo_graphs if g.pid == self.pid}
        for bridge in self.of(ev.BridgeGraph):
            index = len(self.report.xla_graphs)
            # forward and backward graphs of one frame share its compile id: a backward graph
            # is placed at its forward's line
            place = dynamo_places.get(bridge.compile_id) or self._where(self._callers(bridge.compile_id))
            partition = partitions.get(bridge.graph)
            segments = partition.segments if partition else []
            measured = sorted(called.get(bridge.graph, []), key=lambda c: c.call)
            later = summed.get(bridge.graph, [])
            calls = len(measured) + sum(s.calls for s in later)
            steady_measured = [c for c in measured if c.call > 1] or measured
            steady_calls = len(steady_measured) + sum(s.calls for s in later)
            steady_seconds = sum(c.t - c.start for c in steady_measured) + sum(s.seconds for s in later)
            steady_cpu = sum(c.cpu_fallback_seconds for c in steady_measured) + sum(s.cpu_fallback_seconds for s in later)
            last = measured[-1] if measured else None
            graph_compiles = compiles.get(bridge.graph, [])
            hashes = sorted(seen.get(bridge.graph, []), key=lambda s: s.segment)
            self.report.xla_graphs.append(XlaGraph(
                index=index, compile_id=bridge.compile_id, role=bridge.role, fx_ops=bridge.fx_ops,
                xla_graphs=sum(s.kind in _PROGRAMS for s in segments), compiler=bridge.compiler,
                buckets=list(bridge.buckets),
                compiles=sum(c.count for c in graph_compiles),
                compile_seconds=sum(c.seconds for c in graph_compiles),
                extraction_seconds=(partition.t - partition.start) if partition else None,
                executions_per_call=last.executions if last else 0,
                transfers_per_call=(last.transfers_to_device + last.transfers_from_device) if last else 0,
                bytes_per_call=(last.bytes_to_device + last.bytes_from_device) if last else 0,
                seconds_per_call=steady_seconds / steady_calls if steady_calls else None,
                cpu_fallback_seconds_per_call=steady_cpu / steady_calls if steady_calls else 0.0,
                calls=calls,
                segments=[Segment(s.kind.value, list(s.ops)) for s in segments],
                hashes=[h.hash for h in hashes], hlo_files=[h.hlo_file for h in hashes],
                graph=bridge.graph, pid=self.pid, **place,
            ))
            for segment in segments:
                if segment.kind == ev.SegmentKind.XLA or segment.node is None:
                    continue
                node = segment.node
                fell_back = bool(node.fallback_ops)
                op = node.fallback_ops[0] if fell_back else node.op
                cause = (causes.COLLECTIVE_SPLIT if segment.kind == ev.SegmentKind.COLLECTIVE
                         else causes.classify_hlo_break(op, fell_back=fell_back))
                self.report.hlo_breaks.append(HloBreak(
                    op=op, category=cause.category, suggestion=cause.suggestion, graph=index, node=node.name,
                    **self._where(self._callers(bridge.compile_id) + list(node.frames)),
                ))
        self._cpu_only_findings()
        stood_in = [b.graph for b in self.of(ev.BridgeGraph) if b.stand_in]
        if stood_in:
            self.report.warnings.append(
                f"no TPU in process {self.pid}: TorchTPU's programs ({len(stood_in)} graph(s)) ran on the CPU in their "
                "place, as xlabridge's stand-in, so their execution times are the CPU's; their TPU view is "
                "compiled for TPU (--tpu), not run")

    def _cpu_only_findings(self) -> None:
        """One finding per FX graph of Dynamo compiled for XLA with every tensor on the CPU."""
        ours = [g for g in self.report.xla_graphs if g.pid == self.pid]
        # TorchTPU's graphs run on CPU where there is no TPU (the stand-in, which the report states
        # once): only torch_xla's CPU graphs are a misplaced model
        cpu_only = {e.compile_id for e in self.of(ev.CompilePath) if e.cpu_only and e.target == "xla"}
        cpu_only |= {b.compile_id for b in self.of(ev.BridgeGraph)
                     if b.input_devices == ["cpu"] and b.compiler == "torch_xla"}
        for compile_id in sorted(cpu_only):
            graphs = [g.index for g in ours if g.compile_id == compile_id]
            self.report.findings.append(Finding(
                "cpu-only-graph",
                f"the FX graph of compile id {compile_id} ran entirely on the CPU: its tensors are not on "
                "the XLA device. Move the model and its inputs there (.to(torch_xla.device())); a graph "
                "meant for the CPU compiles faster with backend='inductor'.",
                graph=graphs[0] if graphs else None,
            ))


def _place(frame: ev.Frame) -> str:
    return f"{frame.filename}:{frame.lineno} ({frame.function})"


def _mib(size: int) -> str:
    """Bytes in MiB as DDP's ``bucket_cap_mb`` counts them (``1`` for 1048576)."""
    return f"{size / 2**20:.3g} MiB"


TRACE_LIMITS = (
    "read from torch's structured trace (TORCH_TRACE), not observed: it holds Dynamo's graphs, graph breaks, "
    "recompiles and compile times, and TorchTPU's partitions; it holds no execution times and no wall time of "
    "the process (no time split, no calls on the timeline), no XLA compile times outside TorchTPU, and no HLO "
    "lowering breaks of torch_xla (its bridge does not write to the trace: run under `xlabridge report` for them)"
)
"""What a report read from a trace cannot say, said once as a warning."""

COMPILE_WORKERS_COST = 0.25
"""Seconds of the compile-worker pool's exit from which it is a finding."""

_PROGRAMS = (ev.SegmentKind.XLA, ev.SegmentKind.COLLECTIVE)
"""Segments compiled as XLA programs (a TorchTPU collective is one of its own)."""


def _group_recompiles(recompiles: Sequence[Recompile]) -> list[RecompileGroup]:
    groups: dict[tuple[str, int, str], list[Recompile]] = {}
    for recompile in recompiles:
        groups.setdefault((recompile.filename, recompile.lineno, recompile.function), []).append(recompile)
    return [
        RecompileGroup(filename, lineno, function, len(items), items[0].reason, items[-1].reason, items[-1].category,
                       guards=list(dict.fromkeys(r.guard for r in items if r.guard)))
        for (filename, lineno, function), items in groups.items()
    ]
