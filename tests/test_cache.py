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
from pathlib import Path

import pytest

import xlabridge
from tests.conftest import requires_xla
from xlabridge import cache


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
        env={**os.environ, "PJRT_DEVICE": "CPU", **env}, cwd=Path(__file__).parent.parent,
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
    from xlabridge import cache
    from xlabridge.diagnostics import diagnose
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()).to(torch_xla.device())
    x = torch.randn(4, 8).to(torch_xla.device())
    with warnings.catch_warnings(record=True) as caught, diagnose() as report:
        warnings.simplefilter("always")
        out = xlabridge.compile(model{kwargs})(x)
    torch.testing.assert_close(out.cpu(), model(x).cpu())
    print(json.dumps({{"status": cache.status(), "warnings": [str(w.message) for w in caught
        if w.category is cache.CacheWarning], "report_warnings": report.warnings}}))
"""


@requires_xla
def test_on_pjrt_cpu_the_cache_is_off_and_says_why(tmp_path):
    result = _python(_COMPILE_AND_RUN.format(kwargs=f", cache_dir={str(tmp_path)!r}"))
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["status"]["state"] == "unsupported"
    assert seen["status"]["source"] == "cache_dir"
    assert "PJRT CPU cannot deserialize executables in torch_xla 2.9" in seen["status"]["reason"]
    assert len(seen["warnings"]) == 1 and "PJRT CPU cannot deserialize" in seen["warnings"][0]
    assert any("PJRT CPU cannot deserialize" in w for w in seen["report_warnings"])
    assert list(tmp_path.iterdir()) == [], "entries were written that no process can load"


@requires_xla
def test_environment_variable_configures_and_late_configuration_warns(tmp_path):
    result = _python(
        """
        import json, warnings, torch, torch_xla
        from xlabridge import cache
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


_TORCH_XLA_CACHE = """
    import json, torch, torch_xla, torch_xla.runtime as xr, torch_xla.debug.metrics as met
    xr.initialize_cache({path!r})
    (torch.arange(16.0, device=torch_xla.device()).reshape(4, 4) @ torch.ones(4, 4, device=torch_xla.device())).cpu()
    print(json.dumps({{name: met.counter_value(name) or 0 for name in
        ("PersistentCacheMiss", "PersistentCacheHit", "PersistentCacheDeserializeFailure", "UncachedCompile")}}))
"""


@requires_xla
@pytest.mark.slow
def test_evidence_torch_xla_cache_cannot_load_entries_on_pjrt_cpu(tmp_path):
    """Why the cache is off on CPU: torch_xla's own cache writes an entry, then fails to load it.

    If a torch_xla release fixes this, this test fails: lift the rule in ``cache._cpu_cannot_load``.
    """
    first = _python(_TORCH_XLA_CACHE.format(path=str(tmp_path)))
    second = _python(_TORCH_XLA_CACHE.format(path=str(tmp_path)))
    assert first.returncode == 0 and second.returncode == 0, first.stderr[-2000:] + second.stderr[-2000:]
    first_counts = json.loads(first.stdout.strip().splitlines()[-1])
    second_counts = json.loads(second.stdout.strip().splitlines()[-1])
    assert first_counts["PersistentCacheMiss"] == 1 and len(list(tmp_path.iterdir())) == 1
    assert second_counts["PersistentCacheHit"] == 0
    assert second_counts["PersistentCacheDeserializeFailure"] == 1 and second_counts["UncachedCompile"] == 1
    assert "Deserializing serialized executable not supported" in second.stderr
