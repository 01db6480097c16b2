"""Worker for tests/pod: sharded training scenarios on the devices the test's environment gives.

``python -m tests.pod._sharded_worker OUT_DIR [--probe S,...] SCENARIO...`` runs each scenario for
one training step under SPMD (``CPU_NUM_DEVICES`` host devices) inside
``torch_xla.compile(name=SCENARIO)``, so the modules XLA compiles carry the scenario's name, and
writes ``OUT_DIR/results.json``: per scenario the loss and a digest of the trained weights
(bitwise). For the lazy scenarios named by ``--probe`` it also writes the pre-partition HLO proto
of one more step's gradients (``SCENARIO.pb``) and its graph hash, and has the run compile that
same graph under the name ``SCENARIO_probe``.

Scenarios: ``mlp`` (the example's tensor-parallel MLP with its planted all-gather),
``mlp_fixed``, ``mlp_compile`` and ``mlp_fixed_compile`` (forward and loss through
``torch.compile(backend="openxla")``),
``gpt2`` and ``gpt2_compile`` (GPT-2's small test config, FSDP style: every weight sharded on
its first dimension over a 1-D mesh, the batch sharded too).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import numpy as np
import torch

STEPS = 1


def _mlp(device, *, fixed: bool):
    import torch_xla.runtime as xr

    from xlabridge.examples import sharded_train

    mesh = sharded_train.make_mesh(xr.global_runtime_device_count())
    torch.manual_seed(0)
    model = sharded_train.ShardedMLP().to(device)
    sharded_train.shard(model, mesh, fixed=fixed)
    inputs, targets = sharded_train.batch(device, mesh)

    def loss_of(module):
        return torch.nn.functional.mse_loss(module(inputs), targets)

    return model, loss_of


def _gpt2(device):
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    from tests import models

    devices = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(devices), (devices,), ("fsdp",))
    torch.manual_seed(0)
    model, _ = models.gpt2()
    model = model.to(device)
    for parameter in model.parameters():
        if parameter.dim() >= 2 and parameter.shape[0] % devices == 0:
            xs.mark_sharding(parameter, mesh, ("fsdp",) + (None,) * (parameter.dim() - 1))
    generator = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, 128, (devices, 16), generator=generator).to(device)
    xs.mark_sharding(ids, mesh, ("fsdp", None))

    def loss_of(module):
        return module(input_ids=ids, labels=ids).loss

    return model, loss_of


def _digest(model: torch.nn.Module) -> str:
    """SHA-256 of every device's shard of every weight (no graph runs to gather them)."""
    from torch_xla.distributed.spmd import XLAShardedTensor

    digest = hashlib.sha256()
    for name, parameter in sorted(model.named_parameters()):
        digest.update(name.encode())
        for shard in XLAShardedTensor(parameter.detach()).local_shards:
            digest.update(shard.data.numpy().tobytes())
    return digest.hexdigest()


def run(scenario: str, out: Path, *, probe: bool) -> dict:
    import torch_xla

    device = torch_xla.device()
    base = scenario.removesuffix("_compile")
    model, loss_of = _mlp(device, fixed=base == "mlp_fixed") if base.startswith("mlp") else _gpt2(device)
    compiled = scenario.endswith("_compile")
    forward = torch.compile(loss_of, backend="openxla") if compiled else loss_of
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    for _ in range(STEPS):
        with torch_xla.compile(name=scenario):
            optimizer.zero_grad()
            loss = forward(model)
            loss.backward()
            optimizer.step()
        losses.append(loss)
    result = {"losses": [loss.item() for loss in losses], "weights": _digest(model)}
    if probe and not compiled:
        optimizer.zero_grad()
        loss = loss_of(model)
        loss.backward()
        pending = [loss] + [p.grad for p in model.parameters()]
        (out / f"{scenario}.pb").write_bytes(torch_xla._XLAC._get_xla_tensors_hlo_proto(pending))
        with torch_xla.compile(name=f"{scenario}_probe"):
            pass
    return result


def main() -> None:
    import torch_xla.runtime as xr

    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--probe", default="", help="comma-separated lazy scenarios to probe")
    parser.add_argument("scenarios", nargs="+")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    xr.use_spmd()
    results = {}
    for scenario in args.scenarios:
        start = time.perf_counter()
        results[scenario] = run(scenario, args.out, probe=scenario in args.probe.split(","))
        results[scenario]["seconds"] = time.perf_counter() - start
    (args.out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
