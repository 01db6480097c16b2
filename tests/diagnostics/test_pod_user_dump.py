"""``xlabridge report --pod`` keeps the user's own XLA dump: what users ask XLA for is theirs.

A user who runs ``XLA_FLAGS="--xla_dump_to=D ..." xlabridge report --pod -- python train.py``
finds in D what XLA writes there without xlabridge, and the pod report is the one a run without
their flags gives. Each run is the CLI on the bundled sharded example (PJRT CPU, 4 devices, real
torch_xla), or on two ranks of a data-parallel run as separate processes; the references are
independent of xlabridge's capture: the same program run plainly with the same ``XLA_FLAGS``
(the files XLA writes, and the ``*.debug_options`` file in which XLA records the options it
compiled with), and ``--pod`` without any dump option of the user's.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import requires_xla
from xlabridge.diagnostics._observe import pod as _pod
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics.report import Report

pytestmark = [
    requires_xla,
    pytest.mark.skipif(_pod.unsupported() is not None, reason=f"{_pod.unsupported()}"),
]

REPO = Path(__file__).resolve().parents[2]
COMMAND = ("-m", "xlabridge.examples.sharded_train", "--steps", "3")
RANKS = ("-m", "tests.pod._ranks_launcher", "2", "2", "-1")
"""Two identical ranks (``WORLD_SIZE=2``) of two steps: processes that would share the user's directory."""
OWN = "--xla_backend_optimization_level=0 --xla_force_host_platform_device_count=2"
"""User flags that are not about the dump (the first shortens XLA:CPU compiles)."""
# name: the user's XLA_FLAGS ({dump} is their directory)
FLAGS = {
    "reference": OWN,
    "text": f"{OWN} --xla_dump_to={{dump}} --xla_dump_hlo_as_text --xla_dump_hlo_pass_re=spmd",
    # their module filter leaves every module out, the protos are gzipped, the files timestamped
    "filtered": f"{OWN} --xla_dump_to={{dump}} --xla_dump_hlo_as_proto --xla_dump_hlo_module_re=NoSuchModule "
                "--xla_dump_include_timestamp --xla_dump_compress_protos",
    "ranks": "--xla_dump_to={dump} --xla_dump_hlo_as_text",
}
STALE = "module_0042.EarlierRun.1.cpu_after_optimizations.txt"
"""A file of an earlier run in the user's directory: left alone, and not read."""


@dataclasses.dataclass
class Run:
    dump: Path
    report: Report | None = None
    stderr: str = ""
    events: Path | None = None


