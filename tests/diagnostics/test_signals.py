"""How an observed process hands signals on (``_observe/ending``), checked in processes of their own
against what the same program does unobserved: a handler the process had before observation began
still runs, an ignored signal stays ignored, and a child made by ``fork`` (a DataLoader's worker)
that gets SIGTERM dies of it alone, never taking its observed parent with it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from xlabridge.diagnostics import events as ev

REPO = Path(__file__).resolve().parents[2]

PROGRAM = textwrap.dedent(
    """
    import os, signal, sys, time

    def before(signum, frame):  # the process's own, installed before observation begins
        print("handled", signal.Signals(signum).name, flush=True)

    mode = sys.argv[2]
    if mode == "handler":
        signal.signal(signal.SIGTERM, before)
    elif mode == "ignored":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if sys.argv[1] != "-":
        from xlabridge.diagnostics._observe import process
        process.observe_until_exit(sys.argv[1])
    if mode == "fork":
        child = os.fork()
        if child == 0:
            time.sleep(30)
            os._exit(0)
        time.sleep(0.5)
        os.kill(child, signal.SIGTERM)
        print("child", os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]), flush=True)
    else:
        os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(1.5)  # the heartbeat would have acted on a signal by now
    print("alive", flush=True)
    """
)


def _run(tmp_path: Path, mode: str, observed: bool) -> subprocess.CompletedProcess:
    (tmp_path / "program.py").write_text(PROGRAM)
    directory = tmp_path / ("events" if observed else "plain")
    directory.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, str(tmp_path / "program.py"), str(directory) if observed else "-", mode],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))


@pytest.fixture(scope="module")
def observed_handler(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The observed run of the program with its own SIGTERM handler, read by two tests: what it printed
    and how it ended (against the unobserved run), and its event log."""
    tmp = tmp_path_factory.mktemp("handler")
    return tmp, _run(tmp, "handler", observed=True)


@pytest.mark.parametrize("mode", ["handler", "ignored", "fork"])
def test_the_process_does_what_it_does_unobserved(tmp_path, mode, request):
    if mode == "handler":
        tmp_path, observed = request.getfixturevalue("observed_handler")
    else:
        observed = _run(tmp_path, mode, observed=True)
    plain = _run(tmp_path, mode, observed=False)
    assert (observed.returncode, observed.stdout) == (plain.returncode, plain.stdout)
    assert plain.returncode == 0 and "alive" in plain.stdout


def test_a_handler_from_before_observation_is_noted_with_the_signal(observed_handler):
    tmp_path, _ = observed_handler
    (log,) = (tmp_path / "events").glob("events-*.jsonl")
    events = ev.read_log(log).events
    (received,) = [e for e in events if isinstance(e, ev.SignalReceived)]
    assert received.signal == "SIGTERM" and received.handler.endswith("program.py:4 (before)")
    # the observer's own work at exit is timed after the process's end
    last = [e for e in events if not (isinstance(e, ev.ExitWork) and e.what == ev.ExitWork.OBSERVER)][-1]
    assert isinstance(last, ev.ProcessEnd) and last.ending == ev.Ending.EXIT


INTERRUPTED = textwrap.dedent(
    """
    import atexit, sys
    from xlabridge.diagnostics._observe import ending

    def exit_work():
        exec("defined_at_exit = 1")  # what defining a dataclass at exit does
        if sys.argv[1] == "kept":
            ending.keep_interrupted_exit()

    atexit.register(exit_work)
    raise KeyboardInterrupt
    """
)


@pytest.mark.parametrize("mode", ["kept", "plain"])
def test_an_interrupted_program_dies_of_sigint_after_exit_work_that_execs(tmp_path: Path, mode: str):
    """CPython's own exit status decides: a program ended by an uncaught KeyboardInterrupt dies of
    SIGINT; exit work that execs source text makes CPython 3.8-3.13 forget it (exit status 1), and
    ``keep_interrupted_exit`` after that work keeps the death by SIGINT."""
    script = tmp_path / "interrupted.py"
    script.write_text(INTERRUPTED)
    done = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    if mode == "kept":
        assert done.returncode == -2, done.stderr[-2000:]
    else:  # the CPython behaviour the workaround is for, until its fix
        assert done.returncode == (1 if sys.version_info < (3, 14) else -2), done.stderr[-2000:]
