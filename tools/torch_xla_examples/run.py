"""Run one of torch_xla's own example scripts unmodified, at a size a CPU machine can run.

torch_xla's examples (``examples/`` in its repository, not in its wheel: point at a checkout)
train on synthetic data from ``torch_xla.utils.utils.SampleGenerator``. This wrapper shrinks
that data and nothing else: the batch dimension to at most ``--batch`` (a multiple of the
device count, for the SPMD examples), images to ``--image`` pixels a side, token sequences to
``--seq``, and the sample count to ``--steps`` steps; the model, the training step, the loop,
``torch_xla.compile`` and the sharding are the example's own. Arguments after ``--`` go to the
example (the decoder-only ones take ``--hidden-size`` and friends).

    xlabridge report --tpu v5e:2x2 -- python tools/torch_xla_examples/run.py \\
        CHECKOUT/examples/train_resnet_base.py --steps 3

The example runs as ``__main__`` with its own directory first on ``sys.path`` and ``argv[0]``
set to its path, as ``python EXAMPLE.py`` would.
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path


def _shrink(batch: int, image: int, seq: int, steps: int) -> None:
    import torch
    import torch_xla.runtime as xr
    import torch_xla.utils.utils as xu

    original = xu.SampleGenerator.__init__
    devices = xr.global_runtime_device_count() if xr.is_spmd() else 1

    def smaller(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.dim() == 0:
            return tensor
        sizes = list(tensor.shape)
        cap = max(devices, batch - batch % devices)
        sizes[0] = min(sizes[0], cap)
        if tensor.dim() == 4:  # images: N, C, H, W
            sizes[2], sizes[3] = min(sizes[2], image), min(sizes[3], image)
        elif tensor.dim() == 2 and not tensor.is_floating_point():  # token ids: N, S
            sizes[1] = min(sizes[1], seq)
        return torch.zeros(sizes, dtype=tensor.dtype)

    def __init__(self, data, sample_count):  # noqa: N807 - the wrapped method's name
        original(self, tuple(smaller(t) for t in data), min(sample_count, steps))

    xu.SampleGenerator.__init__ = __init__


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("example", type=Path, help="the example script, in a torch_xla checkout's examples/")
    parser.add_argument("--steps", type=int, default=3, help="training steps (samples the generator yields)")
    parser.add_argument("--batch", type=int, default=8, help="largest batch (a multiple of the device count)")
    parser.add_argument("--image", type=int, default=64, help="largest image side, pixels")
    parser.add_argument("--seq", type=int, default=128, help="longest token sequence")
    args, rest = parser.parse_known_args()
    if not args.example.is_file():
        raise SystemExit(f"run.py: example {str(args.example)!r} is not a file (give a script in a torch_xla checkout)")
    if rest[:1] == ["--"]:
        rest = rest[1:]
    _shrink(args.batch, args.image, args.seq, args.steps)
    example = args.example.resolve()
    sys.argv = [str(example), *rest]
    sys.path.insert(0, str(example.parent))
    runpy.run_path(str(example), run_name="__main__")


if __name__ == "__main__":
    main()