def _run(base: Path, name: str, *, pod: bool) -> Run:
    directory = base / f"{name}-{'pod' if pod else 'plain'}"
    dump = directory / "dump"
    dump.mkdir(parents=True)
    (dump / STALE).write_text("HloModule EarlierRun.1\n")
    env = dict(os.environ, PJRT_DEVICE="CPU", PYTHONPATH=str(REPO), XLA_FLAGS=FLAGS[name].format(dump=dump))
    argv = [sys.executable, *(RANKS if name == "ranks" else COMMAND)]
    if pod:
        argv = [sys.executable, "-m", "xlabridge.cli", "report", "--pod", "--events", str(directory / "events"),
                "--json", str(directory / "report.json"), "--", *argv]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    report = Report.from_dict(json.loads((directory / "report.json").read_text())) if pod else None
    return Run(dump, report, done.stderr, directory / "events")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[tuple[str, bool], Run]:
    base = tmp_path_factory.mktemp("pod_user_dump")
    jobs = [("ranks", True), ("reference", True), ("text", True), ("text", False), ("filtered", True),
            ("filtered", False), ("ranks", False)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {job: pool.submit(_run, base, job[0], pod=job[1]) for job in jobs}
        return {job: future.result() for job, future in futures.items()}


def _kinds(dump: Path) -> set[str]:
    """The files of a dump, their timestamp prefix (``--xla_dump_include_timestamp``) left out."""
    return {re.sub(r"^\d+\.", "", path.name) for path in dump.iterdir()}


def _debug_options(dump: Path) -> dict[str, str]:
    """The options XLA compiled with, from its own ``*.debug_options`` text proto."""
    (path,) = dump.glob("*.debug_options")
    return dict(line.split(": ", 1) for line in path.read_text().splitlines() if line.strip())


def _graphs(report: Report) -> list[list[str]]:
    """The report's graphs and collectives, less the process ids (another run, other pids)."""

    def rows(items) -> list[str]:
        return sorted(json.dumps({k: v for k, v in dataclasses.asdict(item).items() if k not in ("pid", "process")},
                                 sort_keys=True) for item in items)

    return [rows(report.run_graphs), rows(report.collectives)]


def _pod_notes(report: Report) -> list[str]:
    return [warning for warning in report.warnings if "--pod:" in warning]


def test_the_users_directory_holds_what_xla_writes_there_plus_the_proto_said_once(runs):
    pod, plain = runs["text", True], runs["text", False]
    added = _kinds(pod.dump) - _kinds(plain.dump)
    assert _kinds(plain.dump) <= _kinds(pod.dump)
    assert added and all(name.endswith(".hlo.pb") for name in added), added
    assert any(".spmd-partitioner." in name for name in added), "the passes the user asked for, as protos too"
    assert {re.sub(r"^module_\d+\.|\.hlo\.pb$", "", name) for name in added} <= {
        re.sub(r"^module_\d+\.|\.txt$", "", name) for name in _kinds(plain.dump)}
    # XLA's own record of its options: the user's, with the proto format added, nothing else
    assert _debug_options(pod.dump) == {**_debug_options(plain.dump), "xla_dump_hlo_as_proto": "true",
                                        "xla_dump_to": f'"{pod.dump}"'}
    assert _debug_options(plain.dump)["xla_backend_optimization_level"] == "0"
    # one warning when the run starts, and the same words in the report
    (note,) = _pod_notes(pod.report)
    assert "--xla_dump_hlo_as_proto" in note and str(pod.dump) in note
    assert pod.stderr.count("DiagnosticsWarning") == 1 and "--xla_dump_hlo_as_proto" in pod.stderr
    assert not any("--pod:" in warning for warning in runs["reference", True].report.warnings)


def test_every_flag_of_the_user_reaches_xla(runs):
    pod = runs["text", True]
    given = FLAGS["text"].format(dump=pod.dump).split()
    capture = pod.report.environment["xla_capture"]
    # as the process ended: torch_xla appends defaults of its own when it starts (fast math off)
    flags = capture["xla_flags"].split()
    assert flags[: len(given) + 1] == [*given, "--xla_dump_hlo_as_proto"]
    assert not any(flag.startswith("--xla_dump") for flag in flags[len(given) + 1:]), flags
    assert capture["dump"] == str(pod.dump)


def test_the_pod_report_is_the_one_without_user_flags(runs):
    reference = runs["reference", True].report
    assert reference.collectives, "the example's sharded step communicates"
    assert _graphs(runs["text", True].report) == _graphs(reference)
    # gzipped protos, timestamped names, and a module filter lifted for the capture
    assert _graphs(runs["filtered", True].report) == _graphs(reference)


def test_earlier_files_are_left_alone_and_not_read(runs):
    for name in ("text", "filtered"):
        run = runs[name, True]
        assert (run.dump / STALE).read_text() == "HloModule EarlierRun.1\n"
        assert all(group.module != "EarlierRun.1" for group in run.report.collectives)


def test_a_lifted_module_filter_is_said_and_only_adds_files(runs):
    pod, plain = runs["filtered", True], runs["filtered", False]
    assert _kinds(plain.dump) == {STALE}, "the filter left every module out, and XLA wrote nothing"
    assert any(name.endswith("cpu_after_optimizations.hlo.pb.gz") for name in _kinds(pod.dump))
    notes = _pod_notes(pod.report)
    assert len(notes) == 2, notes
    assert any("--xla_dump_hlo_module_re=NoSuchModule is lifted" in note for note in notes)
    assert any("--xla_dump_hlo_as_text" in note for note in notes)
    options = _debug_options(pod.dump)  # XLA's record: the filter lifted, the other options the user's
    assert "xla_dump_hlo_module_re" not in options
    assert {options[name] for name in ("xla_dump_compress_protos", "xla_dump_include_timestamp",
                                       "xla_dump_hlo_as_proto", "xla_dump_hlo_as_text")} == {"true"}


def test_ranks_sharing_the_users_directory_dump_one_each(runs):
    pod, plain = runs["ranks", True], runs["ranks", False]
    # plainly both ranks write the same file names over each other in the directory
    written = _kinds(plain.dump) - {STALE}
    assert any(name.endswith("after_optimizations.txt") for name in written)
    assert _kinds(pod.dump) == {STALE, "rank-0", "rank-1"}, "the launcher ran no graph: nothing at the top"
    seen = {}
    for log in pod.events.glob("events-*.jsonl"):
        for event in ev.read_log(log).events:
            if isinstance(event, ev.LazyGraphSeen) and event.compiles:
                seen.setdefault(event.rank, set()).add(event.module)
    assert set(seen) == {0, 1}
    for rank, modules in seen.items():
        directory = pod.dump / f"rank-{rank}"
        assert _kinds(directory) - written == {name[: -len(".txt")] + ".hlo.pb" for name in written
                                               if name.endswith("optimizations.txt")}
        assert _kinds(directory) >= written
        dumped = {re.match(r"module_\d+\.(.+)\.cpu_after_optimizations\.txt$", name).group(1)
                  for name in _kinds(directory) if name.endswith("cpu_after_optimizations.txt")}
        assert "" not in modules and modules <= dumped, (rank, modules, dumped)
        assert sum(f"this process dumps to {directory}" in note for note in _pod_notes(pod.report)) == 1
    assert not pod.report.divergences
