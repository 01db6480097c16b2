"""torch's structured trace (``TORCH_TRACE=DIR``) as an observation source: its records turned into
xlabridge's events, for a run that xlabridge did not observe.

torch writes one log per process into ``DIR`` (``dedicated_log_torch_trace[_rank_N]_*.log``): each
record is one line, a glog prefix (level, time, process id, the writing source line) and a JSON
envelope (the record's kind as its key; ``frame_id``, ``frame_compile_id``, ``attempt`` for records
of a compilation; ``rank`` once distributed; ``has_payload``, the MD5 of a payload that follows on
lines starting with a tab); ``{"str": [path, index]}`` records intern the file names of stacks.
tlparse reads the same files (its ``parse_path``).

Read here, per log (one process), as the probes would have seen it:

* ``dynamo_start`` (the stack that entered Dynamo), ``compilation_metrics`` (each frame
  compilation: start time, duration, code, op count, restart and failure reasons),
  ``dynamo_output_graph`` (each FX graph handed to a backend; its first op's line from the
  graph's ``# File:`` comment), ``dynamo_graph_break_reason`` (each graph break, torch's text),
  ``recompile_reasons`` (the guard that failed): Dynamo's graphs, breaks, recompiles, compile times;
* TorchTPU's ``torchtpu_fx_graph`` (each partition its split compiler compiles, after its FX
  passes; inside an ``entire_backward_compile`` span a backward graph's) and
  ``torchtpu_stablehlo_graph`` (the StableHLO it compiled a partition to, written only where it
  lowers: on a TPU): its graphs and partitions, and the programs the TPU view compiles;
* xlabridge's own artifacts (``xlabridge_*``, written by ``trace_artifacts``) are skipped: they are
  a report's rows, not facts of the run.

A trace holds no HLO lowering breaks of torch_xla (its bridge does not write to it), no execution
times, no wall time of the process and no XLA compile times outside TorchTPU: a ``trace_read``
event marks the process, and the report says so in its warnings.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics.report._report import TRACE_SOURCE

LOG_PATTERN = "dedicated_log_torch_trace*.log"
"""The name torch gives each process's log in the ``TORCH_TRACE`` directory."""

OWN_ARTIFACTS = "xlabridge_"
"""The name prefix of the artifacts xlabridge writes into a trace."""

_PREFIX = re.compile(
    r"^(?P<level>[VIWEC])(?P<month>\d{2})(?P<day>\d{2}) (?P<clock>\d{2}:\d{2}:\d{2})\.(?P<us>\d{6}) +"
    r"(?P<pid>\d+) (?P<source>[^:\]]+):(?P<line>\d+)\] (?P<json>\{.*)$"
)
_ENVELOPE_KEYS = {"frame_id", "frame_compile_id", "attempt", "has_payload", "rank", "compiled_autograd_id",
                  "stack"}
_FILE_COMMENT = re.compile(r"# File: (?P<file>.+?):(?P<line>\d+) in (?P<func>[^,\s]+)")
_NODE_LINE = re.compile(r"^\s+\w+(?:: \"[^\"]*\")? = (?!self\.)")
_COLLECTIVE = re.compile(r"torch\.ops\.(?P<op>_c10d_functional\.\w+)")
_SITE = re.compile(r"^(?P<dir>.*/(?:site|dist)-packages)/(?P<package>[A-Za-z_]\w*)/")
_STDLIB = re.compile(r"^(?P<dir>/.*/lib/python3\.\d+)/(?!site-packages|dist-packages)[^/]+")
_FRAMEWORKS = ("torch", "torch_xla", "functorch", "xlabridge", "torch_tpu", "torchax")


_REASON = "Graph Break Reason:"
_TRACEBACK = "\nTraceback (most recent call last):"
_EXCEPTION = re.compile(r"^torch\._dynamo\.exc\.\w+: ", re.M)


def without_traceback(text: str) -> str:
    """A graph break's text (``dynamo_graph_break_reason``) less Dynamo's own Python traceback, whose
    frames are Dynamo's, not the user's; for a break that made Dynamo skip the frame, the exception's
    message is kept: it is the break's message."""
    head, found, tail = text.partition(_TRACEBACK)
    if not found or _REASON in head:
        return head.rstrip()
    messages = list(_EXCEPTION.finditer(tail))
    if not messages:
        return head.rstrip()
    return f"{head.rstrip()}\n{tail[messages[-1].start():].rstrip()}"


