"""``write_trace`` / ``xlabridge report --trace``: Chrome trace-event JSON that Perfetto opens.

The file is checked against the Trace Event Format's rules (the JSON object form, the keys and
types each phase needs, metadata naming every process and thread, microseconds), and against
the report: every span present once, the totals per kind those of the timeline, and per share
of the time split the kinds that make it up.
"""

from __future__ import annotations

import gzip
import json
import math
import shutil
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from tests.diagnostics import demo_like
from xlabridge import cli
from xlabridge.diagnostics import write_trace as exported
from xlabridge.diagnostics.report import Process, Report, Span, SpanKind
from xlabridge.diagnostics.views import write_trace

_METADATA = {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}


def _strict_json(path: Path) -> dict:
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def validate(trace: dict) -> list[dict]:
    """The complete events of ``trace`` after checking it against the trace-event format."""
    assert isinstance(trace, dict) and isinstance(trace["traceEvents"], list)
    assert trace.get("displayTimeUnit", "ms") in ("ms", "ns")
    named_processes, named_threads, complete = set(), set(), []
    for event in trace["traceEvents"]:
        assert isinstance(event["ph"], str) and len(event["ph"]) == 1, event
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int), event
        if event["ph"] == "M":
            assert event["name"] in _METADATA, event
            assert isinstance(event["args"], dict)
            if event["name"] == "process_name":
                assert isinstance(event["args"]["name"], str) and event["args"]["name"]
                named_processes.add(event["pid"])
            elif event["name"] == "thread_name":
                assert isinstance(event["args"]["name"], str) and event["args"]["name"]
                named_threads.add((event["pid"], event["tid"]))
            else:
                assert isinstance(event["args"]["sort_index"], int)
            continue
        assert event["ph"] == "X", event
        assert isinstance(event["name"], str) and event["name"]
        assert isinstance(event["cat"], str)
        for key in ("ts", "dur"):
            assert isinstance(event[key], (int, float)) and not isinstance(event[key], bool), event
            assert math.isfinite(event[key]) and event[key] >= 0, event
        assert isinstance(event.get("args", {}), dict)
        complete.append(event)
    assert {e["pid"] for e in complete} <= named_processes
    assert {(e["pid"], e["tid"]) for e in complete} <= named_threads
    kinds = defaultdict(set)  # a thread holds one kind of span
    threads = defaultdict(list)
    for event in complete:
        kinds[(event["pid"], event["tid"])].add(event["cat"])
        threads[(event["pid"], event["tid"])].append((event["ts"], event["ts"] + event["dur"]))
    assert all(len(k) == 1 for k in kinds.values())
    for thread, slices in threads.items():  # slices of one thread nest or follow each other (Perfetto's rule)
        open_ends: list[float] = []
        for start, end in sorted(slices, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], (thread, start, end)
            open_ends.append(end)
    return complete


def _key(pid: int, label: str, start_us: float, seconds_us: float) -> tuple:
    return pid, label, round(start_us, 3), round(seconds_us, 3)


def check_against(report: Report, complete: list[dict]) -> None:
    expected = Counter(_key(s.pid, s.label, s.start * 1e6, s.seconds * 1e6) for s in report.timeline)
    assert Counter(_key(e["pid"], e["name"], e["ts"], e["dur"]) for e in complete) == expected
    for event in complete:
        assert set(event["args"]) >= {"graph", "calls"}
    totals, timeline = defaultdict(float), defaultdict(float)
    for event in complete:
        totals[(event["pid"], event["cat"])] += event["dur"] / 1e6
    for span in report.timeline:
        timeline[(span.pid, span.kind)] += span.seconds
    assert totals.keys() == timeline.keys()
    for key, seconds in timeline.items():
        assert totals[key] == pytest.approx(seconds, rel=1e-9, abs=1e-9), key


def test_the_demo_trace_is_valid_and_holds_every_span(tmp_path: Path) -> None:
    report = demo_like.report()
    assert exported is write_trace
    path = write_trace(report, tmp_path / "trace.json")
    assert path == tmp_path / "trace.json"
    trace = _strict_json(path)
    complete = validate(trace)
    check_against(report, complete)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert names == {demo_like.PID: f"xlabridge: pid {demo_like.PID}"}
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    # every kind of span the demo's single process has (a job's ranks and a process's exit have the rest)
    assert threads == {span.kind for span in report.timeline}
    assert {kind.value for kind in SpanKind} - threads == {"process-group", "collective-wait", "waiting-for-ranks",
                                                           "exit"}
    summed = [e for e in complete if e["args"]["calls"] > 1]
    assert [(e["name"], e["args"]["calls"], e["args"]["graph"]) for e in summed] == [("FX graph 0 calls 2-5", 4, 0)]


