"""The persistent cache: argument errors, what happens on PJRT CPU, and the evidence for it.

The cache is configured once per process (torch_xla reads it once), so every behaviour
check runs in a fresh subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

import xlabridge
from tests.conftest import requires_xla
from xlabridge.backend import cache


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
        env={**os.environ, "PJRT_DEVICE": "CPU", **env}, cwd=Path(__file__).resolve().parents[2],
    )


def test_cache_dir_that_is_a_file_is_named(tmp_path):
    a_file = tmp_path / "f"
    a_file.write_text("")
    with pytest.raises(ValueError, match=r"'cache_dir' .* exists and is not a directory"):
        xlabridge.compile(lambda x: x, cache_dir=a_file)
    with pytest.raises(ValueError, match=r"'cache_dir' .* cannot be created"):
        cache.validate_cache_dir(a_file / "below")
    with pytest.raises(TypeError, match=r"'cache_dir' must be a path, got int"):
        cache.validate_cache_dir(3)


def test_missing_cache_dir_is_created(tmp_path):
    assert cache.validate_cache_dir(tmp_path / "a" / "b") == (tmp_path / "a" / "b").resolve()
    assert (tmp_path / "a" / "b").is_dir()


_COMPILE_AND_RUN = """
    import json, warnings, torch, torch_xla, xlabridge
    from xlabridge.backend import cache
    from xlabridge.diagnostics import diagnose
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()).to(torch_xla.device())
    x = torch.randn(4, 8).to(torch_xla.device())
    with warnings.catch_warnings(record=True) as caught, diagnose() as report:
        warnings.simplefilter("always")
        out = xlabridge.compile(model{kwargs})(x)
    torch.testing.assert_close(out.cpu(), model(x).cpu())
    print(json.dumps({{"status": cache.status(), "warnings": [str(w.message) for w in caught
        if w.category is cache.CacheWarning], "report_findings": [f.message for f in report.findings]}}))
"""


@requires_xla
def test_on_pjrt_cpu_the_cache_is_off_and_says_why(tmp_path):
    result = _python(_COMPILE_AND_RUN.format(kwargs=f", cache_dir={str(tmp_path)!r}"))
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["status"]["state"] == "unsupported"
    assert seen["status"]["source"] == "cache_dir"
    installed = metadata.version("torch_xla")  # the rule holds on 2.8.1 and 2.9.0, checked below
    assert f"PJRT CPU cannot deserialize executables in torch_xla {installed}" in seen["status"]["reason"]
    assert len(seen["warnings"]) == 1 and "PJRT CPU cannot deserialize" in seen["warnings"][0]
    assert any("PJRT CPU cannot deserialize" in w for w in seen["report_findings"])
    assert list(tmp_path.iterdir()) == [], "entries were written that no process can load"


@requires_xla
def test_environment_variable_configures_and_late_configuration_warns(tmp_path):
    result = _python(
        """
        import json, warnings, torch, torch_xla
        from xlabridge.backend import cache
        (torch.ones(2, device=torch_xla.device()) + 1).cpu()   # the runtime has started
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            status = cache.configure_from_environment()
        print(json.dumps({"status": status, "warnings": [str(w.message) for w in caught]}))
        """,
        XLABRIDGE_CACHE_DIR=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["status"]["state"] == "too-late" and seen["status"]["source"] == "XLABRIDGE_CACHE_DIR"
    assert "already run a computation" in seen["warnings"][0]


_FORCED_ON = """
    import json, torch, torch_xla, xlabridge
    from xlabridge.backend import cache
    cache._cpu_cannot_load = lambda version: False   # what the cache would do without the CPU rule
    status = cache.configure({path!r})
    assert status["state"] == "enabled", status
    model = torch.nn.Linear(4, 4).to(torch_xla.device())
    with torch.no_grad():
        xlabridge.compile(model)(torch.ones(2, 4).to(torch_xla.device())).cpu()
    print(json.dumps(cache.status()))
"""


@requires_xla
@pytest.mark.slow
def test_evidence_forced_on_pjrt_cpu_entries_are_written_then_fail_to_load(tmp_path):
    """Why the cache is off on CPU, and that a failing cache is reported as such.

    With the CPU rule lifted, the first process writes its entry (a miss) and the second fails
    to load it and compiles again. If a torch_xla release makes the second process hit, this
    test fails: lift the rule in ``cache._cpu_cannot_load``.
    """
    first = _python(_FORCED_ON.format(path=str(tmp_path)))
    second = _python(_FORCED_ON.format(path=str(tmp_path)))
    assert first.returncode == 0 and second.returncode == 0, first.stderr[-2000:] + second.stderr[-2000:]
    cold = json.loads(first.stdout.strip().splitlines()[-1])
    warm = json.loads(second.stdout.strip().splitlines()[-1])
    assert cold["state"] == "enabled" and cold["misses"] >= 1 and cold["entries"] >= 1
    assert warm["hits"] == 0 and warm["load_failures"] >= 1
    assert warm["state"] == "failing" and "failed to load" in warm["reason"]
    assert "Deserializing serialized executable not supported" in second.stderr