@dataclass
class Record:
    """One record of a trace log."""

    lineno: int
    seconds: float
    """The record's time (the glog prefix's, as seconds of this machine's clock)."""
    pid: int
    kind: str
    """The envelope's key for the record (``dynamo_output_graph``; ``artifact`` for named artifacts)."""
    metadata: dict[str, Any]
    envelope: dict[str, Any]
    payload: str | None

    @property
    def compile_id(self) -> str:
        """``frame/recompile`` (``""`` outside a compilation)."""
        frame, attempt = self.envelope.get("frame_id"), self.envelope.get("frame_compile_id")
        if frame is None or attempt is None:
            return ""
        autograd = self.envelope.get("compiled_autograd_id")
        return f"!{autograd}/{frame}/{attempt}" if autograd is not None else f"{frame}/{attempt}"

    @property
    def name(self) -> str:
        """An artifact's name, else the record's kind."""
        return str(self.metadata.get("name", "")) if self.kind == "artifact" else self.kind


def records(path: Path) -> tuple[list[Record], int]:
    """The records of one log, and how many lines were not records (other logging, damaged lines)."""
    year = time.localtime(path.stat().st_mtime).tm_year
    found: list[Record] = []
    skipped = 0
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if not line or line.startswith("\t"):
            continue
        match = _PREFIX.match(line)
        try:
            envelope = json.loads(match["json"]) if match else None
        except ValueError:
            envelope = None
        if not isinstance(envelope, dict):
            skipped += 1
            continue
        payload_lines = []
        while index < len(lines) and lines[index].startswith("\t"):
            payload_lines.append(lines[index][1:])
            index += 1
        kinds = [key for key in envelope if key not in _ENVELOPE_KEYS]
        if not kinds:
            skipped += 1
            continue
        metadata = envelope[kinds[0]]
        stamp = time.mktime(time.strptime(f"{year} {match['month']} {match['day']} {match['clock']}", "%Y %m %d %H:%M:%S"))
        found.append(Record(
            lineno=index, seconds=stamp + int(match["us"]) / 1e6, pid=int(match["pid"]), kind=kinds[0],
            metadata=metadata if isinstance(metadata, dict) else {"value": metadata}, envelope=envelope,
            payload="\n".join(payload_lines) if "has_payload" in envelope else None,
        ))
    return found, skipped


def logs(directory: Path) -> list[Path]:
    """The trace logs of ``directory``, one per process, in name order."""
    return sorted(p for p in directory.glob(LOG_PATTERN) if p.is_file())


@dataclass
class _Partition:
    compile_id: str
    backward: bool
    text: str
    seconds: float
    stablehlo: str | None = None


def _frames(stack: Any, strings: dict[int, str]) -> list[ev.Frame]:
    frames = []
    for entry in stack or []:
        if isinstance(entry, dict):
            filename = entry.get("filename")
            name = strings.get(filename, str(filename)) if isinstance(filename, int) else str(filename)
            frames.append(ev.Frame(name, int(entry.get("line") or 0), str(entry.get("name") or "")))
    return frames


def _paths(paths: set[str]) -> dict[str, list[str]]:
    """The framework and standard-library directories the traced process had, from the paths its
    records name (``_frames.UserCodeRule`` applies them)."""
    found: dict[str, set[str]] = {}
    for path in paths:
        site = _SITE.match(path)
        if site and site["package"] in _FRAMEWORKS:
            found.setdefault(site["package"], set()).add(f"{site['dir']}/{site['package']}")
        stdlib = _STDLIB.match(path)
        if stdlib and not site:
            found.setdefault("python-stdlib", set()).add(stdlib["dir"])
    return {name: sorted(dirs) for name, dirs in found.items()}


def _fx_ops(text: str) -> int:
    """The nodes an FX graph's readable code computes (its assignments other than attribute reads)."""
    return sum(bool(_NODE_LINE.match(line)) for line in text.splitlines())


def _fx_frames(text: str) -> list[ev.Frame]:
    """The first ``# File:`` line of an FX graph's readable code, as a frame."""
    match = _FILE_COMMENT.search(text)
    return [ev.Frame(match["file"], int(match["line"]), match["func"])] if match else []


