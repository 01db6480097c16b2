"""torchax's private surfaces that xlabridge reaches: its table of ATen lowerings.

The TPU view lowers FX graphs with torchax (``xlabridge.tpu._fx``) and, before lowering, names
the ops torchax has no lowering for (a TPU lowering break, with the user's line), which needs
torchax's own lookup of an op's lowering. Nothing here imports torchax before a wrapper is called
(torchax is imported through ``xlabridge.tpu._fx.import_torchax``, beside torch 2.15).
"""

from __future__ import annotations

from typing import Any

from xlabridge._upstream._registry import surface

CHECKED = ("0.0.13",)
"""The torchax releases of the CI environments (TorchTPU, with torch 2.15.0 and jax 0.10.2)."""


@surface("torchax", "torchax.tensor.Environment", attributes=("_get_op_or_decomp",), checked=CHECKED)
def has_lowering(env: Any, target: Any) -> bool:
    """Whether torchax's environment ``env`` lowers ATen op ``target``, by a JAX function of its own
    or a decomposition it carries (its ``OperatorNotFound`` otherwise)."""
    try:
        env._get_op_or_decomp(target)
    except Exception as error:  # torchax's OperatorNotFound (not exported under a public name)
        if type(error).__name__ != "OperatorNotFound":
            raise
        return False
    return True
