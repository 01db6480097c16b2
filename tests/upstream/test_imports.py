"""Import order: install() before torch_xla is imported, and the post-import hook itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import requires_xla
from xlabridge._upstream import imports as _hook

REPO = Path(__file__).resolve().parents[2]


def test_callback_runs_once_after_the_module_executes(tmp_path, monkeypatch) -> None:
    (tmp_path / "xb_hook_probe_mod.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    def callback(module) -> None:
        seen.append(sys.modules["xb_hook_probe_mod"].VALUE)

    try:
        assert _hook.when_imported("xb_hook_probe_mod", callback)
        assert _hook.pending("xb_hook_probe_mod")
        import xb_hook_probe_mod  # noqa: F401

        assert seen == [42]
        assert not _hook.pending("xb_hook_probe_mod")
        assert sys.modules["xb_hook_probe_mod"].__loader__.__class__.__name__ != "_CallbackLoader"
    finally:
        _hook.remove("xb_hook_probe_mod")
        sys.modules.pop("xb_hook_probe_mod", None)


def test_already_imported_module_is_not_hooked() -> None:
    assert not _hook.when_imported("json", lambda module: None)
    assert not _hook.pending("json")


def test_failing_callback_warns_and_does_not_break_the_import(tmp_path, monkeypatch) -> None:
    import pytest

    (tmp_path / "xb_hook_fail_mod.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def callback(module) -> None:
        raise OSError("boom")

    try:
        _hook.when_imported("xb_hook_fail_mod", callback)
        with pytest.warns(RuntimeWarning, match="post-import step for xb_hook_fail_mod failed: OSError: boom"):
            import xb_hook_fail_mod  # noqa: F401
        assert sys.modules["xb_hook_fail_mod"].VALUE == 1
    finally:
        _hook.remove("xb_hook_fail_mod")
        sys.modules.pop("xb_hook_fail_mod", None)


SCRIPT = textwrap.dedent(
    """
    import json, sys, time, warnings
    warnings.simplefilter("always")
    t0 = time.perf_counter()
    import xlabridge.autocast as autocast
    from xlabridge._upstream import imports as _hook
    from xlabridge.autocast import _probe, _registration
    from xlabridge.autocast._ops import DEFAULT_SPECS
    autocast.install()
    state = {"install_s": time.perf_counter() - t0,
             "torch_xla_imported": "torch_xla" in sys.modules,
             "pending": _hook.pending("torch_xla"),
             "einsum_before": _probe.has_kernel("aten::einsum", "AutocastXLA"),
             "plan_before": [s.name for s in _registration.plan(DEFAULT_SPECS, _registration._dispatcher_has_kernel)]}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import torch_xla
    import torch
    state.update({"pending_after": _hook.pending("torch_xla"),
                  "einsum_after": _probe.has_kernel("aten::einsum", "AutocastXLA"),
                  "ours": autocast.registered_by_xlabridge(),
                  "overriding_warnings": [str(w.message) for w in caught if "Overrid" in str(w.message)],
                  "einsum_kernel": torch._C._dispatch_dump("aten::einsum").split("AutocastXLA: ")[1].split(" ::")[0]})
    print(json.dumps(state))
    """
)


@requires_xla
def test_install_before_torch_xla_waits_for_it_and_leaves_its_einsum_alone() -> None:
    env = {**os.environ, "PJRT_DEVICE": "CPU", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    state = json.loads(done.stdout.strip().splitlines()[-1])
    assert state["torch_xla_imported"] is False
    assert state["pending"] is True
    # Before torch_xla's library loads the real dispatcher lacks einsum: the plan picks it,
    # and install() still registers nothing, waiting for torch_xla's own kernels.
    assert state["einsum_before"] is False
    assert state["plan_before"] == ["aten::einsum"]
    assert state["pending_after"] is False
    assert state["einsum_after"] is True
    assert state["ours"] == {}
    assert state["overriding_warnings"] == []
    assert "torch_xla/csrc/autocast_mode.cpp" in state["einsum_kernel"]


ORDER_SCRIPT = textwrap.dedent(
    """
    import json, sys
    first = sys.argv[1]
    if first == "xlabridge":
        import xlabridge
        from xlabridge._upstream import imports as hook
        waiting = hook.pending("torch_xla")
        import torch_xla
    else:
        import torch_xla
        import xlabridge
        from xlabridge._upstream import imports as hook
        waiting = None
    from xlabridge.autocast import _probe
    print(json.dumps({"waiting": waiting, "pending_after": hook.pending("torch_xla"),
                      "einsum": _probe.has_kernel("aten::einsum", "AutocastXLA"),
                      "autocast_loaded": "xlabridge.autocast._registration" in sys.modules}))
    """
)


@requires_xla
def test_einsum_joins_xla_autocast_whether_torch_xla_comes_before_or_after_xlabridge() -> None:
    """``import xlabridge`` imports no torch; einsum still gets its AutocastXLA kernel (torch_xla's
    own where it has one), whichever of the two is imported first."""
    env = {**os.environ, "PJRT_DEVICE": "CPU", "PYTHONPATH": str(REPO)}
    for first in ("xlabridge", "torch_xla"):
        done = subprocess.run([sys.executable, "-c", ORDER_SCRIPT, first], capture_output=True, text=True, env=env,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        state = json.loads(done.stdout.strip().splitlines()[-1])
        assert state["einsum"] is True, first
        assert state["autocast_loaded"] is True, first  # the registration step ran
        assert state["pending_after"] is False, first
        if first == "xlabridge":
            assert state["waiting"] is True
