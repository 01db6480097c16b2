"""The ``xlabridge`` command.

  xlabridge report [--json FILE] [--html FILE] [--trace FILE] [--events DIR] [--capture-hlo] [--pod]
                   [--tpu TOPOLOGY] [--cache-dir DIR] [--stall-after SECONDS] -- python train.py ARGS...
      run an unmodified script and report its graph breaks, HLO lowering breaks, recompilations
      and where its time went; every Python process of the command writes its events to a log
      as they come, and the report merges them (process ids kept apart): a process that raises,
      is killed (SIGKILL, the OOM killer), terminated (SIGTERM) or calls ``os._exit`` leaves
      everything before its end, and the report says how each process ended. The command's exit
      status is the command's, as a shell gives it (128+N for signal N); SIGTERM (and SIGINT,
      where the terminal did not send it to the command too) is handed on to the command.
      ``--stall-after S``: when no step of a process makes progress for S seconds, it writes where
      it is (its stacks, the graph it traces, compiles or runs, a collective it waits in); the
      report shows the stall as a finding at the user's line.
      ``--tpu v5e:2x2``: after the run, each distinct XLA graph (compiled or lazily traced: it
      implies ``--pod``) is compiled for that TPU topology by libtpu on this machine (the TPU view:
      kernels, HBM, fits; nothing runs on a TPU).
      Programs written for TorchTPU (``backend="tpu"`` or ``"xlabridge"``, torch_tpu installed) are read
      the same way: its graphs, the partitions its split compiler makes and their TPU view; without a
      TPU each partition runs on the CPU in place of the chip, and the report says so.
      ``--pod`` also captures every XLA graph the processes run, lazily traced ones included,
      with the collectives of sharded graphs and the differences between processes
      (automatic when ``WORLD_SIZE`` > 1).

  xlabridge report --read DIR [--tpu TOPOLOGY] [--json FILE] [--html FILE] [--trace FILE]
      rebuild the report from event logs kept with ``--events`` (a newer xlabridge re-reads them),
      also while the run goes on (the report so far); with ``--tpu``, compile the graphs whose HLO
      was kept (``--capture-hlo``) for that TPU.

  xlabridge report --trace-dir DIR [--tpu TOPOLOGY] [--json FILE] [--html FILE] [--trace FILE]
      build the report from torch's structured trace: the ``TORCH_TRACE=DIR`` directory of a run that
      xlabridge did not observe (one log per process, ranks merged); with ``--tpu``, compile the
      StableHLO TorchTPU wrote into it for that TPU.

  xlabridge compare [--steps N] [--warmup N] [--backend B] [--json FILE] FILE.py[:FUNCTION]
      run one step lazily and compiled, side by side: FUNCTION (default ``make_step``) in
      FILE.py returns ``(step, args)`` or ``(step, args, kwargs)`` with XLA tensors.

  xlabridge autocast-audit [--json] [--parity]
      every op of the CUDA, CPU and XLA autocast lists with its policy on each, and the gaps.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from xlabridge import _env


def _bootstrap_dir() -> str:
    return str(Path(__file__).resolve().parent / "diagnostics" / "_observe" / "bootstrap")


def _check_tpu(target: str | None) -> str | None:
    """``--tpu``'s topology name, checked before anything runs."""
    if target is None:
        return None
    from xlabridge.diagnostics._observe import tpu_pass
    from xlabridge.errors import MissingDependencyError, UnknownTopologyError

    try:
        return tpu_pass.check_target(target, argument="--tpu")
    except (TypeError, UnknownTopologyError, MissingDependencyError) as error:
        raise SystemExit(f"xlabridge report: {error}") from None


def _read_run(directory: Path, tpu: str | None, run: str | None = None):
    from xlabridge.diagnostics import read_run

    return read_run(directory, tpu=tpu, run=run,
                    progress=lambda line: print(f"xlabridge: {line}", file=sys.stderr))


def _stall_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"--stall-after must be a number of seconds > 0, got {text!r}")
    return value


def shell_status(returncode: int) -> int:
    """A ``subprocess`` return code as a shell gives it: the exit status, or 128+N for signal N."""
    return 128 - returncode if returncode < 0 else returncode


