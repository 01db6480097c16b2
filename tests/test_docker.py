"""The Dockerfiles parse (with Docker's own parser) and do what the README says of them."""

from pathlib import Path

import pytest

dockerfile = pytest.importorskip("dockerfile", reason="the 'dockerfile' parser package is not installed")

DOCKER_DIR = Path(__file__).resolve().parents[1] / "docker"


def _commands(name: str) -> list:
    return list(dockerfile.parse_file(str(DOCKER_DIR / name)))


@pytest.mark.parametrize(
    ("name", "must_install"),
    [("tpu.Dockerfile", "torch_xla[tpu]==2.9.0"), ("cuda.Dockerfile", "-e \".[cuda,test]\"")],
)
def test_dockerfile_installs_xlabridge_and_runs_its_tests(name, must_install):
    commands = _commands(name)
    assert commands[0].cmd == "FROM"
    runs = " ".join(" ".join(c.value) for c in commands if c.cmd == "RUN")
    assert must_install in runs
    assert "--no-build-isolation -e" in runs
    cmd = [c for c in commands if c.cmd == "CMD"]
    assert len(cmd) == 1 and "pytest" in cmd[0].value