def test_per_kind_totals_match_the_time_split(tmp_path: Path) -> None:
    report = demo_like.report()
    complete = validate(_strict_json(write_trace(report, tmp_path / "trace.json")))
    shares = defaultdict(float)
    for event in complete:
        shares[demo_like.SHARE_OF[SpanKind(event["cat"])]] += event["dur"] / 1e6
    (split,) = report.time
    for share, seconds in shares.items():
        assert seconds == pytest.approx(getattr(split, share), rel=1e-6), share


def test_several_processes_and_unknown_kinds_get_their_own_tracks(tmp_path: Path) -> None:
    report = Report(
        processes=[Process(pid=11, rank=0), Process(pid=12, rank=1)],
        timeline=[Span(11, "execute", 0.5, 0.25, "FX graph 0 call 1", 0), Span(12, "execute", 0.5, 0.0, "tick"),
                  Span(12, "guard-check", 1.0, 0.125, "guards"),
                  # later calls summed into one span laid over a single call of another graph
                  Span(11, "execute", 0.6, 0.5, "FX graph 0 calls 2-5", 0, calls=4),
                  Span(11, "execute", 0.9, 0.5, "FX graph 3 call 1", 3)],
    )
    trace = _strict_json(write_trace(report, tmp_path / "t.json"))
    complete = validate(trace)  # no two slices of one thread overlap without nesting
    check_against(report, complete)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert names == {11: "xlabridge: rank 0 (pid 11)", 12: "xlabridge: rank 1 (pid 12)"}
    threads = {(e["pid"], e["args"]["name"]) for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert threads == {(11, "execute"), (11, "execute 2"), (12, "execute"), (12, "guard-check")}


def test_an_empty_timeline_is_an_empty_valid_trace(tmp_path: Path) -> None:
    assert validate(_strict_json(write_trace(Report(), tmp_path / "t.json"))) == []


def test_the_cli_writes_the_trace_of_a_kept_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "events"
    logs.mkdir()
    for packed in demo_like.DATA.glob("events-*.jsonl.gz"):
        with gzip.open(packed, "rb") as source, open(logs / packed.name[: -len(".gz")], "wb") as target:
            shutil.copyfileobj(source, target)
    out, report_json = tmp_path / "trace.json", tmp_path / "report.json"
    assert cli.main(["report", "--read", str(logs), "--trace", str(out), "--json", str(report_json)]) == 0
    assert f"timeline written to {out}" in capsys.readouterr().out
    report = Report.from_dict(json.loads(report_json.read_text(encoding="utf-8")))
    complete = validate(_strict_json(out))
    check_against(report, complete)
    if not report.timeline:
        pytest.skip("the report builders of this checkout fill no timeline yet")
    _check_builder_totals(report, complete)


def _check_builder_totals(report: Report, complete: list[dict]) -> None:
    """The trace of a real run against the builders' time split: a share made of one kind of span
    (imports, XLA compile, CPU fallback) is its spans' total; tracing, execution and syncs contain
    nested compiles, fallbacks and transfers, so their spans hold at least the share and at most the
    share and what nests in it."""
    totals = defaultdict(float)
    for event in complete:
        totals[(event["pid"], event["cat"])] += event["dur"] / 1e6
    for split in report.time:
        def spans(*kinds: SpanKind, pid: int = split.pid) -> float:
            return sum(totals[(pid, kind.value)] for kind in kinds)

        tolerance = 0.02 * split.wall + 1e-3
        for kind, share in ((SpanKind.IMPORT, "imports"), (SpanKind.XLA_COMPILE, "xla_compile"),
                            (SpanKind.CPU_FALLBACK, "cpu_fallback")):
            assert spans(kind) == pytest.approx(getattr(split, share), abs=tolerance), share
        assert spans(SpanKind.TRANSFER) <= split.transfers + tolerance
        nested = split.xla_compile + split.cpu_fallback + split.transfers
        for kinds, share in (((SpanKind.TRACE, SpanKind.EXTRACT), "tracing"), ((SpanKind.EXECUTE,), "execution"),
                             ((SpanKind.LAZY,), "lazy")):
            assert getattr(split, share) - tolerance <= spans(*kinds) <= getattr(split, share) + nested + tolerance, share


@pytest.mark.parametrize("second", [(50, 100), (0, 0), (150, 10)])
def test_the_validator_refuses_slices_that_overlap_without_nesting(second: tuple[int, int]) -> None:
    """The check above can fail: two slices of one thread that cross (the first case) are refused,
    nested or following ones are not."""
    names = [{"ph": "M", "name": n, "pid": 1, "tid": 1, "args": {"name": "execute"}}
             for n in ("process_name", "thread_name")]
    slices = [{"name": f"s{n}", "cat": "execute", "ph": "X", "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": {}}
              for n, (ts, dur) in enumerate([(0, 100), second])]
    if second == (50, 100):
        with pytest.raises(AssertionError):
            validate({"traceEvents": names + slices})
    else:
        assert len(validate({"traceEvents": names + slices})) == 2
