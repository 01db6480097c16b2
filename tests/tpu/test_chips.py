"""The chip table agrees with libtpu, and targets resolve to topologies."""

from __future__ import annotations

import pytest

from tests.tpu.conftest import requires_tpu_compiler
from xlabridge import tpu

SIN = """module @m {
  func.func public @main(%arg0: tensor<8x128xf32>) -> tensor<8x128xf32> {
    %0 = stablehlo.sine %arg0 : tensor<8x128xf32>
    return %0 : tensor<8x128xf32>
  }
}"""


@pytest.mark.parametrize(
    ("target", "name", "chips"),
    [("tpu:v5e", "v5e:2x2", 4), ("tpu:v5e:2x4", "v5e:2x4", 8), ("v6e:2x2", "v6e:2x2", 4),
     ("TPU:V5P", "v5p:2x2x1", 4), ("v4", "v4:2x2x1", 4)],
)
def test_targets_resolve_to_topologies(target, name, chips):
    topology = tpu.resolve_target(target)
    assert topology.name == name and topology.chips == chips
    assert topology.chip is tpu.CHIPS[name.split(":")[0]]


def test_unknown_generation_lists_the_known_ones():
    with pytest.raises(ValueError, match="v4, v5e, v5p, v6e"):
        tpu.chip_facts("v7x")


@requires_tpu_compiler
@pytest.mark.parametrize("generation", sorted(tpu.CHIPS))
def test_chip_table_matches_libtpu(compiler, generation):
    """Each generation's default topology builds, its device kind is libtpu's, and a device's
    HBM is the chip's (half of it where libtpu makes each of a chip's TensorCores a device)."""
    chip = tpu.CHIPS[generation]
    if generation == "v7" and compiler.versions["libtpu"] < "0.0.50":
        pytest.skip(f"libtpu {compiler.versions['libtpu']} builds no TPU7x topology (0.0.50 and later do)")
    result = compiler.compile_stablehlo(SIN, topology=generation)
    assert result.topology == chip.default_topology and result.device_kind == chip.device_kind
    # libtpu 0.0.23's compile-only v4, and TPU7x: one device per TensorCore
    devices_per_chip = 2 if generation in ("v4", "v7") else 1
    assert result.memory.capacity_bytes == chip.hbm_bytes // devices_per_chip
