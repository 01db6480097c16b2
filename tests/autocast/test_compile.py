"""Autocast under ``torch.compile(backend="xlabridge")``: the bf16 policy reaches the compiled HLO.

Runs in a subprocess because the HLO dump (``XLA_FLAGS=--xla_dump_to``) is read by XLA once,
when its client starts.
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
    import json, sys
    import torch, torch_xla
    import xlabridge.autocast as autocast
    mode = sys.argv[1]
    import xlabridge
    if mode == "api":
        autocast.enable_parity()
    dev = torch_xla.device()
    gen = torch.Generator().manual_seed(0)
    def rand(*shape):
        return torch.randn(*shape, generator=gen)
    cpu = [rand(2, 3, 4), rand(2, 4, 5), rand(5, 7), rand(7), rand(3, 8)]

    def step(a, b, m, v, x):
        with torch.autocast("xla", dtype=torch.bfloat16):
            e = torch.einsum("bij,bjk->bik", a, b)
            y = torch.mv(m, v)
            n = torch.layer_norm(x.bfloat16(), (8,))
        loss = (e.float() ** 2).sum() + (y.float() ** 2).sum() + (n ** 2).sum()
        return loss, e.dtype, y.dtype, n.dtype

    def run(fn):
        leaves = [t.to(dev).requires_grad_() for t in cpu]
        loss, *dtypes = fn(*leaves)
        loss.backward()
        torch_xla.sync()
        return loss.item(), [str(d) for d in dtypes], [l.grad.cpu().tolist() for l in leaves]

    if mode == "option":
        compiled = xlabridge.compile(step, autocast_parity=True)
    else:
        compiled = torch.compile(step, backend="xlabridge")
    loss, dtypes, grads = run(compiled)

    def reference(a, b, m, v, x):
        loss = (torch.einsum("bij,bjk->bik", a, b) ** 2).sum() + (torch.mv(m, v) ** 2).sum()
        return loss + (torch.layer_norm(x.bfloat16().float(), (8,)) ** 2).sum(), None, None, None
    ref_loss, _, ref_grads = run(reference)
    print(json.dumps({"loss": loss, "ref_loss": ref_loss, "dtypes": dtypes, "grads": grads,
                      "ref_grads": ref_grads, "ours": len(autocast.registered_by_xlabridge())}))
    """
)


def _run(mode: str, dump: Path) -> tuple[dict, str]:
    env = {
        **os.environ,
        "PJRT_DEVICE": "CPU",
        "PYTHONPATH": str(REPO),
        "XLA_FLAGS": f"--xla_dump_to={dump} --xla_dump_hlo_as_text",
    }
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    hlo = "\n".join(p.read_text() for p in sorted(dump.glob("*before_optimizations.txt")))
    return json.loads(done.stdout.strip().splitlines()[-1]), hlo


def _check(result: dict, hlo: str) -> None:
    import torch

    assert result["dtypes"] == ["torch.bfloat16", "torch.bfloat16", "torch.float32"]
    assert result["ours"] > 0
    # The dump prints a dot's result type only; a bf16 result means bf16 operands here.
    # einsum (torch_xla's kernel) and mv (parity's) reach the compiled graph as bf16 dots ...
    assert re.search(r"= bf16\[2,3,5\]\{[\d,]*\} dot\(", hlo)
    assert re.search(r"= bf16\[5\]\{0\} dot\(", hlo)
    # ... and so do their backward matmuls (the gradients of a and of v).
    assert re.search(r"= bf16\[2,3,4\]\{[\d,]*\} dot\(", hlo)
    assert re.search(r"= bf16\[7\]\{0\} dot\(", hlo)
    scale = max(1.0, abs(result["ref_loss"]))
    assert abs(result["loss"] - result["ref_loss"]) <= 3e-2 * scale
    for got, expected in zip(result["grads"], result["ref_grads"]):
        torch.testing.assert_close(torch.tensor(got), torch.tensor(expected), rtol=5e-2, atol=5e-2)


@requires_xla
def test_compiled_forward_and_backward_use_bf16_after_enable_parity(tmp_path) -> None:
    _check(*_run("api", tmp_path))


@requires_xla
def test_compile_option_autocast_parity(tmp_path) -> None:
    _check(*_run("option", tmp_path))


@requires_xla
def test_backend_option_autocast_parity_registers_and_warns_that_it_came_after_the_trace(xla_device) -> None:
    import torch

    import xlabridge.autocast as autocast

    autocast.disable_parity()
    m, v = torch.randn(5, 7, device=xla_device), torch.randn(7, device=xla_device)

    def step(m, v):
        with torch.autocast("xla", dtype=torch.bfloat16):
            return torch.mv(m, v)

    try:
        with pytest.warns(RuntimeWarning, match="took effect while compiling a graph"):
            torch.compile(step, backend="xlabridge", options={"autocast_parity": True})(m, v)
        assert "aten::mv" in autocast.registered_by_xlabridge()
    finally:
        autocast.disable_parity()
