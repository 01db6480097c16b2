"""xlabridge's rows written into torch's structured trace, so that tlparse shows them beside Dynamo's.

Where ``TORCH_TRACE`` is set, a run observed by xlabridge adds, as artifacts of the same trace (no
compile id: tlparse lists them under ``(unknown)`` in its index):

* ``xlabridge_hlo_lowering`` (JSON): the FX graphs as torch_xla's bridge or TorchTPU's split
  compiler cut them, and the HLO lowering breaks, which the trace cannot otherwise hold;
* ``xlabridge_tpu_view`` (JSON): the TPU view's rows, where one was compiled;
* ``xlabridge_findings`` (JSON): the findings, ranked, costliest first;
* ``xlabridge_report`` (text): the report as ``render_text`` shows it.

``diagnose()`` and ``explain()`` write them through torch's ``trace_structured`` when observation
ends; under ``xlabridge report`` each process writes its HLO-lowering rows as it exits and the
command, which builds the merged report and compiles the TPU view after the run, appends the
others to each process's log in torch's own record format.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

from xlabridge.diagnostics.report import Report

HLO_LOWERING = "xlabridge_hlo_lowering"
TPU_VIEW = "xlabridge_tpu_view"
FINDINGS = "xlabridge_findings"
REPORT = "xlabridge_report"
NAMES = (HLO_LOWERING, TPU_VIEW, FINDINGS, REPORT)
"""Every artifact xlabridge writes into a trace."""


def payloads(report: Report, names: Sequence[str] = NAMES, *, pid: int | None = None) -> list[tuple[str, str, str]]:
    """``(name, encoding, payload)`` of each artifact of ``names`` ``report`` has; ``pid``: the rows of one
    process only (findings of the run as a whole included)."""
    rows = dataclasses.asdict
    ours = (lambda row_pid: pid is None or row_pid in (pid, None))
    graphs = [g for g in report.xla_graphs if ours(g.pid)]
    indices = {g.index for g in graphs}
    out: list[tuple[str, str, str]] = []
    if HLO_LOWERING in names:
        out.append((HLO_LOWERING, "json", json.dumps({
            "graphs": [rows(g) for g in graphs],
            "breaks": [rows(b) for b in report.hlo_breaks if b.graph in indices],
        })))
    if TPU_VIEW in names and report.tpu is not None:
        out.append((TPU_VIEW, "json", json.dumps(rows(report.tpu))))
    if FINDINGS in names:
        out.append((FINDINGS, "json", json.dumps([rows(f) for f in report.findings if ours(f.pid)])))
    if REPORT in names:
        from xlabridge.diagnostics.views import render_text

        out.append((REPORT, "string", render_text(report)))
    return out


def write(report: Report, names: Sequence[str] = NAMES) -> int:
    """Write the artifacts of ``names`` through torch's structured trace, where it is written; how many."""
    from xlabridge._upstream import torch as upstream_torch

    if not upstream_torch.structured_trace_on() or not (report.dynamo_graphs or report.xla_graphs):
        return 0  # a process that compiled nothing gets no trace log of xlabridge's making
    written = payloads(report, names, pid=os.getpid())
    for name, encoding, payload in written:
        upstream_torch.write_trace_artifact(name, payload, encoding=encoding)
    return len(written)


def _pid_and_rank(path: Path) -> tuple[int | None, int | None]:
    from xlabridge.diagnostics._observe import torch_trace

    found, _ = torch_trace.records(path)
    if not found:
        return None, None
    rank = next((r.envelope["rank"] for r in reversed(found) if isinstance(r.envelope.get("rank"), int)), None)
    return found[0].pid, rank


def _record(pid: int, rank: int | None, name: str, encoding: str, payload: str) -> str:
    """One artifact in torch's record format (``TorchLogsFormatter(trace=True)``): a glog prefix, the
    JSON envelope with the payload's MD5, the payload's lines each after a tab."""
    now = time.time()
    prefix = time.strftime("V%m%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1e6):06d} {pid} "
    envelope: dict[str, object] = {"artifact": {"name": name, "encoding": encoding}}
    if rank is not None:
        envelope["rank"] = rank
    envelope["has_payload"] = hashlib.md5(payload.encode("utf-8")).hexdigest()
    lines = "".join(f"\n\t{line}" for line in payload.split("\n"))
    return f"{prefix}xlabridge/diagnostics/_trace_artifacts.py:0] {json.dumps(envelope)}{lines}\n"


def append(directory: str | os.PathLike[str], report: Report, names: Sequence[str] = (TPU_VIEW, FINDINGS, REPORT)) -> int:
    """Append the artifacts of ``names`` to the trace log of each of ``report``'s processes in
    ``directory`` (after the run, from the command that built the report); how many were written."""
    from xlabridge.diagnostics._observe import torch_trace

    pids = {p.pid for p in report.processes}
    count = 0
    for path in torch_trace.logs(Path(directory)):
        pid, rank = _pid_and_rank(path)
        if pid is None or pid not in pids:
            continue
        records = [_record(pid, rank, *artifact) for artifact in payloads(report, names, pid=pid)]
        with path.open("a", encoding="utf-8") as log:
            log.writelines(records)
        count += len(records)
    return count
