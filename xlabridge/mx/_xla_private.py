"""The private torch_xla functions the MXFP4 paths call, each wrapped once.

Private surface: ``torch_xla._XLAC._xla_user_computation`` (splices an XLA computation built with
``torch_xla.core.xla_builder`` into the lazy graph) and ``torch_xla._XLAC._xla_tpu_custom_call``
(adds a ``tpu_custom_call`` whose backend config is a serialized Mosaic kernel). Checked on
torch_xla 2.8.1 and 2.9.0: same names, same argument order (name or inputs, then the computation
or the payload, output shapes and dtypes), lists of lazy tensors returned.

torch_xla is imported by the calls, only when an XLA tensor reaches them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def user_computation(name: str, inputs: Sequence[torch.Tensor], computation) -> list[torch.Tensor]:
    """The outputs of XLA ``computation`` (from ``xla_builder.Op.build``) applied to ``inputs``,
    as lazy tensors; ``name`` labels the call in torch_xla's graph."""
    import torch_xla

    return list(torch_xla._XLAC._xla_user_computation(name, list(inputs), computation))


def tpu_custom_call(inputs: Sequence[torch.Tensor], payload: str, shapes: Sequence[Sequence[int]],
                    dtypes: Sequence[torch.dtype]) -> list[torch.Tensor]:
    """The outputs (of ``shapes`` and ``dtypes``) of the Mosaic kernel ``payload`` (the backend config
    JAX lowers a ``pallas_call`` to) applied to ``inputs``, as lazy tensors."""
    import torch_xla

    return list(torch_xla._XLAC._xla_tpu_custom_call(list(inputs), payload, [list(s) for s in shapes], list(dtypes)))
