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

``--compile-only`` keeps the example's own sizes (its batch, image side, sequence length and,
with no ``--`` arguments, its model; ``--batch``/``--image``/``--seq`` still shrink them if given)
and takes one step that is traced and compiled but not run: a ResNet-50 step at batch 128 or
the 2-layer decoder at 16 x 512 tokens (3 and 10 TFLOP) would need gigabytes of activations
and minutes of a 2-core CPU. Every step end (``torch_xla.sync()``, the end of a
``torch_xla.compile`` region, ``xm.mark_step()``) compiles the graph of what the step updates
(the parameters, gradients, buffers and optimizer state of the models and optimizers the example
holds), as torch_xla's step marker would, through torch_xla's compile-only entry
(``_xla_warm_up_cache``, what its Dynamo bridge uses), and launches nothing. Those tensors are
marked for donation, as the step marker aliases what a step updates. The step's loss is never
computed (nor an output), so the example's step closures (its loss print) are dropped. With ``xlabridge report --tpu``, the TPU view then covers the graphs at
the example's real size: compiled for TPU, not run (on XLA:CPU they were compiled, not run, either).

    xlabridge report --tpu v5e:2x2 -- python tools/torch_xla_examples/run.py \\
        CHECKOUT/examples/train_resnet_base.py --compile-only
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path


_HUGE = 1 << 62


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


def _compile_only() -> None:
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm

    xlac = torch_xla._XLAC

    def state():
        """Parameters, their gradients, buffers and optimizer state of the models and optimizers the
        example holds (its globals and their attributes: the trainer it builds): what a step
        updates, in torch_xla's order (its tensor ids), as the step marker takes them (it skips
        those with nothing to compute). Not through ``gc``: its list of every object would hold
        tuples the data loader's threads are still building."""
        roots = list(vars(sys.modules["__main__"]).values())
        roots += [value for obj in list(roots) for value in getattr(obj, "__dict__", {}).values()]
        found = {}
        for obj in roots:
            tensors = []
            if issubclass(type(obj), torch.nn.Module):
                params = list(obj.parameters())
                tensors = [*params, *(p.grad for p in params if p.grad is not None), *obj.buffers()]
            elif issubclass(type(obj), torch.optim.Optimizer):
                tensors = [v for per_param in obj.state.values() for v in per_param.values()]
            for tensor in tensors:
                if issubclass(type(tensor), torch.Tensor) and tensor.device.type == "xla":
                    found[xlac._xla_get_tensor_id(tensor)] = tensor
        return [found[key] for key in sorted(found)]

    def mark_step(device, devices, wait=True, reset_scope=True):
        # here, not at start-up: it sets torch_xla's device, which an SPMD example picks later (use_spmd)
        xlac._xla_set_enable_alias_with_buffer_donor_config(True)
        for tensor in state():
            xlac._set_buffer_donation(tensor, True)  # device data only: the inputs a step replaces
        xlac._xla_warm_up_cache(state(), devices)

    # The stack at a compilation is the graph's line: torch_xla names its cause from the innermost
    # frame (a step marker is ``mark_step``), and a frame of a ``<...>`` file is nobody's code,
    # so the graph keeps the example's line (the torch_xla.compile region, the loader's step end).
    mark_step.__code__ = mark_step.__code__.replace(co_filename="<run.py --compile-only>")
    xlac._xla_step_marker = mark_step
    xm.add_step_closure = lambda *args, **kwargs: None
    print("run.py --compile-only: the example's own sizes, one step traced and compiled, nothing run; "
          "its step closures (the loss print) dropped", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("example", type=Path, help="the example script, in a torch_xla checkout's examples/")
    parser.add_argument("--steps", type=int, default=3, help="training steps (samples the generator yields)")
    parser.add_argument("--batch", type=int, help="largest batch (a multiple of the device count; default 8)")
    parser.add_argument("--image", type=int, help="largest image side, pixels (default 64)")
    parser.add_argument("--seq", type=int, help="longest token sequence (default 128)")
    parser.add_argument("--compile-only", action="store_true",
                        help="one step traced and compiled, nothing run, at the example's own sizes unless "
                        "--batch/--image/--seq are given (see above)")
    args, rest = parser.parse_known_args()
    if not args.example.is_file():
        raise SystemExit(f"run.py: example {str(args.example)!r} is not a file (give a script in a torch_xla checkout)")
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if args.compile_only:
        _compile_only()
        sizes = (args.batch or _HUGE, args.image or _HUGE, args.seq or _HUGE, 1)
    else:
        sizes = (args.batch or 8, args.image or 64, args.seq or 128, args.steps)
    _shrink(*sizes)
    example = args.example.resolve()
    sys.argv = [str(example), *rest]
    sys.path.insert(0, str(example.parent))
    runpy.run_path(str(example), run_name="__main__")


if __name__ == "__main__":
    main()
