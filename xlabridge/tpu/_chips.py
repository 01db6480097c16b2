"""Facts about each TPU generation xlabridge compiles for: the one table of them.

HBM capacity and bandwidth per chip are Google Cloud's published figures (the TPU v4, v5e,
v5p, v6e and Ironwood (v7) pages of cloud.google.com/tpu/docs). VMEM is per TensorCore, from JAX's Pallas
table of TPU hardware (``jax/_src/pallas/mosaic/tpu_info.py`` in jax releases after 0.7.1).
``device_kind`` is what libtpu calls the generation; ``default_topology`` is the smallest
topology libtpu's compile-only client accepts for it (a single chip, ``v5e:1x1``, is refused:
libtpu wants whole hosts of 2x2x1 chips), used for targets such as ``"tpu:v5e"``.
"""

from __future__ import annotations

import dataclasses

__all__ = ["CHIPS", "ChipFacts", "chip_facts"]

GiB = 1 << 30
MiB = 1 << 20


@dataclasses.dataclass(frozen=True)
class ChipFacts:
    """One TPU generation."""

    generation: str
    """The short name used in topology names (``v5e``)."""
    device_kind: str
    """libtpu's ``device_kind`` for it (``TPU v5 lite``)."""
    hbm_bytes: int
    """HBM per chip."""
    hbm_bandwidth_bytes_per_s: float
    """HBM bandwidth per chip."""
    vmem_bytes: int
    """VMEM per TensorCore."""
    tensorcores_per_chip: int
    default_topology: str


CHIPS: dict[str, ChipFacts] = {
    chip.generation: chip
    for chip in (
        ChipFacts("v4", "TPU v4", 32 * GiB, 1228e9, 16 * MiB, 2, "v4:2x2x1"),
        ChipFacts("v5e", "TPU v5 lite", 16 * GiB, 819e9, 128 * MiB, 1, "v5e:2x2"),
        ChipFacts("v5p", "TPU v5", 95 * GiB, 2765e9, 64 * MiB, 2, "v5p:2x2x1"),
        ChipFacts("v6e", "TPU v6 lite", 32 * GiB, 1640e9, 128 * MiB, 1, "v6e:2x2"),
        # Ironwood: libtpu names it TPU7x (topologies "tpu7x:2x2x1"; libtpu >= 0.0.50, the
        # TorchTPU environment's, builds them; 0.0.23 does not), one device per TensorCore.
        ChipFacts("v7", "TPU7x", 192 * GiB, 7370e9, 64 * MiB, 2, "v7:2x2x1"),
    )
}


def chip_facts(generation: str) -> ChipFacts:
    """The facts of ``generation`` (``"v5e"``), or a ``ValueError`` naming the known ones."""
    try:
        return CHIPS[generation]
    except KeyError:
        raise ValueError(
            f"unknown TPU generation {generation!r}: xlabridge knows {', '.join(CHIPS)}"
        ) from None
