"""The processes section of the views: every process, how it ended and when it last showed life,
on one clock for all (seconds from the first process's start), worked out here from the processes'
own start times and last events."""

from __future__ import annotations

import re

from xlabridge.diagnostics import render_text
from xlabridge.diagnostics.report import Process, Report


def _rows(text: str) -> dict[str, str]:
    lines = text.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("Processes:"))
    return {m.group(1): line for line in lines[start:] if (m := re.match(r"\s+(rank \d+ \(pid \d+\))", line))}


def test_each_rank_says_how_it_ended_and_when_it_last_showed_life_on_one_clock() -> None:
    report = Report(processes=[
        Process(pid=21, rank=0, world=2, ending="exited", how="exited with status 0", exit_status=0, started=100.0,
                last_event_seconds=5.0, steps=8),
        Process(pid=22, rank=1, world=2, ending="killed", how="killed by SIGKILL (exit status 137)", exit_status=137,
                signal="SIGKILL", started=101.5, last_event_seconds=2.0, steps=2),
    ])
    rows = _rows(render_text(report))
    assert set(rows) == {"rank 0 (pid 21)", "rank 1 (pid 22)"}
    assert rows["rank 0 (pid 21)"].split()[4:7] == ["exited", "8", "5.00"]  # 100.0 + 5.0 - 100.0
    assert rows["rank 1 (pid 22)"].split()[4:7] == ["killed", "2", "3.50"]  # 101.5 + 2.0 - 100.0
    assert rows["rank 1 (pid 22)"].rstrip().endswith("killed by SIGKILL (exit status 137)")


def test_a_single_process_that_ended_normally_needs_no_section() -> None:
    report = Report(processes=[Process(pid=5, ending="exited", how="exited with status 0", exit_status=0,
                                       started=1.0, last_event_seconds=1.0, steps=1)])
    assert "Processes:" not in render_text(report)


def test_a_single_process_that_was_killed_has_its_section() -> None:
    report = Report(processes=[Process(pid=5, ending="killed", how="killed by SIGTERM (exit status 143)",
                                       exit_status=143, signal="SIGTERM", started=1.0, last_event_seconds=1.0,
                                       steps=1)])
    text = render_text(report)
    assert "Processes:" in text and "killed by SIGTERM (exit status 143)" in text
