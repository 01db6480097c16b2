"""A Mosaic kernel's operands and results pinned to HBM, where the kernel's own pipelined block
copies read and write them, for the TPU generations whose XLA would otherwise move them into VMEM.

Where a ``tpu_custom_call``'s operands and results live is XLA:TPU's choice. For v7 (libtpu 0.0.52)
its ``TpuCustomCallMemorySpacePolicy`` pass runs before memory-space assignment, with the
``msa_reservation_policy`` (``msa_reservation_size_bytes: 10485760``): it colors each operand and
result VMEM while it fits into what is left of VMEM after those 10 MiB and the kernel's scoped VMEM
limit (21.9 MiB of v7's 64 MiB beside a kernel with the default 32 MiB limit). An operand that
arrives in HBM, such as a parameter, then reaches the kernel through a ``copy-start`` prefetch of
the whole array, and a VMEM result read by a kernel that wants HBM leaves through another: one
asynchronous copy each, outside the kernel. For v4, v5e, v5p and v6e the pass does not run (the
same libtpu logs nothing of it for them); their memory-space assignment leaves a parameter operand
in HBM and puts an operand or result in VMEM where a neighbouring op writes or reads it there,
without a copy (gpt-oss's expert matmul: the relayout of its activations and the conversion of its
bias write VMEM).

The pass keeps what the custom call's backend config colors already (its log says
``colored-before-policy``): Pallas writes ``input_memory_space_colors`` for an operand under
``pltpu.with_memory_space_constraint`` and output colors for a ``pltpu.HBM`` ``out_shape``. The
MXFP4 kernels stream their arrays through Pallas's double-buffered block copies (the cast and its
inverse read and write each byte once, the matmul each weight byte), so a whole-array VMEM copy
saves them no HBM traffic: it moves the read into a copy that runs before the kernel, and holds
VMEM the rest of the program could use. Where the pass runs, every operand and result is therefore
pinned to HBM (its cost: an operand that a neighbouring op could have left in VMEM goes through
HBM); elsewhere nothing is pinned, and memory-space assignment keeps its choices.
``tests/mx/test_mxfp4_mosaic.py`` compiles an unpinned cast for v7 too: a libtpu that stops
prefetching it fails that test, the sign that the pin can go.
"""

from __future__ import annotations

import jax
from jax.experimental.pallas import tpu as pltpu

COLORING_GENERATIONS = ("v7",)
"""The generations whose XLA:TPU (libtpu 0.0.52) colors a custom call's operands and results itself."""


def pins(generation: str | None) -> bool:
    """Whether kernels compiled for ``generation`` (``"v7"``; None: not known) pin their arrays to HBM."""
    return generation in COLORING_GENERATIONS


def operands(pin: bool, *arrays) -> list:
    """``arrays`` as a ``pallas_call``'s operands: each constrained to HBM where ``pin``."""
    if not pin:
        return list(arrays)
    return [pltpu.with_memory_space_constraint(a, pltpu.HBM) for a in arrays]


def result(pin: bool, shape: tuple[int, ...], dtype):
    """A ``pallas_call`` ``out_shape`` of ``shape`` and ``dtype``: written to HBM where ``pin``."""
    return pltpu.HBM(tuple(shape), dtype) if pin else jax.ShapeDtypeStruct(tuple(shape), dtype)
