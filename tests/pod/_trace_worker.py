"""Worker for tests/pod: the pre-partition HLO of one sharded training step, traced, not run.

``python -m tests.pod._trace_worker OUT_DIR SCENARIO...`` builds each scenario of
``_sharded_worker`` on a mesh of ``CPU_NUM_DEVICES`` devices, traces one training step (forward,
backward, SGD update) lazily and writes the pending graph that computes the loss and the
updated weights as an HLO module proto, ``OUT_DIR/SCENARIO.pb``, with the tensors' shardings.
Nothing is compiled or executed, so a 16-device mesh costs no more than tracing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch


def main() -> None:
    import torch_xla
    import torch_xla.runtime as xr

    from tests.pod._sharded_worker import _gpt2, _mlp

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    xr.use_spmd()
    device = torch_xla.device()
    for scenario in sys.argv[2:]:
        model, loss_of = _gpt2(device) if scenario == "gpt2" else _mlp(device, fixed=scenario == "mlp_fixed")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        loss = loss_of(model)
        loss.backward()
        optimizer.step()
        pending = [loss, *model.parameters()]
        (out / f"{scenario}.pb").write_bytes(torch_xla._XLAC._get_xla_tensors_hlo_proto(pending))


if __name__ == "__main__":
    main()
