"""The public API is a decision: ``docs/api/index.md`` lists it, and the code agrees.

For each public module listed there: its ``__all__`` is exactly the documented names; every name
it exposes that looks public (no leading ``_``) and that xlabridge defines is listed; each module
it lists is public itself; and every other module of the package is private (a ``_`` somewhere
in its dotted name). ``import xlabridge`` stays light: it loads no torch, torch_xla, JAX, Triton
or libtpu (a fresh interpreter checks), and its names resolve on first use.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "docs" / "api" / "index.md"
_SECTION = re.compile(r"^## `(?P<module>[\w.]+)`\n\n(?P<names>.*?)\n", re.M)


def documented() -> dict[str, list[str]]:
    """Each public module of the index page and the names it lists, in order."""
    text = INDEX.read_text(encoding="utf-8")
    return {m["module"]: re.findall(r"`([\w]+)`", m["names"]) for m in _SECTION.finditer(text)}


def _defined_in(value: object, module: str) -> bool:
    """Whether ``value`` is ``module``'s own: a function or class defined there or in one of its
    private modules, a submodule of it, or a constant (where a constant comes from cannot be told)."""
    if isinstance(value, types.ModuleType):
        return value.__name__.startswith(module + ".")
    origin = getattr(value, "__module__", None)
    if origin is None:
        return not callable(value) and not isinstance(value, bool)
    return origin == module or origin.startswith(module + "._")


@pytest.mark.parametrize("module", sorted(documented()))
def test_all_is_the_documented_list(module: str) -> None:
    names = documented()[module]
    mod = importlib.import_module(module)
    assert sorted(getattr(mod, "__all__", [])) == sorted(names), f"{module}.__all__ differs from docs/api/index.md"
    for name in names:
        assert hasattr(mod, name), f"{module} documents {name!r} but does not define it"


@pytest.mark.parametrize("module", sorted(documented()))
def test_nothing_public_goes_unlisted(module: str) -> None:
    mod = importlib.import_module(module)
    listed = set(documented()[module])
    exposed = {
        name for name in vars(mod)
        if not name.startswith("_") and name != "annotations" and _defined_in(vars(mod)[name], module)
    }
    # submodules are checked by name below (public by the list, private by a ``_``, or an entry point)
    unlisted = {name for name in exposed - listed if not isinstance(vars(mod)[name], types.ModuleType)}
    assert not unlisted, f"{module} exposes {sorted(unlisted)} without listing them (prefix them with _ or document them)"


def test_every_module_is_public_by_the_list_or_private_by_its_name() -> None:
    public = set(documented())
    offenders = []
    for path in (ROOT / "xlabridge").rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if parts[-1] == "__main__" or parts[:2] == ["xlabridge", "examples"] or parts == ["xlabridge", "cli"]:
            continue  # entry points: run, not imported
        name = ".".join(parts)
        if name not in public and not any(part.startswith("_") for part in parts[1:]):
            offenders.append(name)
    assert not offenders, f"modules neither listed in docs/api/index.md nor private by name: {sorted(offenders)}"


def test_import_xlabridge_loads_no_heavy_package() -> None:
    code = (
        "import sys, xlabridge\n"
        "heavy = [m for m in ('torch', 'torch_xla', 'jax', 'triton', 'libtpu', 'torch_tpu') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == ""


def test_top_level_names_resolve_on_first_use() -> None:
    import xlabridge

    assert xlabridge.compile is importlib.import_module("xlabridge.backend").compile
    assert xlabridge.Report is importlib.import_module("xlabridge.diagnostics.report").Report
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        xlabridge.nonexistent  # noqa: B018
