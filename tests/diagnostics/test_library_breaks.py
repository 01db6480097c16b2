"""Graph breaks inside torch's own code, and DDPOptimizer's splits, on a DDP job as ``torchrun`` launches it.

The job (``_ddp_job.py``: ``torch.compile(DDP(model))``, gloo on the CPU, two ranks) runs once under
``xlabridge report`` with torch's own logs on (``TORCH_LOGS=graph_breaks,ddp_graphs`` and DDPOptimizer's
module logger), each line of which torch prefixes with its rank. The report is checked against those
logs, read here with this file's own expressions: every break torch logs on a rank is a break of that
rank's process with its type and code; torch's stack gives the library frame (its innermost frame
outside Python's standard library, inside torch) and the user's line that reached it (the script's
call, found in the script's text); DDPOptimizer's "created N buckets" at "bucket cap B" and the
submodules its split graph holds give the split. Categories are held against the registry of
graph-break codes torch ships (``graph_break_registry.json``, read here directly).

The inductor job is shared (``tests/_torchrun_jobs.py``, once per session) with the time split's DDP
job of test_time_shares.py: ``xlabridge/examples/torchrun_train.py``, wide enough that DDP's buckets
cut it in two, under the same torch logs.
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch

from tests._torchrun_jobs import Job
from tests.diagnostics import _torch_logs
from xlabridge.diagnostics._build import causes
from xlabridge.diagnostics.report import Report

REPO = Path(__file__).resolve().parents[2]
JOB = Path(__file__).with_name("_ddp_job.py")
BUCKET_CAP_MB = 1
REGISTRY = Path(torch._dynamo.__path__[0]) / "graph_break_registry.json"
_RANK = re.compile(r"^\[rank(\d+)\]:")
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_BUCKETS = re.compile(r"\[(?P<cid>\d+/\d+)\] DDPOptimizer used bucket cap (?P<cap>\d+) and created (?P<n>\d+) buckets")
needs_gloo = pytest.mark.skipif(
    not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
    reason="this torch has no torch.distributed with gloo: the DDP job cannot run on the CPU")
_SUBMOD = re.compile(r"\[(?P<cid>\d+/\d+)\] \[__ddp_graphs\] ---(?P<name>submod_\d+) graph---")


def _registry() -> dict[str, list[dict]]:
    if not REGISTRY.exists():
        pytest.skip(f"torch {torch.__version__} ships no graph-break registry (torch 2.8 and later do)")
    return json.loads(REGISTRY.read_text(encoding="utf-8"))


# ---------------------------------------------------------------- categories from torch's codes


def test_each_code_of_the_table_means_in_torch_s_registry_what_the_table_says():
    registry = _registry()
    for row in causes.GRAPH_BREAK_CAUSES:
        for code, gb_type in row.codes.items():
            if code in registry:  # a code newer than this torch never comes from it
                types = {e["Gb_type"] for e in registry[code]}
                # torch 2.8's registry names GB0170's type by the variable that held it (``_gb_type``)
                assert gb_type in types or types == {"_gb_type"}, (row.category, code)
    # the codes of the breaks DDP's forward makes, and the common ones, are in every registry
    assert {"GB0007", "GB0156", "GB0124", "GB0170", "GB0059"} <= set(registry)


def test_every_code_torch_knows_gets_a_category_from_its_code_and_a_fix():
    registry = _registry()
    categories = {row.category for row in causes.GRAPH_BREAK_CAUSES} | {causes.GRAPH_BREAK_OTHER.category}
    for code, entries in registry.items():
        for entry in entries:
            words = " ".join([entry["Gb_type"], entry.get("Explanation", ""), *entry.get("Hints", [])]).lower()
            cause = causes.classify_graph_break(code, entry.get("Explanation", ""))
            assert cause.category in categories and cause.suggestion.strip(), code
            # the code decides, not the message's words: a break whose text mentions logging (DDP's C++
            # Logger, GB0156) is not a print unless its code is about printing or logging
            assert cause.category == causes.classify_graph_break(code, "logger logging print").category or \
                code == "GB0059", code
            if cause.category == "print-or-logging":
                assert "print" in words or "logging" in words, code
    assert causes.classify_graph_break("GB0156", "method `set_runtime_stats_and_log` of class `Logger`").category \
        == "unsupported-call"
    assert causes.classify_graph_break("GB0059", "builtin operator `print` with argument types").category \
        == "print-or-logging"


# ---------------------------------------------------------------- a DDP job under torchrun


def _torchrun(directory: Path, backend: str, *extra: str, **environment: str
              ) -> tuple[Report, dict[int, str], dict[int, int]]:
    """The report of the job, each rank's lines of torch's logs, and each rank's process id."""
    directory.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(REPO), PJRT_DEVICE="CPU", OMP_NUM_THREADS="1",
               TORCH_LOGS="graph_breaks,ddp_graphs,torch._dynamo.backends.distributed", **environment)
    argv = [sys.executable, "-m", "xlabridge.cli", "report", "--json", str(directory / "report.json"), "--",
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(JOB),
            "--backend", backend, "--bucket-cap-mb", str(BUCKET_CAP_MB), *extra]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    (directory / "stderr.txt").write_text(done.stderr)
    assert done.returncode == 0, done.stderr[-4000:]
    return _read(json.loads((directory / "report.json").read_text()), done.stderr)


