"""``backend="xlabridge"`` as a drop-in for ``backend="tpu"`` under TorchTPU's defaults: with TorchTPU's
own ``torch.compile`` in place (as ``_init_device_impl`` installs it when a TPU starts), a batch that
varies gives the same programs (content hashes of every partition TorchTPU compiles) and the same
results with either backend: static recompiles, since TorchTPU defaults ``dynamic`` to ``False`` for
its backends and xlabridge applies the same default. No TPU here: the diagnostics run each program
on the CPU in its place (``torchtpu`` probe)."""

from __future__ import annotations

import contextlib

import pytest

from tests.torchtpu.conftest import REASON

pytest.importorskip("torch_tpu", reason=REASON)

import torch

from xlabridge.diagnostics import diagnose

BATCHES = (8, 16, 24, 16)
_UNSET = object()


@contextlib.contextmanager
def tpu_compile():
    """``torch.compile`` replaced as TorchTPU's ``_init_device_impl`` replaces it (``torch_tpu/_loader.py``)."""
    from torch_tpu import _loader

    original = torch.compile
    torch.compile = _loader._default_tpu_compile
    try:
        yield
    finally:
        torch.compile = original


def _run(backend: str, *, installed: bool = True, dynamic=_UNSET):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    kwargs = {} if dynamic is _UNSET else {"dynamic": dynamic}
    generator = torch.Generator().manual_seed(1)
    inputs = [torch.randn(batch, 16, generator=generator) for batch in BATCHES]
    with tpu_compile() if installed else contextlib.nullcontext():
        step = torch.compile(model, backend=backend, **kwargs)
        with torch.no_grad(), diagnose() as report:
            outputs = [step(x) for x in inputs]
    torch._dynamo.reset()
    return report, outputs


def _programs(report):
    return [(g.role, g.hashes, g.buckets) for g in report.xla_graphs]


def test_xlabridge_gets_tpu_s_default_and_its_programs():
    tpu, tpu_outputs = _run("tpu")
    ours, our_outputs = _run("xlabridge")
    # TorchTPU's default: a static program per batch size, recompiled on each new size
    assert len(tpu.dynamo_graphs) == len(set(BATCHES)) and all(not g.buckets for g in tpu.xla_graphs)
    assert _programs(ours) == _programs(tpu)
    assert [r.guard for r in ours.recompiles] == [r.guard for r in tpu.recompiles]
    for a, b in zip(our_outputs, tpu_outputs):
        assert torch.equal(a, b)


def test_the_default_comes_with_torchtpu_s_compile():
    # without TorchTPU's torch.compile (no TPU started), neither backend gets it: both go dynamic alike
    tpu, _ = _run("tpu", installed=False)
    ours, _ = _run("xlabridge", installed=False)
    assert any(g.buckets for g in tpu.xla_graphs) and _programs(ours) == _programs(tpu)
