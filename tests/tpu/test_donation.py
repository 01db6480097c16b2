"""torch_xla's buffer donation reaches XLA:TPU: what a step replaces is aliased, not counted twice.

torch_xla marks the parameters and optimizer state a synced step replaces as buffer donors of the
step's graph; ``hlo_to_stablehlo`` drops them, so ``xlabridge.tpu`` carries them over. Checked
against a reference compile made without xlabridge (``_reference.py``) that applies the donation
another way, as ``input_output_alias`` pairs written into the proto, and against the bytes of the
donated tensors themselves.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tpu import _hlo_proto, _reference
from tests.tpu.conftest import requires_tpu_compiler
from xlabridge import _optional

pytestmark = requires_tpu_compiler

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = "v5e:2x2"
# ``input_output_alias={ {1}: (4, {}, may-alias), ...}`` in the optimized HLO's module line.
_ALIAS = re.compile(r"\{(\d+)\}: \((\d+), \{\}, (?:may|must)-alias\)")


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    """The modules torch_xla handed XLA for a donating training step and for inference."""
    if not _optional.is_available("torch_xla"):
        pytest.skip("needs torch_xla (pip install 'xlabridge[xla]')")
    work = tmp_path_factory.mktemp("donation")
    dump, out = work / "dump", work / "out.json"
    env = {**os.environ, "PJRT_DEVICE": "CPU", "PYTHONPATH": str(ROOT),
           "XLA_FLAGS": f"--xla_dump_to={dump} --xla_dump_hlo_as_proto"}
    env.pop("XLA_ENABLE_PARAM_ALIASING", None)  # torch_xla's default: on
    done = subprocess.run([sys.executable, str(ROOT / "tests/tpu/_donating_step.py"), str(dump), str(out)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    names = json.loads(out.read_text())
    # XLA dumps an HloProto; compilers take the HloModuleProto it holds.
    return {"step": _hlo_proto.hlo_module((dump / names["step"]).read_bytes()),
            "inference": _hlo_proto.hlo_module((dump / names["inference"]).read_bytes()),
            "donated_bytes": names["donated_bytes"]}


@pytest.fixture(scope="module")
def reference(dumped, tmp_path_factory):
    jobs = {(graph, alias): {"kind": "proto", "proto": dumped[graph], "topology": TOPOLOGY, "alias": alias}
            for graph in ("step", "inference") for alias in (False, True)}
    return dict(zip(jobs, _reference.run(list(jobs.values()), tmp_path_factory.mktemp("reference"))))


def _memory(result) -> dict[str, int]:
    m = result.memory
    return {"argument_bytes": m.argument_bytes, "output_bytes": m.output_bytes, "alias_bytes": m.alias_bytes,
            "temp_bytes": m.temp_bytes, "generated_code_bytes": m.generated_code_bytes}


def _aliases(hlo: str) -> list[tuple[int, int]]:
    header = hlo[hlo.index("HloModule"):].splitlines()[0]
    return sorted((int(output), int(parameter)) for output, parameter in _ALIAS.findall(header))


def test_a_training_step_aliases_the_state_torch_xla_donates(compiler, dumped, reference):
    result = compiler.compile_hlo_proto(dumped["step"], name="donating_step")
    expected = reference[("step", True)]
    assert _memory(result) == expected["memory"]
    # Every parameter and momentum buffer: 2 x (128x256 + 256 + 256x256 + 256) floats.
    assert result.memory.alias_bytes == dumped["donated_bytes"] == 2 * 98816 * 4
    assert _aliases(result.hlo) == sorted(expected["aliases"]) and len(expected["aliases"]) == 8
    # Without the donors (what the view compiled before): the donated state counted twice.
    before = reference[("step", False)]["memory"]
    assert before["alias_bytes"] == 0
    assert (before["argument_bytes"], before["output_bytes"]) == (expected["memory"]["argument_bytes"],
                                                                  expected["memory"]["output_bytes"])
    assert result.memory.total_bytes < sum(before.values())


def test_a_graph_that_replaces_nothing_compiles_as_before(compiler, dumped, reference):
    result = compiler.compile_hlo_proto(dumped["inference"], name="inference")
    assert reference[("inference", True)]["aliases"] == []
    assert _memory(result) == reference[("inference", False)]["memory"]
    assert result.memory.alias_bytes == 0 and _aliases(result.hlo) == []


def test_donors_inside_a_tuple_parameter_are_placed_on_the_flattened_argument(compiler):
    """torch_xla wraps a graph's parameters in one tuple past 3200 of them; its donors are then
    ``(0, {i})``, and ``hlo_to_stablehlo`` makes each tuple element an argument of its own."""
    from jax._src.lib import xla_client

    text = """HloModule wrapped, buffer_donor={ (0, {1}) }
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT z = f32[] add(x, y)
}

ENTRY main {
  p = (f32[8,128], f32[1024,128]) parameter(0)
  a = f32[8,128] get-tuple-element(p), index=0
  b = f32[1024,128] get-tuple-element(p), index=1
  zero = f32[] constant(0)
  r = f32[128] reduce(a, zero), dimensions={0}, to_apply=add
  rows = f32[1024,128] broadcast(r), dimensions={1}
  ROOT sum = f32[1024,128] add(b, rows)
}"""
    proto = xla_client._xla.hlo_module_from_text(text).as_serialized_hlo_module_proto()
    result = compiler.compile_hlo_proto(proto, name="wrapped")
    # Only the second element has the output's size: placed on the first, nothing would alias.
    assert result.memory.alias_bytes == result.memory.output_bytes == 1024 * 128 * 4
