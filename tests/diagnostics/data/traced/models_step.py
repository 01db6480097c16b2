"""A transformers model of tests/models.py (tiny configuration), traced without xlabridge: an
inference call or a training step, compiled with a backend of torch's own."""

import sys

import torch

from tests import models

name, mode = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
model, make_inputs = getattr(models, name)()
inputs = make_inputs(torch.device("cpu"))
step = torch.compile(model, backend="aot_eager")
if mode == "inference":
    model.eval()
    with torch.no_grad():
        step(**models.without_labels(model, inputs))
else:
    models.loss_of(step(**inputs)).backward()
print("xlabridge imported:", "xlabridge" in sys.modules)
