"""Event logs: every event type survives a JSON-lines round trip, both written whole and appended
as events come; readers are lenient within a schema (unknown fields ignored, missing ones
defaulted, unknown types skipped), read a log of another schema as far as it goes, and say
which file and line they could not read."""

from __future__ import annotations

import dataclasses
import enum
import json
from pathlib import Path

import pytest

from xlabridge.diagnostics import events as ev

STAMP = {"t": 12.5, "pid": 4242, "rank": 1, "world": 4}
FRAME = ev.Frame("/home/u/train.py", 17, "forward")
NODE = ev.CpuNode("exp2", "aten::exp2", ("aten::exp2",), (FRAME,))

ONE_OF_EACH: list[ev.Event] = [
    ev.ProcessStart(**STAMP, wall_time=1.7e9, environment={"torch": "2.9.0"},
                    framework_paths={"torch": ["/site/torch"]}, main_file="/home/u/train.py"),
    ev.ProbeStatus(**STAMP, probe="xla.bridge", state=ev.ProbeState.UNAVAILABLE, reason="gone",
                   surface="dynamo_bridge.extract_internal", patch=True, sees="segments"),
    ev.DynamoCompile(**STAMP, compile_id="0/1", trigger="dynamo", start=11.0, caller_frames=[FRAME], code=FRAME,
                     step=3),
    ev.GraphCaptured(**STAMP, compile_id="0/0", backend="openxla", op_count=3, ends_in_break=True, frames=[FRAME]),
    ev.GraphBreak(**STAMP, compile_id="0/0", reason="Failed to trace builtin operator\n  Explanation: ...",
                  frames=[FRAME]),
    ev.TorchBreak(**STAMP, compile_id="0/0", text="Graph break in user code at /home/u/train.py:3\nGraph Break "
                  "Reason: Failed to trace builtin operator\n  Explanation: ...\nUser code traceback:\n"),
    ev.TraceRead(**STAMP, file="/tmp/t/dedicated_log_torch_trace_x.log", records=12, skipped=1,
                 failures=["0/0: Unsupported: ..."], eager_batches=2),
    ev.GraphSplit(**STAMP, compile_id="4/0", bucket_bytes=[1050624, 2101248], bucket_cap_bytes=2097152,
                  first_bucket_cap_bytes=1048576),
    ev.Recompile(**STAMP, compile_id="0/1", reason="0/0: tensor 'x' size mismatch", code=FRAME),
    ev.CompilePath(**STAMP, compile_id="0/0", target="xla", path="forward-only", reason="no grad mode", cpu_only=True),
    ev.BridgeGraph(**STAMP, graph=0, compile_id="0/0", role="forward", fx_ops=5, input_devices=["xla"]),
    ev.Partitioned(**STAMP, graph=0, start=12.0, segments=[
        ev.SegmentRecord(ev.SegmentKind.XLA, ("aten::mul", "aten::sin")),
        ev.SegmentRecord(ev.SegmentKind.CPU, ("aten::exp2",), NODE),
    ]),
    ev.XlaGraphSeen(**STAMP, graph=0, segment=0, hash="ab12", origin=ev.GraphOrigin.DYNAMO, hlo_file="x.hlo/1.pb",
                    num_partitions=4, frames=[ev.Frame("train.py", 9, "step")]),
    ev.XlaCompile(**STAMP, graph=0, phase=ev.XlaPhase.EXTRACTION, count=2, seconds=0.75),
    ev.GraphCalled(**STAMP, graph=0, call=2, start=12.4, executions=2, transfers_to_device=1,
                   transfers_from_device=1, bytes_to_device=256, bytes_from_device=256, cpu_fallback_seconds=0.01),
    ev.GraphCalls(**STAMP, graph=0, calls=97, seconds=1.25, cpu_fallback_seconds=0.5,
                  spans=[[12.5, 0.01], [12.6, 0.4, 32, 13.9]], cumulative=True),
    ev.Transfer(**STAMP, to_device=3, from_device=4, bytes_to_device=10, bytes_from_device=20),
    ev.ProcessEnd(**STAMP, start=1.0, environment={"torch_xla": "2.9.0"}, ending=ev.Ending.SIGNAL, signal="SIGTERM",
                  frames=[FRAME]),
    ev.TpuCompiled(**STAMP, hash="ab12", start=1.5, num_partitions=4, hlo_file="e.jsonl.hlo/1-g0-0.hlo.pb",
                   result={"schema": "xlabridge.tpu-compile/1", "kernel_count": 3}, tpu_hlo_file="t.txt",
                   collectives=[{"kind": "all-gather", "count": 2, "bytes": 4096}]),
    ev.TpuPass(**STAMP, start=1.0, topology="v5e:2x2", generation="v5e", libtpu_version="0.0.23",
               jax_version="0.7.1", graphs=1),
    ev.LazyGraphSeen(**STAMP, hash="cd34", cause="user torch_xla.sync", compiles=1, executions=3, frames=[FRAME],
                     frames_truncated=True, inputs=4, outputs=2, module="SyncTensorsGraph.27"),
    ev.LazyRuns(**STAMP, runs=[ev.LazyRun(0, "cd34", "user torch_xla.sync", True), ev.LazyRun(1, "cd34", "user torch_xla.sync")]),
    ev.GraphCollectives(**STAMP, hash="cd34", module="SyncTensorsGraph.27", module_id=3, num_partitions=4,
                        partitioned={"name": "m", "num_partitions": 4, "collectives": [], "parameters": []},
                        sources={"lines": ["/home/u/train.py:17 (aten__mm)"], "stacks": []}),
    ev.FxCode(**STAMP, filename="<eval_with_key>.3", graph=0, lines=[ev.FxLine(5, "mm", (FRAME,))]),
    ev.Imported(**STAMP, module="torch_xla", start=0.5),
    ev.Sync(**STAMP, start=0.8, compiles=1, compile_seconds=0.1, frames=[FRAME]),
    ev.EagerOps(**STAMP, executions=3, execute_seconds=0.3, compiles=1, compile_seconds=0.05,
                spans=[[0.6, 0.1], [0.7, 0.2]], compile_spans=[[0.55, 0.05]]),
    ev.FxProgram(**STAMP, compile_id="0/0", backend="inductor", role="forward", hash="ef56",
                 hlo_file="e.jsonl.hlo/1-fx0-forward.stablehlo.mlir", frames=[FRAME], fx_ops=12, batch=8,
                 breaks=[ev.LoweringBreak("aten::adaptive_max_pool2d", "adaptive_max_pool2d", (FRAME,))]),
    ev.TpuSlice(**STAMP, compile_id="0/0", hash="ef57", generation="v5e", batch=8, mesh={"data": 2}, chips=2,
                topology="v5e:2x2", tried=[{"devices": 1, "fits": False}, {"devices": 2, "fits": True}]),
    ev.BackendCompile(**STAMP, start=0.4, compile_id="0/0", backend="inductor", role="backward"),
    ev.CompiledCalls(**STAMP, compile_id="0/0", backend="inductor", role="forward", calls=3, seconds=0.3,
                     spans=[[0.9, 0.1]], device_spans=[[0.9, 0.2]]),
    ev.SyncCalls(**STAMP, site=2, what="torch_xla.sync", frames=[FRAME], calls=97, seconds=1.5, compiles=1,
                 compile_seconds=0.2, spans=[[1.0, 0.01], [1.1, 0.5, 48, 2.0]]),
    ev.SignalReceived(**STAMP, signal="SIGTERM", handler="/home/u/train.py:3 (on_term)", frames=[FRAME]),
    ev.ProcessExit(**STAMP, returncode=-9, signal="SIGKILL", waited_by=4000),
    ev.Stall(**STAMP, since=10.0, after=2.0, threads=[ev.ThreadStack("MainThread", True, (FRAME,))],
             activities=[ev.Activity(ev.ActivityKind.GRAPH_CALL, "call 57", 3, 9.5, "MainThread")]),
    ev.StallEnd(**STAMP, since=10.0),
    ev.CompileRequest(**STAMP, how="Module.compile", target="Sequential", backend="inductor", code=FRAME,
                      skipped=[FRAME], frames=[FRAME]),
    ev.OptimizerSteps(**STAMP, steps=6, last=12.0, spans=[[10.0, 0.5], [10.5, 1.0, 4, 12.0]]),
    ev.DistSetup(**STAMP, start=0.2, what="init_process_group", backend="gloo"),
    ev.CollectiveWaits(**STAMP, op="all_reduce", calls=3, seconds=0.4, spans=[[1.0, 0.1], [1.2, 0.3, 2, 1.9]]),
    ev.Exiting(**STAMP),
    ev.ExitWork(**STAMP, start=2.0, what="inductor compile workers", workers=2, jobs=1, created=0.3),
    ev.RanksWaited(**STAMP, start=0.1, workers=2, state="SUCCEEDED"),
]


