"""The pod view: sharded torch_xla graphs compiled for v5e:2x4 (8 chips) and v5e:4x4 (16 chips).

A tracing worker per mesh size (8 and 16 PJRT CPU devices; nothing is compiled or run there)
hands over each graph's pre-partition HLO proto; libtpu compiles it through ``xlabridge.tpu``
(compile-only, in its worker). The collectives are checked against a count of the TPU HLO text
made by plain line matching (a different reading than ``xlabridge.pod``'s parser), and a graph
too large for a v5e chip must come back as not fitting, not as an error.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import requires_xla
from xlabridge import _optional
from xlabridge.pod import compile_for_pod

pytestmark = [
    requires_xla,
    pytest.mark.skipif(
        not (_optional.is_available("jax") and _optional.is_available("libtpu")),
        reason="needs jax and libtpu (pip install 'xlabridge[tpu-compile]')",
    ),
]

REPO = Path(__file__).resolve().parents[2]
TOPOLOGIES = {8: "v5e:2x4", 16: "v5e:4x4"}
SCENARIOS = ("mlp", "mlp_fixed", "gpt2")
_LINE = re.compile(r"^\s*(?:ROOT\s+)?%\S+\s*=\s*(?P<shape>.*?)\s(?P<op>all-gather|all-reduce|reduce-scatter|all-to-all"
                   r"|collective-permute|collective-broadcast)(?P<half>-done)?\(")
_ARRAY = re.compile(r"\b(f32|bf16|s32|f16|s64|u32|pred)\[([\d,]*)\]")
_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "s64": 8, "pred": 1}


@pytest.fixture(scope="module")
def pod(tmp_path_factory):
    out = tmp_path_factory.mktemp("traced")
    processes = {}
    for devices in TOPOLOGIES:
        env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(devices), XLA_HLO_DEBUG="1")
        processes[devices] = subprocess.Popen(
            [sys.executable, "-m", "tests.pod._trace_worker", str(out / str(devices)), *SCENARIOS],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
    for process in processes.values():
        _, err = process.communicate(timeout=600)
        assert process.returncode == 0, err[-4000:]
    from xlabridge.tpu import TpuCompiler

    with TpuCompiler("tpu:v5e:2x4") as compiler:
        return {
            devices: {
                graph.name: graph
                for graph in compile_for_pod(
                    {s: (out / str(devices) / f"{s}.pb").read_bytes() for s in SCENARIOS},
                    topology, num_partitions=devices, compiler=compiler,
                )
            }
            for devices, topology in TOPOLOGIES.items()
        }


def _text_count(hlo: str) -> Counter:
    """Count and bytes per kind by matching lines: synchronous collectives by their own line,
    asynchronous ones by their ``-done`` line (which has the result's shape)."""
    counts: Counter = Counter()
    for line in hlo.splitlines():
        match = _LINE.match(line)
        if match:
            kind = match.group("op")
            counts[(kind, "count")] += 1
            counts[(kind, "bytes")] += sum(_BYTES[t] * math.prod(int(d) for d in dims.split(",") if d)
                                           for t, dims in _ARRAY.findall(match.group("shape")))
    return counts


@pytest.mark.parametrize("devices", sorted(TOPOLOGIES))
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_collectives_as_xla_tpu_schedules_them(pod, devices, scenario):
    graph = pod[devices][scenario]
    assert graph.fits
    assert graph.label.startswith(f"compiled for TPU v5e ({TOPOLOGIES[devices]}, {devices} chips) by libtpu ")
    # The line count reads each collective from one line: no reduce-scatter (whose bytes are its
    # operand's) and no async wrapper computation may occur for it to be complete.
    assert not re.search(r" (reduce-scatter(-start)?|async-start)\(", graph.result.hlo)
    ours: Counter = Counter()
    for kind, total in graph.graph.totals().items():
        ours[(kind.value, "count")] += total.count
        ours[(kind.value, "bytes")] += total.bytes
    assert ours == _text_count(graph.result.hlo)
    assert sum(v for (kind, what), v in ours.items() if what == "count") > 0


@pytest.mark.parametrize("devices", sorted(TOPOLOGIES))
def test_per_chip_hbm_and_the_planted_sharding_on_tpu(pod, devices):
    planted, fixed = pod[devices]["mlp"], pod[devices]["mlp_fixed"]
    for graph in (planted, fixed):
        assert 0 < graph.result.memory.total_bytes <= graph.result.memory.capacity_bytes
        assert graph.result.memory.capacity_bytes == 16 * 2**30
    per_step = {name: sum(t.bytes for t in g.graph.totals().values()) for name, g in (("planted", planted), ("fixed", fixed))}
    assert per_step["planted"] > per_step["fixed"]


def test_more_chips_hold_less_of_gpt2_each(pod):
    assert pod[16]["gpt2"].result.memory.argument_bytes < pod[8]["gpt2"].result.memory.argument_bytes


def test_a_step_too_large_for_a_chip_is_reported_not_raised():
    from jax._src.lib import xla_client

    # A replicated 16 GiB input beside an 8-way sharded one: each v5e device (16 GiB) must hold all
    # of the first, whatever sharding XLA propagates to the output (as torch_xla lets it).
    text = """HloModule too_big, entry_computation_layout={(f32[65536,65536]{1,0}, f32[65536,65536]{1,0})->f32[65536,65536]{1,0}}

ENTRY main {
  a = f32[65536,65536]{1,0} parameter(0), sharding={replicated}
  b = f32[65536,65536]{1,0} parameter(1), sharding={devices=[8,1]<=[8]}
  ROOT c = f32[65536,65536]{1,0} add(a, b)
}
"""
    proto = xla_client._xla.hlo_module_from_text(text).as_serialized_hlo_module_proto()
    [graph] = compile_for_pod({"too_big": proto}, "v5e:2x4", num_partitions=8)
    assert not graph.fits
    # XLA:TPU either refuses it for HBM (its message kept) or compiles it past the chip's capacity.
    memory = graph.result.memory
    assert graph.result.out_of_memory or memory.total_bytes > memory.capacity_bytes