def _read(report_json: dict, stderr: str) -> tuple[Report, dict[int, str], dict[int, int]]:
    """The report, each rank's lines of torch's logs (its ``[rankN]:`` lines of ``stderr``), and each rank's
    process id."""
    report = Report.from_dict(report_json)
    lines: dict[int, list[str]] = collections.defaultdict(list)
    for line in stderr.splitlines():
        if match := _RANK.match(line):
            lines[int(match[1])].append(line[match.end():])
    # a rank's helper processes (inductor's compile workers) inherit its rank: the rank is the one of them
    # that started first
    pids: dict[int, int] = {}
    for process in sorted(report.processes, key=lambda p: p.started or 0.0, reverse=True):
        if process.rank is not None:
            pids[process.rank] = process.pid
    assert sorted(pids) == [0, 1], report.processes
    return report, {rank: "\n".join(text) for rank, text in lines.items()}, pids


def _stacks(log: str) -> list[list[tuple[str, int, str]]]:
    """The user stack torch logs with each graph break of one rank's log, in order. torch logs the stack of
    a break at a place it logged a break before once ("user stack suppressed due to duplicate graph
    break"): such a break has the stack of the earlier one at its place."""
    stacks: list[list[tuple[str, int, str]]] = []
    places: list[str] = []
    for line in log.splitlines():
        match = _torch_logs._PREFIX.search(line)
        if not match:
            continue
        body = line[match.end():]
        if body.startswith("Graph break") and " in user code at " in body:
            stacks.append([])
            places.append(body.split(" in user code at ", 1)[1])
        elif stacks and (frame := _FRAME.search(body)):
            stacks[-1].append((frame["file"], int(frame["line"]), frame["func"]))
    for index, stack in enumerate(stacks):
        if not stack:
            stack += next(s for p, s in zip(places[:index], stacks) if p == places[index] and s)
    return stacks


def _library_frame(stack: list[tuple[str, int, str]]) -> tuple[str, int, str]:
    """The innermost frame of torch's stack outside Python's standard library (``contextlib`` wraps DDP's
    context manager) and Dynamo's polyfills (its stand-ins for builtins, which newer torch shows among
    them), which must be torch's own for a break inside DDP."""
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    polyfills = os.path.realpath(os.path.join(os.path.dirname(torch._dynamo.__file__), "polyfills"))
    outside = [f for f in stack if not (os.path.realpath(f[0]).startswith(stdlib + os.sep)
                                        and "site-packages" not in f[0])
               and not os.path.realpath(f[0]).startswith(polyfills + os.sep)]
    return outside[-1]


def _call_line() -> int:
    return next(n for n, line in enumerate(JOB.read_text().splitlines(), start=1) if "# CALL" in line)


@pytest.fixture(scope="module")
def aot_eager(tmp_path_factory):
    return _torchrun(tmp_path_factory.mktemp("ddp_aot_eager"), "aot_eager")


@needs_gloo
def test_every_break_torch_logs_on_a_rank_is_in_the_report_with_its_code(aot_eager):
    report, logs, pids = aot_eager
    for rank, pid in pids.items():
        logged = _torch_logs.from_stderr(logs[rank])
        assert logged, f"torch logged no graph break on rank {rank}"
        ours = [b for b in report.dynamo_breaks if b.pid == pid]
        assert collections.Counter((b.compile_id, b.reason, b.code) for b in ours) == collections.Counter(
            (t.compile_id, t.gb_type, _torch_logs.expected_code(t)) for t in logged)


@needs_gloo
def test_breaks_inside_ddp_carry_torch_s_frame_the_user_s_line_and_advice_that_is_not_about_prints(aot_eager):
    report, logs, pids = aot_eager
    torch_dir = os.path.realpath(os.path.dirname(torch.__file__))
    by_code = {code: row for row in causes.GRAPH_BREAK_CAUSES for code in row.codes}
    for rank, pid in pids.items():
        logged = _torch_logs.from_stderr(logs[rank])
        stacks = _stacks(logs[rank])
        assert len(stacks) == len(logged)
        ours = {(b.compile_id, b.code): b for b in report.dynamo_breaks if b.pid == pid}
        for break_, stack in zip(logged, stacks):
            row = ours[(break_.compile_id, _torch_logs.expected_code(break_))]
            library = _library_frame(stack)
            assert os.path.realpath(library[0]).startswith(torch_dir + os.sep), library
            assert library[0].endswith(os.path.join("nn", "parallel", "distributed.py")), library
            assert (row.library, row.library_filename, row.library_lineno, row.library_function) == (
                "torch", *library)
            assert (row.filename, row.lineno) == (str(JOB), _call_line())  # the user's line that reached it
            expected_row = by_code.get(row.code)
            assert row.category == (expected_row.category if expected_row else "other") != "print-or-logging"
            assert row.expected and "print" not in row.suggestion.lower() and "logging" not in row.suggestion
            assert "distributed.py" in row.suggestion and row.explanation and row.code.startswith("GB")