def test_the_sample_covers_every_event_type() -> None:
    assert {type(e).type for e in ONE_OF_EACH} == set(ev.EventType)


def test_every_event_type_round_trips_through_a_log(tmp_path: Path) -> None:
    path = ev.write_log(ONE_OF_EACH, tmp_path / "events.jsonl")
    lines = path.read_text().splitlines()
    assert len(lines) == len(ONE_OF_EACH)
    assert [json.loads(line)["type"] for line in lines] == [e.type.value for e in ONE_OF_EACH]
    contents = ev.read_log(path)
    assert (contents.skipped, contents.warnings, contents.unreadable) == (0, [], 0)
    assert contents.events == ONE_OF_EACH


def _asdict_reference(event: ev.Event) -> dict:
    """What ``dataclasses.asdict`` makes of an event, enums as their values: the JSON a line must hold."""
    def plain(value):
        if isinstance(value, enum.Enum):
            return value.value
        if isinstance(value, dict):
            return {key: plain(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(item) for item in value]
        return value

    return {"type": event.type.value, **plain(dataclasses.asdict(event))}


@pytest.mark.parametrize("event", ONE_OF_EACH, ids=lambda e: e.type.value)
def test_each_line_holds_what_asdict_makes_of_the_event(event: ev.Event) -> None:
    assert json.dumps(ev.to_dict(event)) == json.dumps(_asdict_reference(event))


def test_a_log_appended_event_by_event_is_the_log_written_whole(tmp_path: Path) -> None:
    writer = ev.LogWriter(tmp_path / "streamed.jsonl")
    for event in ONE_OF_EACH:
        writer.write(event)
    writer.close()
    whole = ev.write_log(ONE_OF_EACH, tmp_path / "whole.jsonl")
    assert (tmp_path / "streamed.jsonl").read_bytes() == whole.read_bytes()


def test_the_running_sums_beside_a_log_are_read_with_it_and_go_at_its_end(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    writer = ev.LogWriter(log)
    writer.write(ONE_OF_EACH[0])
    first = ev.GraphCalls(**STAMP, graph=0, calls=5, seconds=0.5, cumulative=True)
    later = dataclasses.replace(first, t=20.0, calls=9)
    writer.rewrite_sums([first])
    writer.rewrite_sums([later])  # replaced, not appended
    assert ev.sums_path(log).is_file()
    assert ev.read_log(log).events == [ONE_OF_EACH[0], later]
    assert ev.read_log(log, sums=False).events == [ONE_OF_EACH[0]]
    writer.close()
    assert not ev.sums_path(log).exists()
    # a fresh log of the same name does not inherit the sums of the one it replaces
    writer = ev.LogWriter(log)
    writer.rewrite_sums([first])
    ev.LogWriter(log).close()
    assert ev.read_log(log).events == []


def test_a_forked_child_does_not_write_into_its_parents_log(tmp_path: Path) -> None:
    import os

    writer = ev.LogWriter(tmp_path / "parent.jsonl")
    pid = os.fork()
    if pid == 0:  # the child: its copy of the writer must write nothing
        writer.write(ONE_OF_EACH[1])
        os._exit(0)
    os.waitpid(pid, 0)
    writer.write(ONE_OF_EACH[0])
    writer.close()
    assert ev.read_log(tmp_path / "parent.jsonl").events == [ONE_OF_EACH[0]]


def test_each_line_is_flat_json_with_the_type_tag_and_the_process(tmp_path: Path) -> None:
    data = json.loads(ev.write_log(ONE_OF_EACH[3:4], tmp_path / "e.jsonl").read_text())
    assert data["type"] == "graph_captured"
    assert (data["pid"], data["rank"], data["world"], data["t"]) == (4242, 1, 4, 12.5)
    assert data["frames"] == [{"filename": "/home/u/train.py", "lineno": 17, "function": "forward"}]


def test_readers_ignore_unknown_fields_default_missing_ones_and_skip_unknown_types(tmp_path: Path) -> None:
    path = tmp_path / "newer.jsonl"
    start = ev.to_dict(ONE_OF_EACH[0])
    captured = ev.to_dict(ONE_OF_EACH[3])
    captured["field_from_the_future"] = {"x": 1}
    del captured["frames"]
    lines = [start, captured, {"type": "collective", "t": 1.0, "pid": 1, "bytes": 1024}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    contents = ev.read_log(path)
    assert contents.skipped == 1
    assert contents.events[1] == dataclasses.replace(ONE_OF_EACH[3], frames=[])


def test_a_log_of_another_schema_is_read_as_far_as_it_goes_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "newer.jsonl"
    start = {**ev.to_dict(ONE_OF_EACH[0]), "schema": "xlabridge.events/2"}
    path.write_text(json.dumps(start) + "\n" + json.dumps(ev.to_dict(ONE_OF_EACH[3])) + "\n")
    contents = ev.read_log(path)
    assert contents.events == [dataclasses.replace(ONE_OF_EACH[0], schema="xlabridge.events/2"), ONE_OF_EACH[3]]
    (warning,) = contents.warnings
    assert warning.startswith(f"{path}:1: written with event schema 'xlabridge.events/2'")
    assert contents.schema == "xlabridge.events/2"


def test_a_corrupt_line_is_left_out_naming_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    good = json.dumps(ev.to_dict(ONE_OF_EACH[3]))
    wrong_type = json.dumps({**ev.to_dict(ONE_OF_EACH[3]), "op_count": "three"})
    path.write_text(f"{good}\n{{not json\n[1, 2]\n{wrong_type}\n\n{good}\n{good[:20]}")
    contents = ev.read_log(path)
    assert contents.events == [ONE_OF_EACH[3], ONE_OF_EACH[3]]
    assert [w.split(": ", 1)[0] for w in contents.warnings] == [f"{path}:{n}" for n in (2, 3, 4, 7)]
    assert "not a JSON line" in contents.warnings[0] and "not an event (a JSON list)" in contents.warnings[1]
    assert "'op_count' must be int" in contents.warnings[2] and "cut short" in contents.warnings[3]
    assert (contents.lines, contents.unreadable) == (6, 4)


def test_iter_lines_still_stops_at_the_first_bad_line_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(ev.to_dict(ONE_OF_EACH[0])) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not a JSON line"):
        list(ev.iter_lines(path))
