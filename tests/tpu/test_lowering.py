"""xlabridge.tpu._lowering: the lowering target of an XLA device, and its override while tracing."""

import pytest

from tests.conftest import requires_xla
from xlabridge.tpu._lowering import LoweringTarget, lowering_for, override_lowering


@requires_xla
def test_local_xla_device_takes_the_xla_lowering_unless_overridden(xla_device):
    import torch_xla.runtime as xr

    expected = LoweringTarget.TPU if xr.device_type() == "TPU" else LoweringTarget.XLA
    assert lowering_for(xla_device) is expected
    with override_lowering(LoweringTarget.TPU):
        assert lowering_for(xla_device) is LoweringTarget.TPU
        with override_lowering(LoweringTarget.XLA):
            assert lowering_for(str(xla_device)) is LoweringTarget.XLA
        assert lowering_for(xla_device) is LoweringTarget.TPU
    assert lowering_for(xla_device) is expected


def test_only_xla_devices_and_lowering_targets_are_accepted():
    with pytest.raises(ValueError, match="must be an XLA device, got 'cpu'"):
        lowering_for("cpu")
    with pytest.raises(TypeError, match="must be a LoweringTarget"):
        with override_lowering("tpu"):
            pass


@requires_xla
def test_the_override_carries_the_target_generation(xla_device):
    from xlabridge.tpu._lowering import lowering_generation

    with override_lowering(LoweringTarget.TPU, generation="v6e"):
        assert lowering_generation(xla_device) == "v6e"
        with override_lowering(LoweringTarget.TPU):
            assert lowering_generation(xla_device) is None
        assert lowering_generation(xla_device) == "v6e"
    with pytest.raises(ValueError, match="unknown TPU generation 'v9x'"):
        with override_lowering(LoweringTarget.TPU, generation="v9x"):
            pass


def test_tpu_device_kinds_map_to_generations():
    from xlabridge.tpu._lowering import _generation_of_kind

    assert _generation_of_kind("TPU v5 lite") == "v5e"
    assert _generation_of_kind("TPU v6 lite") == "v6e"
    assert _generation_of_kind("cpu") is None
