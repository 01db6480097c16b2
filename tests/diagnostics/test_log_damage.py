"""Damaged event logs are read as far as they can be: a log cut short at any byte (a process killed
while writing), garbage lines, repeated lines, a changed schema. The reader never raises, returns
the event of every line that is intact, and accounts for every line: read, skipped as an unknown
type, or named in a warning. The report of what it read builds without raising.

The reference is the log before the damage: which lines survive intact is computed from the bytes,
independently of the reader.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from tests.diagnostics.test_events import ONE_OF_EACH
from xlabridge.diagnostics import build_report, read_run
from xlabridge.diagnostics import events as ev

_BODY = [e for e in ONE_OF_EACH if not isinstance(e, ev.ProcessStart)]
_START = ONE_OF_EACH[0]


def _line(event: ev.Event) -> bytes:
    return (json.dumps(ev.to_dict(event)) + "\n").encode()


@st.composite
def logs(draw) -> list[bytes]:
    """A valid log as its lines: a ``process_start``, then any events, each line newline-terminated."""
    body = draw(st.lists(st.sampled_from(_BODY), max_size=25))
    events = [_START, *[dataclasses.replace(e, t=float(n)) for n, e in enumerate(body, start=1)]]
    return [_line(e) for e in events]


_garbage = st.one_of(
    st.binary(max_size=60).map(lambda b: b.replace(b"\n", b"")),
    st.text(max_size=60).map(lambda t: t.replace("\n", "").encode()),
    st.sampled_from([b"{", b"[1, 2]", b'{"type": 3}', b'{"type": "graph_called"}', b'{"type": "from_the_future"}',
                     b'"text"', b"null", b"\x00\x00\x00", b'{"type": "graph_captured", "t": "x", "pid": 1}']),
)

_damage = st.one_of(
    st.tuples(st.just("garbage"), st.integers(0, 30), _garbage),
    st.tuples(st.just("replace"), st.integers(0, 30), _garbage),
    st.tuples(st.just("duplicate"), st.integers(0, 30), st.just(b"")),
    st.tuples(st.just("schema"), st.just(0), st.sampled_from([b"xlabridge.events/2", b"xlabridge.events/0", b"x"])),
)


def _damaged(lines: list[bytes], damages: list[tuple], cut: float | None) -> bytes:
    lines = list(lines)
    for kind, where, payload in damages:
        at = where % (len(lines) + 1)
        if kind == "garbage":
            lines.insert(at, payload + b"\n")
        elif kind == "replace" and lines:
            lines[at % len(lines)] = payload + b"\n"
        elif kind == "duplicate" and lines:
            lines.insert(at % len(lines), lines[at % len(lines)])
        elif kind == "schema" and lines:
            lines[0] = lines[0].replace(b'"xlabridge.events/1"', b'"' + payload + b'"')
    data = b"".join(lines)
    if cut is not None:
        data = data[: int(cut * len(data))]
    return data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=logs(), damages=st.lists(_damage, max_size=6), cut=st.one_of(st.none(), st.floats(0, 1)))
def test_a_damaged_log_is_read_as_far_as_it_goes_and_accounts_for_every_line(tmp_path, lines, damages, cut):
    data = _damaged(lines, damages, cut)
    path = tmp_path / "events.jsonl"
    path.write_bytes(data)
    contents = ev.read_log(path)  # never raises

    intact = set(lines)
    pieces = data.split(b"\n")
    expected = []
    for number, piece in enumerate(pieces, start=1):
        terminated = number < len(pieces)
        if piece + b"\n" in intact and (terminated or piece):
            expected.append(ev.from_dict(json.loads(piece)))
    # every intact line's event, in order (a garbage line may happen to be an event too)
    found = iter(contents.events)
    assert all(any(event == other for other in found) for event in expected), (expected, contents.events)
    # no silent loss: each non-blank line was read, skipped as an unknown type, or warned about
    assert len(contents.events) + contents.skipped + contents.unreadable == contents.lines
    assert contents.lines == sum(1 for piece in pieces if piece.strip())
    assert all(w.startswith(f"{path}:") for w in contents.warnings)
    report = build_report(contents.events)  # and its report builds, every process's in full
    assert not [w for w in report.warnings if "is incomplete" in w]


def test_a_log_cut_short_reads_every_whole_line_and_names_the_cut_one(tmp_path: Path) -> None:
    lines = [_line(e) for e in ONE_OF_EACH]
    data = b"".join(lines)
    cut = len(b"".join(lines[:5])) + len(lines[5]) // 2
    (tmp_path / "events-7.jsonl").write_bytes(data[:cut])
    contents = ev.read_log(tmp_path / "events-7.jsonl")
    assert contents.events == ONE_OF_EACH[:5]
    assert contents.warnings == [f"{tmp_path / 'events-7.jsonl'}:6: cut short (the process died while writing it, "
                                 "or is writing it now); left out"]
    report = read_run(tmp_path)
    assert contents.warnings[0] in report.warnings


def test_two_runs_in_one_directory_the_newest_is_read_and_the_other_named(tmp_path: Path) -> None:
    def log(pid: int, run: str, wall: float) -> None:
        start = dataclasses.replace(_START, pid=pid, run_id=run, wall_time=wall, rank=None, world=None)
        captured = dataclasses.replace(ONE_OF_EACH[3], pid=pid, rank=None, world=None)
        ev.write_log([start, captured], tmp_path / f"events-{pid}.jsonl")

    log(11, "old", 1000.0)
    log(12, "old", 1001.0)
    log(21, "new", 2000.0)
    report = read_run(tmp_path)
    assert [p.pid for p in report.processes] == [21]
    (warning,) = [w for w in report.warnings if "another run's logs" in w]
    assert warning.startswith("events-11.jsonl, events-12.jsonl: another run's logs (run old")
    picked = read_run(tmp_path, run="old")
    assert sorted(p.pid for p in picked.processes) == [11, 12]
    assert any(w.startswith("events-21.jsonl: another run's logs (run new") for w in picked.warnings)


def test_a_process_that_still_runs_is_told_from_one_that_died(tmp_path: Path) -> None:
    import platform

    here = {**_START.environment, "host": platform.node()}
    alive = dataclasses.replace(_START, pid=os.getpid(), environment=here, rank=None, world=None,
                                wall_time=_started(os.getpid()))
    ev.write_log([alive], tmp_path / f"events-{os.getpid()}.jsonl")
    dead_pid = _a_pid_no_process_has()
    dead = dataclasses.replace(_START, pid=dead_pid, environment=here, rank=None, world=None, wall_time=1.0)
    ev.write_log([dead], tmp_path / f"events-{dead_pid}.jsonl")
    endings = {p.pid: p.ending for p in read_run(tmp_path).processes}
    assert endings == {os.getpid(): "running", dead_pid: "vanished"}


def _started(pid: int) -> float:
    """This process's start, wall clock, as the kernel has it (``ps -o lstart`` reads the same)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("btime"))
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK") + 1.0


def _a_pid_no_process_has() -> int:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid
