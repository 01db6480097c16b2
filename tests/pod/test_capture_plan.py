"""What a capture sets for a process, given the user's own settings (no XLA runs here).

``plan_capture`` keeps a user's ``--xla_dump_to`` directory and dump options and names each
change it must make; ``read_dump`` reads only what a run wrote into a directory that held files
already, in the forms the user's options give (timestamped names, gzipped protos). The runs
through the CLI that check the same against XLA itself are in
``tests/diagnostics/test_pod_user_dump.py``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from xlabridge import _env
from xlabridge.pod import DEFAULT, plan_capture, read_capture, read_dump
from xlabridge.pod._dump import snapshot

_VARIABLES = (_env.XLA_FLAGS, _env.POD_SET, _env.PT_XLA_DEBUG_FILE, _env.PT_XLA_DEBUG_LEVEL, _env.PT_XLA_DEBUG_MAX_FRAME,
              _env.XLA_HLO_DEBUG, _env.WORLD_SIZE, _env.RANK)


@pytest.fixture
def environ(monkeypatch):
    """``environ(values)``: exactly these of the variables a capture reads are set."""

    def set_values(values: dict[str, str]) -> None:
        for name in _VARIABLES:
            monkeypatch.delenv(name, raising=False)
        for name, value in values.items():
            monkeypatch.setenv(name, value)

    set_values({})
    return set_values


def test_the_users_directory_and_options_stay(environ, tmp_path):
    dump = tmp_path / "mine"
    user = f"--xla_force_host_platform_device_count=2 --xla_dump_to={dump} --xla_dump_hlo_pass_re=spmd --xla_dump_hlo_as_dot"
    environ({_env.XLA_FLAGS: user})
    plan = plan_capture(tmp_path / "capture")
    assert plan.dump == dump
    assert plan.environment[_env.XLA_FLAGS].split() == [*user.split(), "--xla_dump_hlo_as_text",
                                                        "--xla_dump_hlo_as_proto"]
    # with a format of their own (dot), XLA would write no text: both additions are said
    assert len(plan.notes) == 2 and all(str(dump) in note for note in plan.notes)


def test_text_is_xlas_default_format_so_adding_it_says_nothing(environ, tmp_path):
    environ({_env.XLA_FLAGS: f"--xla_dump_to={tmp_path / 'mine'}"})
    (note,) = plan_capture(tmp_path / "capture").notes
    assert "--xla_dump_hlo_as_proto" in note


def test_options_that_hide_modules_are_lifted_and_said(environ, tmp_path):
    dump = tmp_path / "mine"
    environ({_env.XLA_FLAGS: f"--xla_dump_to={dump} --xla_dump_hlo_as_text=false --xla_dump_hlo_as_proto "
                             "--xla_dump_hlo_module_re=Sync --xla_dump_max_hlo_modules=3 --xla_dump_disable_metadata"})
    plan = plan_capture(tmp_path / "capture")
    assert plan.environment[_env.XLA_FLAGS].split() == [f"--xla_dump_to={dump}", "--xla_dump_hlo_as_proto",
                                                        "--xla_dump_hlo_as_text"]
    said = " ".join(plan.notes)
    for flag in ("--xla_dump_hlo_module_re=Sync", "--xla_dump_max_hlo_modules=3", "--xla_dump_disable_metadata",
                 "--xla_dump_hlo_as_text"):
        assert flag in said
    assert len(plan.notes) == 4


def test_without_a_dump_of_the_users_nothing_is_said(environ, tmp_path):
    environ({_env.XLA_FLAGS: "--xla_force_host_platform_device_count=2 --xla_dump_hlo_module_re=x"})
    plan = plan_capture(tmp_path / "capture")
    ours = (tmp_path / "capture").resolve() / "xla_dump"
    assert plan.dump == ours and plan.notes == ()
    assert plan.environment[_env.XLA_FLAGS].split() == [
        "--xla_force_host_platform_device_count=2", f"--xla_dump_to={ours}", "--xla_dump_hlo_as_text",
        "--xla_dump_hlo_as_proto"]


def test_a_dump_to_stdout_is_redirected_with_a_word(environ, tmp_path):
    environ({_env.XLA_FLAGS: "--xla_dump_hlo_as_text"})
    plan = plan_capture(tmp_path / "capture")
    (note,) = plan.notes
    assert "stdout" in note and str(plan.dump) in note


def test_a_variable_of_the_users_replaced_is_said(environ, tmp_path):
    environ({_env.PT_XLA_DEBUG_FILE: str(tmp_path / "mine.txt"), _env.XLA_HLO_DEBUG: "1"})
    (note,) = plan_capture(tmp_path / "capture").notes
    assert note.startswith(f"{_env.PT_XLA_DEBUG_FILE}={tmp_path / 'mine.txt'} is replaced")


def test_a_child_process_starts_from_the_users_settings(environ, tmp_path):
    user = {_env.XLA_FLAGS: f"--xla_dump_to={tmp_path / 'mine'} --xla_dump_hlo_as_text",
            _env.PT_XLA_DEBUG_LEVEL: "1"}
    environ(user)
    parent = plan_capture(tmp_path / "parent")
    environ(parent.environment)  # what the child inherits
    child = plan_capture(tmp_path / "child")
    environ(user)
    fresh = plan_capture(tmp_path / "child")
    assert child.environment == fresh.environment and child.notes == fresh.notes
    assert str(tmp_path / "parent") not in json.dumps(child.environment)
    # a program that adds a flag of its own for its child keeps it
    environ({**parent.environment, _env.XLA_FLAGS: parent.environment[_env.XLA_FLAGS] + " --xla_cpu_use_thunk_runtime"})
    added = plan_capture(tmp_path / "child")
    assert added.environment[_env.XLA_FLAGS].split() == [*user[_env.XLA_FLAGS].split(), "--xla_cpu_use_thunk_runtime",
                                                         "--xla_dump_hlo_as_proto"]


def test_a_relative_directory_is_the_working_directorys(environ, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    environ({_env.XLA_FLAGS: "--xla_dump_to=mine --xla_dump_hlo_as_proto --xla_dump_hlo_as_text"})
    plan = plan_capture("capture")
    assert plan.dump == tmp_path / "mine" and plan.notes == ()
    assert plan.environment[_env.XLA_FLAGS] == "--xla_dump_to=mine --xla_dump_hlo_as_proto --xla_dump_hlo_as_text"


def test_a_shared_directory_gets_one_per_process(environ, tmp_path):
    dump = tmp_path / "mine"
    environ({_env.XLA_FLAGS: f"--xla_dump_to={dump} --xla_dump_hlo_as_text --xla_dump_hlo_as_proto"})
    plan = plan_capture(tmp_path / "capture", subdirectory="rank-1")
    assert plan.dump == dump / "rank-1"
    assert plan.environment[_env.XLA_FLAGS].split() == ["--xla_dump_hlo_as_text", "--xla_dump_hlo_as_proto",
                                                        f"--xla_dump_to={dump / 'rank-1'}"]
    (note,) = plan.notes
    assert str(dump / "rank-1") in note
    with pytest.raises(ValueError, match="subdirectory"):
        plan_capture(tmp_path / "capture", subdirectory="a/b")
    with pytest.raises(TypeError, match="ways"):
        plan_capture(tmp_path / "capture", ways="default")


_MODULE = """HloModule {name}, entry_computation_layout={{(f32[4]{{0}})->f32[4]{{0}}}}

ENTRY %main (p: f32[4]) -> f32[4] {{
  ROOT %p = f32[4]{{0}} parameter(0)
}}
"""


def test_only_the_files_of_this_run_are_read(environ, tmp_path):
    dump = tmp_path / "mine"
    dump.mkdir()
    earlier = dump / "module_0007.Earlier.1.cpu_after_optimizations.txt"
    earlier.write_text(_MODULE.format(name="Earlier.1"))
    rewritten = dump / "module_0000.Again.1.cpu_after_optimizations.txt"
    rewritten.write_text(_MODULE.format(name="Old.1"))
    environ({_env.XLA_FLAGS: f"--xla_dump_to={dump}"})
    capture_dir = tmp_path / "capture"
    plan_capture(capture_dir, DEFAULT)
    # what XLA writes during the run: a module rewritten, a new one timestamped with a gzipped proto
    rewritten.write_text(_MODULE.format(name="Again.1") + "\n")
    (dump / "17.module_0001.New.2.cpu_after_optimizations.txt").write_text(_MODULE.format(name="New.2"))
    (dump / "17.module_0001.New.2.cpu_after_optimizations.hlo.pb.gz").write_bytes(gzip.compress(b"proto"))
    (dump / "17.module_0001.New.2.before_optimizations.hlo.pb.gz").write_bytes(gzip.compress(b"before"))
    modules = read_capture(capture_dir).modules
    assert [(m.module_id, m.name, m.proto) for m in modules] == [(0, "Again.1", None), (1, "New.2", b"proto")]
    assert modules[1].before_optimizations() == b"before" and modules[0].before_optimizations() is None
    assert earlier.exists()
    assert [m.name for m in read_dump(dump)] == ["Again.1", "New.2", "Earlier.1"]
    assert read_capture(capture_dir, modules=False).modules == ()
    assert snapshot(tmp_path / "absent") == {}


def test_processes_sharing_a_dump_are_found(environ, tmp_path):
    from xlabridge.diagnostics._observe import pod as _pod

    environ({_env.XLA_FLAGS: f"--xla_dump_to={tmp_path / 'mine'}"})
    report = tmp_path / "report"
    for pid in (11, 12, 13):
        plan_capture(report / f"pod-{pid}")
    (report / "pod-12" / "pt_xla_debug.txt").write_text("Compilation Analysis: ...\n")
    (report / "pod-13" / "pt_xla_debug.txt").write_text("")  # started torch_xla, ran nothing
    assert _pod._sharing(report / "pod-11") == (tmp_path / "mine", [12])
    assert _pod._sharing(report / "pod-12")[1] == []
    Path(report / "pod-14").mkdir()
    plan_capture(report / "pod-14", subdirectory="rank-0")
    (report / "pod-14" / "pt_xla_debug.txt").write_text("Compilation Analysis: ...\n")
    assert _pod._sharing(report / "pod-11")[1] == [12]


def test_a_helper_process_gets_the_users_environment_back(environ, tmp_path):
    """``without_capture`` (the probe self-test's child uses it): what the capture set goes back to
    the user's values, what the user had stays, and nothing of the capture's dump or debug file remains.
    Before it, the self-test's child dumped its own ``module_0000`` into the run's dump directory."""
    import os

    from xlabridge.pod._capture import without_capture

    environ({_env.XLA_FLAGS: "--xla_cpu_use_thunk_runtime=false", _env.PT_XLA_DEBUG_MAX_FRAME: "64"})
    plan = plan_capture(tmp_path / "pod-1")
    captured = dict(os.environ) | plan.environment
    assert "--xla_dump_to" in captured[_env.XLA_FLAGS]
    back = without_capture(captured)
    assert back[_env.XLA_FLAGS] == "--xla_cpu_use_thunk_runtime=false"
    assert back[_env.PT_XLA_DEBUG_MAX_FRAME] == "64"
    for name in (_env.POD_SET, _env.PT_XLA_DEBUG_FILE, _env.PT_XLA_DEBUG_LEVEL, _env.XLA_HLO_DEBUG):
        assert name not in back
    assert {k: v for k, v in back.items() if k not in _VARIABLES} == {
        k: v for k, v in os.environ.items() if k not in _VARIABLES}