@needs_gloo
def test_the_backend_is_named_as_the_user_named_it_through_ddp_optimizer(aot_eager):
    report, _, pids = aot_eager
    graphs = [g for g in report.dynamo_graphs if g.pid in pids.values()]
    assert graphs and {g.backend for g in graphs} == {"aot_eager"}


def _splits(log: str) -> dict[str, tuple[int, int, int]]:
    """Per compile id, torch's own record of DDPOptimizer's split: (bucket cap, buckets, submodules)."""
    submodules: dict[str, set[str]] = collections.defaultdict(set)
    for match in _SUBMOD.finditer(log):
        submodules[match["cid"]].add(match["name"])
    return {m["cid"]: (int(m["cap"]), int(m["n"]), len(submodules[m["cid"]])) for m in _BUCKETS.finditer(log)}


@needs_gloo
def test_ddp_optimizer_s_splits_are_reported_with_the_bucket_size_that_made_them(aot_eager):
    report, logs, pids = aot_eager
    for rank, pid in pids.items():
        torch_says = _splits(logs[rank])
        assert torch_says and all(n > 1 for _, n, _ in torch_says.values()), torch_says
        ours = {g.compile_id: g for g in report.dynamo_graphs if g.pid == pid and g.ddp_buckets}
        assert {cid: (g.ddp_bucket_cap_bytes, len(g.ddp_buckets), len(g.ddp_buckets)) for cid, g in ours.items()} \
            == torch_says
        assert all(g.ddp_bucket_cap_bytes == BUCKET_CAP_MB * 2**20 for g in ours.values())  # the user's bucket_cap_mb
        findings = [f for f in report.findings if f.kind == "ddp-split" and f.pid == pid]
        assert sorted(f.count for f in findings) == sorted(n for _, n, _ in torch_says.values())
        assert all(f"{BUCKET_CAP_MB} MiB" in f.message for f in findings)


@needs_gloo
@pytest.mark.slow  # an inductor compile on two ranks: the pinned suite runs it
def test_inductor_is_named_inductor_through_ddp_optimizer(ddp_inductor_job: Job):
    report, logs, pids = _read(ddp_inductor_job.report, ddp_inductor_job.done.stderr)
    graphs = [g for g in report.dynamo_graphs if g.pid in pids.values()]
    assert graphs and {g.backend for g in graphs} == {"inductor"}
    for rank, pid in pids.items():
        torch_says = _splits(logs[rank])
        assert torch_says and all(n > 1 for _, n, _ in torch_says.values()), torch_says
        assert {g.compile_id: len(g.ddp_buckets) for g in graphs if g.pid == pid and g.ddp_buckets} == {
            cid: n for cid, (_, n, _) in torch_says.items()}


# ---------------------------------------------------------------- which frame is a library's


def test_the_library_frame_is_the_innermost_outside_the_standard_library_and_dynamo_s_polyfills():
    from xlabridge.diagnostics._frames import UserCodeRule
    from xlabridge.diagnostics.events import Frame

    site = "/venv/lib/python3.11/site-packages"
    rule = UserCodeRule.of({"torch": [f"{site}/torch"], "python-stdlib": ["/py/lib/python3.11"]}, "/home/u/train.py")
    user = Frame("/home/u/train.py", 9, "<module>")
    ddp = Frame(f"{site}/torch/nn/parallel/distributed.py", 1486, "_run_ddp_forward")
    stdlib = Frame("/py/lib/python3.11/contextlib.py", 105, "__init__")
    polyfill = Frame(f"{site}/torch/_dynamo/polyfills/__init__.py", 476, "instantiate_user_defined_class_object")
    assert rule.library([user, ddp, stdlib, polyfill, stdlib]) == ("torch", ddp)
    assert rule.library([user, ddp, Frame("/home/u/model.py", 3, "forward")]) is None  # the user's own code
    hf = Frame(f"{site}/transformers/models/gpt2/modeling_gpt2.py", 40, "forward")
    assert rule.library([user, hf]) == ("transformers", hf)
    assert rule.innermost([user, hf]) == hf  # installed model libraries stay where the user's fix goes
    assert causes.classify_library("torch", ddp.filename).expected
    assert causes.classify_library("transformers", hf.filename).name == "a library"