def _run_command(command: list[str], env: dict[str, str]) -> subprocess.Popen:
    """Run ``command`` to its end, handing SIGTERM and SIGINT on to it; returns the ended process.

    SIGTERM is sent to one process (a scheduler's, ``kill``): it goes on to the command. SIGINT from
    a terminal reaches the whole foreground process group, the command included: it goes on only
    when the command left this process's group, or when it comes a second time (``kill -INT`` of
    this process alone, a user pressing Ctrl-C again).
    """
    child = subprocess.Popen(command, env=env)
    interrupts = [0]

    def hand_on(signum: int, _frame: object) -> None:
        if signum == signal.SIGINT:
            interrupts[0] += 1
            try:
                own_group = os.getpgid(child.pid) == os.getpgrp()
            except OSError:
                own_group = True
            if own_group and interrupts[0] == 1:
                return
        try:
            child.send_signal(signum)
        except OSError:
            pass

    handled = (signal.SIGTERM, signal.SIGINT)
    previous = {signum: signal.signal(signum, hand_on) for signum in handled}
    try:
        child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return child


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _record_exit(directory: Path, child: subprocess.Popen) -> bool:
    """Write the command's exit into its log (``process_exit``), if it is a process that wrote one."""
    from xlabridge.diagnostics import events as ev
    from xlabridge.diagnostics._observe.process import log_path

    log = log_path(directory, child.pid)
    if not log.is_file():
        return False
    returncode = child.returncode
    name = _signal_name(-returncode) if returncode < 0 else ""
    writer = ev.LogWriter(log, fresh=False)
    try:
        writer.write(ev.ProcessExit(t=time.monotonic(), pid=child.pid, returncode=returncode, signal=name,
                                    waited_by=os.getpid()))
    finally:
        writer.close(ended=False)
    return True


def _write_outputs(report, args: argparse.Namespace) -> None:
    from xlabridge.diagnostics.views import render_text, write_html, write_trace

    print(render_text(report))
    if args.json:
        report.to_json(args.json)
        print(f"xlabridge: JSON report written to {args.json}")
    if args.html:
        write_html(report, args.html)
        print(f"xlabridge: HTML report written to {args.html}")
    if args.trace:
        write_trace(report, args.trace)
        print(f"xlabridge: timeline written to {args.trace} as Chrome trace JSON (open it in ui.perfetto.dev)")


