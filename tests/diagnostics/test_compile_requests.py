"""Every way into Dynamo is observed: ``torch.compile`` of a module, ``nn.Module.compile()``, the
decorator and ``torch._dynamo.optimize``; and a request whose code Dynamo skips is said, where torch
itself says it (``TORCH_LOGS=+dynamo``: ``skipping: forward (reason: in skipfiles, file: ...)``).

References: the script's own source (the line of each request), torch's debug log of the same script
run without xlabridge (which frames it skipped) and torch's compilation metrics printed by the script
(which frames it compiled).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import requires_xla

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, os, sys, torch, torch.nn as nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8)

        def forward(self, x):
            return torch.relu(self.a(x)) + 1

    device = "cpu"
    if os.environ.get("ON_XLA"):
        import torch_xla
        device = torch_xla.device()
    backend = os.environ.get("BACKEND", "eager")
    torch.manual_seed(0)
    seq = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).to(device)
    seq.compile(backend=backend)  # REQUEST sequential
    block = Block().to(device)
    block.compile(backend=backend)  # REQUEST block

    @torch.compile(backend=backend)  # REQUEST decorator
    def double(x):
        return x * 2

    plus = torch._dynamo.optimize(backend)(lambda x: x + 1)  # REQUEST optimize
    x = torch.randn(4, 8, device=device)
    out = [seq(x), block(x), double(x), plus(x)]
    if os.environ.get("ON_XLA"):
        torch_xla.sync()
    records = torch._dynamo.utils.get_compilation_metrics()
    graphs = [getattr(r, "graph_op_count", None) for r in records]
    print("GRAPHS " + json.dumps(None if None in graphs else sum(1 for n in graphs if n)))
    print("SUM %.6f" % sum(float(o.sum()) for o in out))
    """
)


def _line(text: str, marker: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), start=1) if marker in line)


def _run(tmp: Path, *, observe: bool, env: dict[str, str]) -> subprocess.CompletedProcess:
    script = tmp / "compile_ways.py"
    script.write_text(SCRIPT)
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("XLABRIDGE_", "TORCH_LOGS"))}
    environment.update(PYTHONPATH=str(REPO), PJRT_DEVICE="CPU", **env)
    command = [sys.executable, str(script)]
    if observe:
        command = [sys.executable, "-m", "xlabridge.cli", "report", "--json", str(tmp / "report.json"), "--", *command]
    done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=600, cwd=tmp)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _skipped_by_torch(stderr: str) -> set[tuple[str, str]]:
    """``(function, file name)`` of each frame torch's debug log says it skipped as in skipfiles."""
    return {(m.group(1), Path(m.group(2)).name)
            for m in re.finditer(r"skipping: (\w+) \(reason: in skipfiles, file: ([^)]+)\)", stderr)}


def _graphs(stdout: str) -> int | None:
    """The compilations torch's metrics record with a graph of at least one op (None: a torch without the count)."""
    return json.loads(next(line for line in stdout.splitlines() if line.startswith("GRAPHS "))[len("GRAPHS "):])


def _sum(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("SUM "))


def _check(tmp: Path, env: dict[str, str]) -> dict:
    observed = _run(tmp, observe=True, env=env)
    plain = _run(tmp, observe=False, env={**env, "TORCH_LOGS": "+dynamo"})
    report = json.loads((tmp / "report.json").read_text())
    requests = report["dynamo"]["requests"]
    lines = {name: _line(SCRIPT, f"# REQUEST {name}") for name in ("sequential", "block", "decorator", "optimize")}
    assert sorted((r["how"], r["lineno"]) for r in requests) == sorted([
        ("Module.compile", lines["sequential"]), ("Module.compile", lines["block"]),
        ("torch.compile", lines["decorator"]), ("torch._dynamo.optimize", lines["optimize"]),
    ])
    assert {r["backend"] for r in requests} == {env.get("BACKEND", "eager")}
    # Sequential's own forward: compiled nothing of it exactly where torch's log says it skipped it
    torch_skipped = ("forward", "container.py") in _skipped_by_torch(plain.stderr)
    sequential = next(r for r in requests if r["lineno"] == lines["sequential"])
    assert sequential["compiles_nothing"] is torch_skipped
    said = [f for f in report["findings"] if f["kind"] == "compile-skipped"]
    assert [f["lineno"] for f in said] == ([lines["sequential"]] if torch_skipped else [])
    assert not next(r for r in requests if r["lineno"] == lines["block"])["compiles_nothing"]
    # as many graphs as torch's metrics record, and the same results
    if _graphs(observed.stdout) is not None:
        assert len(report["dynamo"]["graphs"]) == _graphs(observed.stdout)
    assert _sum(observed.stdout) == _sum(plain.stdout)
    return {"report": report, "torch_skipped": torch_skipped}


@pytest.mark.parametrize("backend", ["eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_every_way_into_dynamo_is_observed(tmp_path: Path, backend: str) -> None:
    import torch

    checked = _check(tmp_path, {"BACKEND": backend})
    release = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    if release <= (2, 9):
        # torch 2.8 and 2.9 hand Dynamo Module._call_impl, which it skips, then Sequential.forward
        assert checked["torch_skipped"]


@requires_xla
def test_module_compile_on_openxla_is_observed(tmp_path: Path) -> None:
    checked = _check(tmp_path, {"BACKEND": "openxla", "ON_XLA": "1"})
    report = checked["report"]
    assert {g["backend"] for g in report["dynamo"]["graphs"]} == {"openxla"}
    assert report["hlo"]["graphs"], "the openxla graphs went through torch_xla's bridge"
