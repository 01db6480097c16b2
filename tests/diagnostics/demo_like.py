"""A report shaped like the bundled demo's, for the views' tests: the kept demo run's report
(``data/demo_run``: its graphs, breaks, recompiles, TPU view) with ranked findings and a timeline
laid out by hand, step by step, as the demo runs (import, then per step: Dynamo's compiles, the
bridge's extractions, XLA compiles, calls with their CPU fallback, the sync).

The spans do not overlap, so the time split is derived from them here (each share the sum of
its spans, ``other`` the rest of the wall time): the views' tests compare what they show against
these numbers, which the views do not compute.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from xlabridge.diagnostics.report import Finding, Report, Span, SpanKind, TimeSplit

DATA = Path(__file__).parent / "data" / "demo_run"
DEMO = "/work/main/xlabridge/examples/demo.py"
PID = 5546
WALL = 13.478
GB_URL = "https://pytorch-labs.github.io/compile-graph-break-site/gb/gb0124.html"

SHARE_OF = {
    SpanKind.IMPORT: "imports", SpanKind.TRACE: "tracing", SpanKind.EXTRACT: "tracing",
    SpanKind.XLA_COMPILE: "xla_compile", SpanKind.EXECUTE: "execution", SpanKind.CPU_FALLBACK: "cpu_fallback",
    SpanKind.LAZY: "lazy", SpanKind.TRANSFER: "transfers", SpanKind.EAGER: "eager",
    SpanKind.BACKEND_COMPILE: "backend_compile", SpanKind.DEVICE: "execution",
}
"""Which share each kind of span is part of (written out here, independently of the views')."""


def timeline() -> list[Span]:
    """Five training steps of the demo: graph 0/3 (forward/backward of frame 0) compiled at step
    one and called five times; the resume frame recompiled at every step (graphs 1/2, 4/5, ...)."""
    spans: list[Span] = []
    clock = 0.05

    def add(kind: SpanKind, seconds: float, label: str, graph: int | None = None, calls: int = 1) -> None:
        nonlocal clock
        spans.append(Span(PID, kind.value, round(clock, 6), seconds, label, graph, calls))
        clock += seconds

    def gap(seconds: float) -> None:
        nonlocal clock
        clock += seconds

    add(SpanKind.IMPORT, 1.9, "torch_xla")
    gap(0.34)
    add(SpanKind.EAGER, 0.06, "eager ops")  # not in the demo: every kind of span gets one
    add(SpanKind.BACKEND_COMPILE, 0.08, "inductor compile 9/0 forward")  # a graph of another backend
    add(SpanKind.DEVICE, 0.01, "GPU: inductor 9/0 forward")
    for step in range(5):
        resume = (1, 2) if step == 0 else (2 + 2 * step, 3 + 2 * step)
        if step == 0:
            add(SpanKind.TRACE, 0.93, "compile 0/0")
            add(SpanKind.EXTRACT, 0.21, "FX graph 0 extraction", 0)
            add(SpanKind.XLA_COMPILE, 0.84, "FX graph 0", 0)
        add(SpanKind.CPU_FALLBACK, 0.0018, "aten::exp2", 0)
        add(SpanKind.TRANSFER, 0.0, "device to host (exp2)", 0)
        add(SpanKind.EXECUTE, 0.0027, "FX graph 0 call 1" if step == 0 else f"FX graph 0 call {step + 1}", 0)
        add(SpanKind.TRACE, 0.3, f"compile 1/{step}")
        add(SpanKind.EXTRACT, 0.05, f"FX graph {resume[0]} extraction", resume[0])
        add(SpanKind.XLA_COMPILE, 0.45 if step == 0 else 0.12, f"FX graph {resume[0]}", resume[0])
        add(SpanKind.EXECUTE, 0.009, f"FX graph {resume[0]} call 1", resume[0])
        if step == 0:
            add(SpanKind.XLA_COMPILE, 1.31, "FX graph 3", 3)
        add(SpanKind.EXECUTE, 0.0057, f"FX graph 3 call {step + 1}", 3)
        add(SpanKind.XLA_COMPILE, 0.5 if step == 0 else 0.1, f"FX graph {resume[1]}", resume[1])
        add(SpanKind.EXECUTE, 0.004, f"FX graph {resume[1]} call 1", resume[1])
        gap(0.05)
        add(SpanKind.LAZY, 0.21 if step == 0 else 0.035, "sync (optimizer step)")
        add(SpanKind.TRANSFER, 0.002, "loss to host")
        gap(0.12)
    add(SpanKind.EXECUTE, 0.0135, "FX graph 0 calls 2-5", 0, calls=4)
    return spans


def time_split(spans: list[Span]) -> TimeSplit:
    shares = dict.fromkeys(SHARE_OF.values(), 0.0)
    for span in spans:
        shares[SHARE_OF[SpanKind(span.kind)]] += span.seconds
    return TimeSplit(pid=PID, wall=WALL, other=WALL - sum(shares.values()), **shares)


def findings() -> list[Finding]:
    """Ranked costliest first, as ``Report.findings`` is."""
    return [
        Finding("recompiles", "Dynamo specialised on the value read with .item() and recompiled at every step: "
                "keep it a tensor (torch.where) or pass it as a tensor argument.",
                cost_seconds=2.34, cost="Dynamo and XLA compiles of the recompiled frame", count=4,
                category="value-specialisation", filename=DEMO, lineno=39,
                function="torch_dynamo_resume_in_forward_at_39", pid=PID),
        Finding("dynamo-break", "Tensor.item() ends the FX graph: keep the value a 0-dim tensor and use it in "
                "tensor ops instead of Python control flow.", cost_seconds=0.41,
                cost="the graph after the break: its compiles and calls", count=5, category="tensor-item",
                code="GB0124", url=GB_URL, filename=DEMO, lineno=39, function="forward", pid=PID),
        Finding("hlo-break", "aten::exp2 has no XLA lowering: torch.pow(2.0, x) keeps graph 0 whole.", graph=0,
                cost_seconds=0.0234, cost="CPU fallback and transfers at its calls", count=5,
                category="cpu-fallback", filename=DEMO, lineno=37, function="forward", pid=PID),
        Finding("cache", "No persistent compilation cache: every run compiles again (--cache-dir DIR).",
                cost_seconds=None, cost=""),
    ]


def report() -> Report:
    with gzip.open(DATA / "report-ebefcba.json.gz", "rt", encoding="utf-8") as packed:
        made = Report.from_dict(json.load(packed))
    made.timeline = timeline()
    made.time = [time_split(made.timeline)]
    made.findings = findings()
    for graph in made.xla_graphs:  # the graphs' user lines, as schema /4 carries them
        first_frame = graph.compile_id.startswith("0/")
        graph.filename, graph.function = DEMO, "forward" if first_frame else "torch_dynamo_resume_in_forward_at_39"
        graph.lineno = 36 if first_frame else 41
    return made