class _Reader:
    """One log's records turned into one process's events."""

    def __init__(self, path: Path, records_: list[Record], skipped: int, hlo: Path | None) -> None:
        self.path, self.records, self.skipped, self.hlo = path, records_, skipped, hlo
        self.pid = records_[0].pid if records_ else 0
        self.rank = next((r.envelope["rank"] for r in records_ if isinstance(r.envelope.get("rank"), int)), None)
        self.events: list[ev.Event] = []
        self.strings: dict[int, str] = {}

    def stamp(self, t: float) -> dict[str, Any]:
        return {"t": t, "pid": self.pid, "rank": self.rank, "world": None}

    def read(self) -> list[ev.Event]:
        paths: set[str] = set()
        starts: dict[str, list[ev.Frame]] = {}
        metrics: list[Record] = []
        graphs: list[Record] = []
        breaks: list[Record] = []
        recompile_reasons: dict[str, list[str]] = {}
        partitions: list[_Partition] = []
        backward_open: set[str] = set()
        eager = 0
        for record in self.records:
            name = record.name
            if record.kind == "str" and isinstance(record.metadata.get("value"), list):
                path, number = record.metadata["value"]
                self.strings[int(number)] = str(path)
                paths.add(str(path))
            elif record.kind == "dynamo_start":
                starts.setdefault(record.compile_id, _frames(record.metadata.get("stack"), self.strings))
            elif record.kind == "compilation_metrics":
                metrics.append(record)
            elif record.kind == "dynamo_output_graph":
                graphs.append(record)
            elif name == "dynamo_graph_break_reason":
                breaks.append(record)
            elif name == "recompile_reasons":
                try:
                    reasons = json.loads(record.payload or "[]")
                except ValueError:
                    reasons = [record.payload or ""]
                recompile_reasons.setdefault(record.compile_id, []).extend(str(r) for r in reasons)
            elif record.kind == "chromium_event" and record.payload:
                self._chromium(record, backward_open)
            elif name == "torchtpu_fx_graph":
                partitions.append(_Partition(record.compile_id, record.compile_id in backward_open,
                                             record.payload or "", record.seconds))
            elif name == "torchtpu_stablehlo_graph":
                owner = next((p for p in reversed(partitions)
                              if p.compile_id == record.compile_id and p.stablehlo is None), None)
                if owner is not None:
                    owner.stablehlo = record.payload or ""
            elif name == "torchtpu_eager_stablehlo":
                eager += 1
        for frames in starts.values():
            paths.update(f.filename for f in frames)
        first = self.records[0].seconds if self.records else 0.0
        main = next((f.filename for frames in starts.values() for f in frames if f.function == "<module>"), None)
        self.events.append(ev.ProcessStart(
            **self.stamp(first), wall_time=first, environment={"source": TRACE_SOURCE, "trace_file": str(self.path)},
            framework_paths=_paths(paths), main_file=main,
        ))
        failures = self._compiles(metrics, starts, recompile_reasons)
        self._graphs(graphs, metrics)
        for record in breaks:
            self.events.append(ev.TorchBreak(**self.stamp(record.seconds), compile_id=record.compile_id,
                                             text=without_traceback(record.payload or ""),
                                             source=self.path.name))
        self._torchtpu(partitions)
        self.events.append(ev.TraceRead(**self.stamp(self.records[-1].seconds if self.records else first),
                                        file=str(self.path), records=len(self.records), skipped=self.skipped,
                                        failures=failures, eager_batches=eager))
        return self.events

    def _chromium(self, record: Record, backward_open: set[str]) -> None:
        try:
            event = json.loads(record.payload or "")
        except ValueError:
            return
        if not isinstance(event, dict) or event.get("name") != "entire_backward_compile":
            return
        compile_id = str((event.get("args") or {}).get("compile_id") or record.compile_id)
        (backward_open.add if event.get("ph") == "B" else backward_open.discard)(compile_id)

    def _compiles(self, metrics: list[Record], starts: dict[str, list[ev.Frame]],
                  recompile_reasons: dict[str, list[str]]) -> list[str]:
        failures = []
        for record in metrics:
            data, compile_id = record.metadata, str(record.metadata.get("compile_id") or record.compile_id)
            start = data.get("start_time")
            seconds = data.get("entire_frame_compile_time_s")
            if isinstance(start, (int, float)) and isinstance(seconds, (int, float)):
                self.events.append(ev.DynamoCompile(**self.stamp(start + seconds), compile_id=compile_id,
                                                    start=start, caller_frames=starts.get(compile_id, [])))
            if data.get("fail_type"):
                where = f" at {data.get('fail_user_frame_filename')}:{data.get('fail_user_frame_lineno')}" if data.get(
                    "fail_user_frame_filename") else ""
                failures.append(f"{compile_id}: {data['fail_type']}: {str(data.get('fail_reason') or '').strip()}{where}")
            frame, _, attempt = compile_id.partition("/")
            if attempt.isdigit() and int(attempt) > 0 and not compile_id.startswith("!"):
                reasons = recompile_reasons.get(compile_id) or ([data["recompile_reason"]] if data.get("recompile_reason") else [])
                code = ev.Frame(str(data.get("co_filename") or "<unknown>"), int(data.get("co_firstlineno") or 0),
                                str(data.get("co_name") or ""))
                self.events.append(ev.Recompile(**self.stamp(record.seconds), compile_id=compile_id,
                                                reason="\n".join(reasons), code=code))
        return failures

    def _graphs(self, graphs: list[Record], metrics: list[Record]) -> None:
        ops = {str(m.metadata.get("compile_id") or m.compile_id): m.metadata.get("graph_op_count") for m in metrics}
        broken = {r.compile_id for r in self.records if r.name == "dynamo_graph_break_reason"}
        for record in graphs:
            text = record.payload or ""
            count = ops.get(record.compile_id)
            self.events.append(ev.GraphCaptured(
                **self.stamp(record.seconds), compile_id=record.compile_id, backend="",
                op_count=int(count) if isinstance(count, int) else _fx_ops(text),
                ends_in_break=record.compile_id in broken, frames=_fx_frames(text),
            ))

    def _torchtpu(self, partitions: list[_Partition]) -> None:
        groups: list[list[_Partition]] = []
        for partition in partitions:
            last = groups[-1][-1] if groups else None
            if last is None or (last.compile_id, last.backward) != (partition.compile_id, partition.backward):
                groups.append([])
            groups[-1].append(partition)
        for number, group in enumerate(groups):
            head = group[0]
            self.events.append(ev.BridgeGraph(
                **self.stamp(head.seconds), graph=number, compile_id=head.compile_id,
                role="backward" if head.backward else "forward", fx_ops=sum(_fx_ops(p.text) for p in group),
                compiler="torchtpu",
            ))
            segments = []
            for partition in group:
                collective = _COLLECTIVE.search(partition.text)
                if collective:
                    node = ev.CpuNode(collective["op"], collective["op"], (), tuple(_fx_frames(partition.text)))
                    segments.append(ev.SegmentRecord(ev.SegmentKind.COLLECTIVE, (collective["op"],), node))
                else:
                    segments.append(ev.SegmentRecord(ev.SegmentKind.XLA, ()))
            self.events.append(ev.Partitioned(**self.stamp(group[-1].seconds), graph=number, start=head.seconds,
                                              segments=segments))
            for segment, partition in enumerate(group):
                source = partition.stablehlo if partition.stablehlo is not None else partition.text
                digest = hashlib.sha256(source.encode()).hexdigest()[:16]
                hlo_file, error = None, ""
                if partition.stablehlo is not None and self.hlo is not None:
                    self.hlo.mkdir(parents=True, exist_ok=True)
                    name = f"{self.pid}-tpu{number}-{segment}.stablehlo.mlir"
                    (self.hlo / name).write_text(partition.stablehlo, encoding="utf-8")
                    hlo_file = f"{self.hlo.name}/{name}"
                elif partition.stablehlo is None:
                    error = ("TorchTPU wrote no StableHLO for this partition (torchtpu_stablehlo_graph: it lowers on a "
                             "TPU only)")
                self.events.append(ev.XlaGraphSeen(
                    **self.stamp(partition.seconds), graph=number, segment=segment, hash=digest,
                    hlo_file=hlo_file, hlo_format=ev.HloFormat.STABLEHLO, hlo_error=error,
                    frames=_fx_frames(partition.text),
                ))


def read(directory: str | os.PathLike[str], *, hlo_dir: Path | None = None) -> list[ev.Event]:
    """The events of every process whose log is in ``directory`` (a ``TORCH_TRACE`` directory);
    with ``hlo_dir``, the StableHLO TorchTPU wrote is saved there (``xla_graph`` events name each
    file relative to ``hlo_dir``'s parent)."""
    found: list[ev.Event] = []
    for path in logs(Path(directory)):
        parsed, skipped = records(path)
        if parsed:
            found += _Reader(path, parsed, skipped, hlo_dir).read()
    return found


def own_artifacts(records_: list[Record]) -> Iterator[Record]:
    """The records of ``records_`` that xlabridge wrote (``trace_artifacts``)."""
    return (r for r in records_ if r.kind == "artifact" and r.name.startswith(OWN_ARTIFACTS))
