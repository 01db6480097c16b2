"""torch_xla's private surfaces that xlabridge reaches: its C library (``_XLAC``) and its Dynamo bridge.

As ``torch_xla/debug/metrics.py`` wraps each ``_XLAC`` call it makes once, in a short named
function, so does this module for xlabridge's; each says which names and which torch_xla
releases it was checked on (``_registry.surface``). The accessors at the end return the private
module a probe patches. Nothing here imports torch_xla before a wrapper is called.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from xlabridge._upstream._registry import surface

CHECKED = ("2.8.1", "2.9.0")
"""The torch_xla releases of the CI environments (xla28 and pinned)."""


@surface("torch_xla", "torch_xla._XLAC", checked=CHECKED)
def xlac_loaded() -> bool:
    """Whether torch_xla's C library is loaded (its AutocastXLA kernels registered), without importing it."""
    module = sys.modules.get("torch_xla")
    return module is not None and hasattr(module, "_XLAC")


@surface("torch_xla", "torch_xla._XLAC._get_xla_tensors_hlo_proto", checked=CHECKED)
def tensors_hlo_proto(tensors: Sequence[Any]) -> bytes:
    """The serialized HLO module proto of the pending lazy graph computing XLA tensors ``tensors``
    (with their shardings under SPMD), without running it."""
    import torch_xla

    return torch_xla._XLAC._get_xla_tensors_hlo_proto(tensors)


@surface("torch_xla", "torch_xla._XLAC._xla_computation_text", checked=CHECKED)
def computation_text(computation: Any) -> str:
    """The HLO text of an XLA computation (``torch_xla.core.xla_builder``'s)."""
    import torch_xla

    return torch_xla._XLAC._xla_computation_text(computation)


@surface("torch_xla", "torch_xla._XLAC._xla_user_computation", checked=CHECKED)
def user_computation(name: str, inputs: Sequence[Any], computation: Any) -> list[Any]:
    """The outputs of XLA computation ``computation`` on XLA tensors ``inputs``, as lazy tensors
    (spliced into the lazy graph under op name ``name``; XLA inlines it)."""
    import torch_xla

    return torch_xla._XLAC._xla_user_computation(name, inputs, computation)


@surface("torch_xla", "torch_xla._XLAC._xla_tpu_custom_call", checked=CHECKED)
def tpu_custom_call(
    inputs: Sequence[Any], payload: str, output_shapes: Sequence[Sequence[int]], output_dtypes: Sequence[Any]
) -> list[Any]:
    """The outputs of a Mosaic kernel (``payload``: its serialized backend config) on XLA tensors
    ``inputs``, as lazy tensors of ``output_shapes`` and ``output_dtypes`` (XLA:TPU compiles it)."""
    import torch_xla

    return torch_xla._XLAC._xla_tpu_custom_call(inputs, payload, output_shapes, output_dtypes)


@surface("torch_xla", "torch_xla._XLAC._xla_computation_cache_is_initialized", checked=CHECKED)
def computation_cache_initialized() -> bool:
    """Whether torch_xla's computation cache exists, i.e. its runtime has compiled a computation."""
    import torch_xla

    return torch_xla._XLAC._xla_computation_cache_is_initialized()


# ---------------------------------------------------------------- accessors: patched


@surface("torch_xla", "torch_xla._XLAC", checked=CHECKED, uses=("_get_graph_hash", "_prepare_to_exit"))
def xlac() -> ModuleType:
    """torch_xla's C library, whose ``_get_graph_hash`` (each XLA graph's hash, as the bridge extracts
    it) and ``_prepare_to_exit`` (the wait for the last steps at exit) the probes wrap."""
    import torch_xla

    return torch_xla._XLAC


@surface(
    "torch_xla", "torch_xla._dynamo.dynamo_bridge", checked=CHECKED,
    uses=("UnsupportedNodesCollector", "UnsupportedNodesCollector.run_node", "extract_internal"),
)
def dynamo_bridge() -> ModuleType:
    """The Dynamo bridge's module, whose fallback-node collector and partition extraction the
    ``xla.bridge`` probe wraps while the bridge extracts a graph."""
    from torch_xla._dynamo import dynamo_bridge as module

    return module
