"""One call of a function split both ways, explained: ``xlabridge.explain``."""

import torch
import torch_xla

import xlabridge


def step(x):
    y = torch.exp2(x.sin())  # no XLA lowering on torch_xla 2.9: an HLO lowering break
    if y.mean().item() > 1.0:  # a Python branch on a tensor's value: a Dynamo graph break
        y = y * 2
    return y.cos()


x = torch.randn(64, device=torch_xla.device())
report = xlabridge.explain(step)(x)  # compile afresh, run once, report (plain data)
print(report)  # the headline; render_text(report) gives the whole text view
for finding in report.findings:  # ranked: the costliest in this run first
    print(f"{finding.kind} at line {finding.lineno}: {finding.category}")
report.to_json("report.json")  # schema xlabridge.report/4; Report.from_dict reads it back
