"""A training loop observed: ``xlabridge.diagnose``, and the report's views."""

import torch
import torch_xla
from torch import nn

import xlabridge
from xlabridge.diagnostics import render_text, write_html, write_trace

device = torch_xla.device()
model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
compiled = torch.compile(model, backend="openxla")  # "xlabridge" works too

with xlabridge.diagnose() as report:  # the report fills in when the block ends
    for step in range(3):
        batch = torch.randn(16, 32, device=device)
        loss = compiled(batch).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch_xla.sync()

print(report)
text = render_text(report)  # the terminal view: findings, time split, timeline, tables
print(text.splitlines()[0])
write_html(report, "report.html")  # one self-contained page, no network needed
write_trace(report, "trace.json")  # the timeline for ui.perfetto.dev or chrome://tracing
split = report.time[0]  # one process: its wall time in exclusive shares
print(f"shares of {split.wall:.1f} s:", ", ".join(split.shares()))
