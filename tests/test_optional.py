"""Optional dependencies: a torch_xla built for another torch is named before it is loaded."""

from __future__ import annotations

import importlib.metadata
import re

import pytest
import torch

from tests.conftest import requires_xla
from xlabridge import _optional
from xlabridge.errors import MissingDependencyError


@pytest.fixture
def installed_torch_xla(monkeypatch):
    """Pretend the installed torch_xla has the given version (the metadata pip reads)."""
    real = importlib.metadata.version

    def pretend(version: str) -> None:
        monkeypatch.setattr(
            importlib.metadata, "version", lambda name: version if name == "torch_xla" else real(name)
        )
        _optional.torch_xla_mismatch.cache_clear()

    yield pretend
    _optional.torch_xla_mismatch.cache_clear()


def test_torch_xla_for_another_torch_minor_is_named(installed_torch_xla, monkeypatch):
    monkeypatch.setattr(_optional, "is_available", lambda module: True)
    other = "2.8.1" if not torch.__version__.startswith("2.8.") else "2.9.0"
    installed_torch_xla(other)
    expected = (
        f"feature X needs a torch_xla that matches torch: torch_xla {other} needs torch {other[:3]}, "
        f"but torch {torch.__version__} is installed: pip install 'torch~={other[:3]}.0'"
    )
    with pytest.raises(MissingDependencyError, match=re.escape(expected)):
        _optional.require("torch_xla", "feature X")


def test_same_minor_with_another_patch_release_is_accepted(installed_torch_xla):
    major, minor = torch.__version__.split(".")[:2]
    installed_torch_xla(f"{major}.{minor}.7")
    assert _optional.torch_xla_mismatch() is None


@requires_xla
def test_the_installed_pair_matches_and_loads():
    """The environment's own torch_xla: the check agrees with loading it for real."""
    _optional.torch_xla_mismatch.cache_clear()
    assert _optional.torch_xla_mismatch() is None
    assert _optional.require("torch_xla", "this test").__name__ == "torch_xla"