def _report(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if args.trace_dir:
        if command or args.read:
            raise SystemExit("xlabridge report: give one of --trace-dir DIR, --read DIR or a command after '--'")
        directory = Path(args.trace_dir)
        if not directory.is_dir():
            raise SystemExit(f"xlabridge report: --trace-dir {str(directory)!r} is not a directory (TORCH_TRACE's)")
        from xlabridge.diagnostics import read_trace

        tpu = _check_tpu(args.tpu)
        _write_outputs(read_trace(directory, tpu=tpu, progress=lambda line: print(f"xlabridge: {line}", file=sys.stderr)),
                       args)
        return 0
    if args.read:
        if command:
            raise SystemExit("xlabridge report: give either --read DIR or a command after '--', not both")
        directory = Path(args.read)
        if not directory.is_dir():
            raise SystemExit(f"xlabridge report: --read {str(directory)!r} is not a directory of event logs")
        _write_outputs(_read_run(directory, _check_tpu(args.tpu)), args)
        return 0
    if not command:
        raise SystemExit("xlabridge report: give the command to run after '--', e.g. -- python train.py")
    if args.capture_hlo and not args.events:
        raise SystemExit("xlabridge report: --capture-hlo needs --events DIR (the HLO files are kept beside the logs)")
    tpu = _check_tpu(args.tpu)
    with tempfile.TemporaryDirectory(prefix="xlabridge-report-") as scratch:
        directory = Path(args.events) if args.events else Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        run_id = uuid.uuid4().hex[:16]
        env[_env.REPORT_DIR] = str(directory.resolve())
        env[_env.RUN_ID] = run_id
        if args.stall_after is not None:
            env[_env.STALL_AFTER] = repr(args.stall_after)
        if args.capture_hlo or tpu is not None:
            env[_env.CAPTURE_HLO] = "1"
        if args.pod or tpu is not None:
            # The TPU view compiles every XLA graph of the run: the lazily traced ones come from the capture.
            env[_env.POD] = "1"
        if args.cache_dir:
            from xlabridge.backend import cache

            try:
                env[_env.CACHE_DIR] = str(cache.validate_cache_dir(args.cache_dir))
            except (TypeError, ValueError) as error:
                raise SystemExit(f"xlabridge report: {error}") from None
        env[_env.PYTHONPATH] = os.pathsep.join(p for p in (_bootstrap_dir(), env.get(_env.PYTHONPATH)) if p)
        try:
            child = _run_command(command, env)
        except FileNotFoundError:
            raise SystemExit(f"xlabridge report: command not found: {command[0]!r}") from None
        status = shell_status(child.returncode)
        recorded = _record_exit(directory, child)
        report = _read_run(directory, tpu, run=run_id)
        if not recorded:
            report.warnings.append(f"the command (pid {child.pid}) is not a Python process xlabridge observed; "
                                   f"it exited with status {status}")
    if env.get(_env.TORCH_TRACE):
        from xlabridge.diagnostics import _trace_artifacts

        # the merged report's rows beside each process's own records in torch's trace (tlparse shows them)
        _trace_artifacts.append(env[_env.TORCH_TRACE], report)
    _write_outputs(report, args)
    if args.events:
        print(f"xlabridge: event logs kept in {args.events} (xlabridge report --read {args.events})")
    if status:
        how = f" (ended by {_signal_name(-child.returncode)})" if child.returncode < 0 else ""
        print(f"xlabridge: the command exited with status {status}{how}", file=sys.stderr)
    return status


def _load_step(target: str) -> tuple:
    import importlib.util

    path, _, function = target.partition(":")
    function = function or "make_step"
    if not Path(path).is_file():
        raise SystemExit(f"xlabridge compare: FILE {path!r} is not a file (expected FILE.py[:FUNCTION])")
    from xlabridge.diagnostics import _frames

    _frames.set_program(path)  # the target is the program being reported on, not this command
    spec = importlib.util.spec_from_file_location("_xlabridge_compare_target", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    make = getattr(module, function, None)
    if not callable(make):
        raise SystemExit(f"xlabridge compare: {path} defines no function {function!r}")
    made = make()
    if not (isinstance(made, tuple) and len(made) in (2, 3) and callable(made[0])):
        raise SystemExit(
            f"xlabridge compare: {function}() must return (step, args) or (step, args, kwargs), got {made!r:.80}"
        )
    step, args, kwargs = (*made, {}) if len(made) == 2 else made
    return step, tuple(args), dict(kwargs)


def _compare(args: argparse.Namespace) -> int:
    from xlabridge.diagnostics._compare import compare

    step, step_args, step_kwargs = _load_step(args.target)
    result = compare(
        step, *step_args, steps=args.steps, warmup=args.warmup, backend=args.backend, **step_kwargs
    )
    print(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
        print(f"xlabridge: JSON comparison written to {args.json}")
    return 0


def _autocast_audit(args: argparse.Namespace) -> int:
    from xlabridge.autocast._cli import audit_command

    return audit_command(as_json=args.json, parity=args.parity)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xlabridge", description="See why torch.compile on XLA is slow.")
    commands = parser.add_subparsers(dest="subcommand", required=True)
    report = commands.add_parser("report", help="report on an unmodified script: xlabridge report -- python train.py")
    report.add_argument("--json", metavar="FILE", help="also write the report as JSON (schema xlabridge.report/4)")
    report.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page with pictures")
    report.add_argument(
        "--trace", metavar="FILE", help="also write the run's timeline as Chrome trace-event JSON (Perfetto opens it)"
    )
    report.add_argument("--events", metavar="DIR", help="keep each process's event log (events-<pid>.jsonl) in DIR")
    report.add_argument("--capture-hlo", action="store_true", help="save each XLA graph's HLO proto beside the logs")
    report.add_argument(
        "--pod", action="store_true",
        help="capture every XLA graph (lazy ones too), their collectives and per-process differences",
    )
    report.add_argument("--read", metavar="DIR", help="rebuild the report from the event logs in DIR, run nothing")
    report.add_argument(
        "--trace-dir", metavar="DIR",
        help="build the report from torch's structured trace in DIR (a run with TORCH_TRACE=DIR), run nothing",
    )
    report.add_argument(
        "--tpu", metavar="TOPOLOGY",
        help="after the run, compile each XLA graph for this TPU (e.g. v5e:2x2) with libtpu on this machine: "
        "kernels, HBM per device, fits, compile seconds (compiled, not run on a TPU); implies --pod",
    )
    report.add_argument(
        "--cache-dir", metavar="DIR", help="persistent XLA compilation cache for the command (sets XLABRIDGE_CACHE_DIR)"
    )
    report.add_argument(
        "--stall-after", metavar="SECONDS", type=_stall_seconds,
        help="when no step of a process makes progress for SECONDS, write where it is (stacks, the graph it "
        "traces, compiles or runs, a collective it waits in); the report shows it at the user's line",
    )
    report.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after '--'")
    report.set_defaults(run=_report)

    comparison = commands.add_parser("compare", help="one step lazily vs compiled: xlabridge compare step.py")
    comparison.add_argument("target", metavar="FILE.py[:FUNCTION]", help="FUNCTION (default make_step) returns (step, args)")
    comparison.add_argument("--steps", type=int, default=10, help="steady steps per mode")
    comparison.add_argument("--warmup", type=int, default=2, help="warmup steps per mode (compilations land here)")
    comparison.add_argument("--backend", default="openxla", help="torch.compile backend of the compiled mode")
    comparison.add_argument("--json", metavar="FILE", help="also write the comparison as JSON")
    comparison.set_defaults(run=_compare)

    audit = commands.add_parser("autocast-audit", help="XLA's autocast lists against CUDA's and CPU's")
    audit.add_argument("--json", action="store_true", help="machine-readable output")
    audit.add_argument("--parity", action="store_true", help="audit after xlabridge.autocast.enable_parity()")
    audit.set_defaults(run=_autocast_audit)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``xlabridge`` console script."""
    args = _parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
