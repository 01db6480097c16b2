"""A lazily traced training loop with a host read and a torch.compile'd function, for tests/pod.

Run with torch_xla's debug switches set (``capture_environment``); prints torch_xla's own
counts of compilations and executions as JSON, the reference for the parsed trace. Needs only
torch and torch_xla, so it runs under any supported torch_xla.
"""

from __future__ import annotations

import json

import torch


def read_on_host(loss: torch.Tensor) -> float:
    return loss.item()  # marker: host read


def main() -> None:
    import torch_xla
    import torch_xla.debug.metrics as metrics

    device = torch_xla.device()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs = torch.randn(4, 8).to(device)
    double_sum = torch.compile(lambda x: (x * 2).sum(), backend="openxla")
    for step in range(3):
        optimizer.zero_grad()
        loss = model(inputs).pow(2).mean()
        if step == 1:
            read_on_host(loss)
        loss.backward()
        optimizer.step()
        torch_xla.sync()  # marker: step end
    for _ in range(2):
        total = double_sum(inputs)  # marker: compiled call
    total.cpu()
    print(json.dumps({
        "compiles": metrics.metric_data("CompileTime")[0],
        "executions": metrics.metric_data("ExecuteTime")[0],
    }))


if __name__ == "__main__":
    main()
