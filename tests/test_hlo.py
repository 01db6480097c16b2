"""xlabridge.hlo: kernel counting of optimized HLO text, and compiling a function to get it."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import requires_xla
from xlabridge import hlo

_CPU_STYLE = """HloModule m, entry_computation_layout={(f32[8]{0})->(f32[8]{0}, u8[2]{0})}

%fused_a (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  ROOT %n = f32[8]{0} negate(%p)
}

%parallel_a (q: f32[8]) -> f32[8] {
  %q = f32[8]{0} parameter(0)
  ROOT %f = f32[8]{0} fusion(%q), kind=kLoop, calls=%fused_a
}

ENTRY %main (x: f32[8]) -> (f32[8], u8[2]) {
  %x = f32[8]{0} parameter(0)
  %c = f32[8]{0} call(%x), to_apply=%parallel_a
  %b = f32[2,4]{1,0} bitcast(%c)
  %s = (f32[2]{0}, u8[2]{0}) custom-call(%b), custom_call_target="__gpu$xla.gpu.triton"
  %g = u8[2]{0} get-tuple-element(%s), index=1
  %y = f32[8]{0} copy(%c)
  ROOT %t = (f32[8]{0}, u8[2]{0}) tuple(%y, %g)
}
"""


def test_parse_kernels_counts_fusions_custom_calls_and_unfused_ops():
    report = hlo.parse_kernels(_CPU_STYLE)
    assert report.kernels == ("fusion/kLoop/f", "custom-call/__gpu$xla.gpu.triton", "copy")
    assert report.count == 3 and "3 kernel(s)" in str(report)


def test_parse_kernels_needs_an_entry():
    with pytest.raises(ValueError, match="no ENTRY"):
        hlo.parse_kernels("HloModule m\n")


@requires_xla
def test_kernel_count_of_one_elementwise_function(xla_device):
    report = hlo.kernel_count(lambda t: torch.sin(t) * 2 + 1, torch.randn(16, 16))
    assert report.count == 1 and report.kernels[0].startswith("fusion/")
    assert "ENTRY" in report.hlo
    with pytest.raises(ValueError, match="at least one tensor"):
        hlo.kernel_count(lambda t: None, torch.randn(4))
