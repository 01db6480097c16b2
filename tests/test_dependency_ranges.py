"""What pip resolves for ``xlabridge[xla]``, ``[tpu]`` and plain ``xlabridge`` beside each torch.

pip's own resolver is the reference: it reads xlabridge's real metadata (built from
pyproject.toml by setuptools) and chooses among stand-in wheels that carry only names,
versions and the dependencies that matter here (torch_xla's ``tpu`` extra pins libtpu as the
real wheels do). Nothing is downloaded: ``--no-index`` with a folder of stand-ins, and the
machine's pip configuration is left out.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The releases on the registry that matter, with the dependencies the real wheels declare.
# torch_xla's wheels declare no torch dependency at all (checked for 2.8.1 and 2.9.0).
STAND_INS: dict[str, dict[str, list[str]]] = {
    "torch": {v: [] for v in ("2.7.1", "2.8.0", "2.9.0", "2.9.1", "2.10.0", "2.15.0")},
    "torch_xla": {
        "2.8.0": ['libtpu==0.0.17; extra == "tpu"'],
        "2.8.1": ['libtpu==0.0.17; extra == "tpu"'],
        "2.9.0": ['libtpu==0.0.21; extra == "tpu"'],
    },
    "libtpu": {v: [] for v in ("0.0.17", "0.0.21", "0.0.23")},
    "jax": {v: [] for v in ("0.6.2", "0.7.1", "0.7.2", "0.10.2")},
    "jaxlib": {v: [] for v in ("0.6.2", "0.7.1", "0.7.2", "0.10.2")},
    "numpy": {"2.4.6": []},
    "absl_py": {"2.5.1": []},
}


def _write_wheel(folder: Path, name: str, version: str, metadata: str) -> None:
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{info}/METADATA", metadata)
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: xlabridge-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", f"{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n")


def _stand_in_metadata(name: str, version: str, requires: list[str]) -> str:
    extras = sorted({r.split('extra == "')[1].rstrip('"') for r in requires if 'extra == "' in r})
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires] + [f"Provides-Extra: {e}" for e in extras]
    return "\n".join(lines) + "\n"


def _xlabridge_metadata(tmp: Path) -> tuple[str, str]:
    """xlabridge's METADATA as setuptools builds it from this checkout's pyproject.toml."""
    source = tmp / "source"
    (source / "xlabridge").mkdir(parents=True)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    (source / "xlabridge" / "__init__.py").write_text("")
    (tmp / "meta").mkdir()
    code = "import sys; from setuptools import build_meta; print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))"
    info = subprocess.run(
        [sys.executable, "-c", code, str(tmp / "meta")], cwd=source, check=True, capture_output=True, text=True
    ).stdout.strip().splitlines()[-1]
    version = info[len("xlabridge-") : -len(".dist-info")]
    return version, (tmp / "meta" / info / "METADATA").read_text()


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("wheels")
    for name, versions in STAND_INS.items():
        for version, requires in versions.items():
            _write_wheel(folder, name, version, _stand_in_metadata(name, version, requires))
    version, metadata = _xlabridge_metadata(tmp_path_factory.mktemp("xlabridge"))
    _write_wheel(folder, "xlabridge", version, metadata)
    return folder


def _pip_install(target: Path, index: Path, *args: str) -> subprocess.CompletedProcess:
    """``pip install`` into the environment ``target``, from ``index`` only, without pip's configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    command = [sys.executable, "-m", "pip", "--python", str(target / "bin" / "python"), "install"]
    return subprocess.run(
        [*command, "--no-index", "--find-links", str(index), *args], env=env, capture_output=True, text=True, check=False
    )


def _resolve(tmp_path: Path, index: Path, installed: list[str], request: str) -> dict[str, str]:
    """What ``pip install request`` would install into an environment holding ``installed``."""
    target = tmp_path / "env"
    venv.create(target, with_pip=False)
    if installed:
        done = _pip_install(target, index, "--no-deps", *installed)
        assert done.returncode == 0, done.stderr
    report = tmp_path / "report.json"
    done = _pip_install(target, index, "--dry-run", "--report", str(report), request)
    assert done.returncode == 0, done.stderr
    return {
        item["metadata"]["name"].lower().replace("-", "_"): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


@pytest.mark.parametrize("extra", ["xla", "tpu"])
def test_tpu_vm_with_torch_xla_28_keeps_its_torch(tmp_path, index, extra):
    plan = _resolve(tmp_path, index, ["torch==2.8.0", "torch_xla==2.8.1", "jax==0.6.2", "jaxlib==0.6.2"], f"xlabridge[{extra}]")
    assert "torch" not in plan and "torch_xla" not in plan and "jax" not in plan, plan
    assert "xlabridge" in plan
    if extra == "tpu":
        assert plan["libtpu"] == "0.0.17", "torch_xla 2.8's own libtpu"


def test_torch_xla_29_pair_is_kept(tmp_path, index):
    plan = _resolve(tmp_path, index, ["torch==2.9.0", "torch_xla==2.9.0"], "xlabridge[xla]")
    assert "torch" not in plan and "torch_xla" not in plan, plan


def test_fresh_machine_gets_the_newest_supported_pair(tmp_path, index):
    plan = _resolve(tmp_path, index, [], "xlabridge[xla]")
    assert plan["torch_xla"] == "2.9.0"
    assert _minor(plan["torch"]) == "2.9"
    assert plan["jax"] == "0.7.1" and plan["jaxlib"] == "0.7.1"


def test_torch_without_a_torch_xla_release_is_replaced_for_the_xla_extra(tmp_path, index):
    plan = _resolve(tmp_path, index, ["torch==2.15.0"], "xlabridge[xla]")
    assert _minor(plan["torch"]) == "2.9" and plan["torch_xla"] == "2.9.0"


@pytest.mark.parametrize(("installed", "kept"), [("2.15.0", True), ("2.8.0", True), ("2.7.1", False)])
def test_plain_install_keeps_any_supported_torch(tmp_path, index, installed, kept):
    plan = _resolve(tmp_path, index, [f"torch=={installed}"], "xlabridge")
    assert ("torch" not in plan) is kept, plan
    assert "torch_xla" not in plan
