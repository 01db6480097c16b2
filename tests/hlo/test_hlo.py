"""xlabridge.hlo: kernel counting of optimized HLO text, and compiling a function to get it
(for the local XLA device, or for a TPU with libtpu)."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import requires_xla
from tests.tpu.conftest import requires_tpu_compiler
from xlabridge import hlo
from xlabridge.errors import UnknownTopologyError

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


_TPU_STYLE = """HloModule m, is_scheduled=true

%fused (p: f32[8,128]) -> f32[8,128] {
  %p = f32[8,128]{1,0:T(8,128)} parameter(0)
  ROOT %n = f32[8,128]{1,0:T(8,128)} negate(%p)
}

ENTRY %main (x: f32[8,128]) -> (f32[8,128], f32[]) {
  %x = f32[8,128]{1,0:T(8,128)} parameter(0)
  %cs = (f32[8,128]{1,0:T(8,128)S(1)}, f32[8,128]{1,0:T(8,128)}, u32[]{:S(2)}) copy-start(%x)
  %cd = f32[8,128]{1,0:T(8,128)S(1)} copy-done(%cs)
  %f = f32[8,128]{1,0:T(8,128)} fusion(%cd), kind=kLoop, calls=%fused
  %ars = f32[] all-reduce-start(%x), replica_groups={}, to_apply=%fused
  %ard = f32[] all-reduce-done(%ars)
  ROOT %t = (f32[8,128]{1,0:T(8,128)}, f32[]) tuple(%f, %ard)
}
"""


def test_parse_kernels_counts_an_async_pair_once():
    report = hlo.parse_kernels(_TPU_STYLE)
    assert report.kernels == ("copy-start", "fusion/kLoop/f", "all-reduce-start")


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


@requires_xla
@requires_tpu_compiler
def test_kernel_count_for_a_tpu_target(xla_device, tmp_path):
    """The TPU count equals a walk of the optimized HLO proto of an independent libtpu compile
    of the same traced graph."""
    import collections

    import torch_xla

    from tests.tpu import _hlo_proto, _reference

    def fn(t):
        return torch.softmax(t @ t.T, dim=-1).sum(0)

    x = torch.randn(64, 128)
    report = hlo.kernel_count(fn, x, target="tpu:v5e")
    assert report.tpu is not None and report.tpu.topology == "v5e:2x2"
    assert report.count == report.tpu.kernel_count and report.hlo == report.tpu.hlo
    assert report.tpu.label.startswith("compiled for TPU v5e (v5e:2x2, 1 chip) by libtpu ")

    torch_xla.sync()
    proto = torch_xla._XLAC._get_xla_tensors_hlo_proto([fn(x.to(xla_device))])
    [expected] = _reference.run([{"kind": "proto", "proto": proto, "topology": "v5e:2x2"}], tmp_path)
    assert collections.Counter(report.kernels) == collections.Counter(_hlo_proto.kernels(expected["proto"]))
    with pytest.raises(UnknownTopologyError, match="unknown TPU target 'tpu:v9'"):
        hlo.kernel_count(fn, x, target="tpu:v9")
