"""Collectives of small, known HLO modules, counted by hand; and of a JAX program, by its proto.

The hand-written modules hold each form the parser must read: explicit and iota replica groups
(with a transpose), async start/done pairs, an ``async-start`` wrapping a collective as
XLA:TPU emits it, a while loop with and without a known trip count, a collective-permute,
metadata with quoted commas and braces. The expected figures are worked out from the text by
hand in each test.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pod import _proto_reference
from xlabridge.pod._hlo_proto import instruction_stacks
from xlabridge import _optional
from xlabridge.diagnostics._build.collective_causes import classify_collective
from xlabridge.pod import (
    CollectiveKind,
    PartitionedGraph,
    analyze,
    find_collectives,
    totals,
)

REPO = Path(__file__).resolve().parents[2]

MODULE = """HloModule step, is_scheduled=true, num_partitions=4

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(%x, %y)
}

%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %v = f32[8]{0} get-tuple-element(%p), index=1
  %ar = f32[8]{0} all-reduce(%v), channel_id=7, replica_groups=[2,2]<=[2,2]T(1,0), use_global_device_ids=true, to_apply=%add
  ROOT %t = (s32[], f32[8]{0}) tuple(%i, %ar)
}

%cond (p: (s32[], f32[8])) -> pred[] {
  %p = (s32[], f32[8]{0}) parameter(0)
  ROOT %c = pred[] constant(true)
}

%wrapped_reduce_scatter (a: bf16[16,4]) -> bf16[4,4] {
  %a = bf16[16,4]{1,0} parameter(0)
  ROOT %rs = bf16[4,4]{1,0} reduce-scatter(%a), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=%add
}

ENTRY %main (w: f32[2,16], b: bf16[16,4], v: f32[8]) -> (f32[8,16], bf16[4,4], (s32[], f32[8]), f32[8]) {
  %w = f32[2,16]{1,0} parameter(0), sharding={devices=[4,1]0,1,2,3}, metadata={op_type="xla__device_data" op_name="w"}
  %b = bf16[16,4]{1,0} parameter(1), sharding={replicated}
  %v = f32[8]{0} parameter(2), sharding={replicated}
  %ags = (f32[2,16]{1,0}, f32[8,16]{1,0}) all-gather-start(%w), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, metadata={op_type="aten__mm" op_name="model/mm" source_file="/home/u/train, v2/{model}.py" source_line=42}
  %agd = f32[8,16]{1,0} all-gather-done(%ags)
  %rss = ((bf16[16,4]{1,0}), bf16[4,4]{1,0}) async-start(%b), calls=%wrapped_reduce_scatter
  %rsd = bf16[4,4]{1,0} async-done(%rss)
  %zero = s32[] constant(0)
  %init = (s32[], f32[8]{0}) tuple(%zero, %v)
  %loop = (s32[], f32[8]{0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  %loop2 = (s32[], f32[8]{0}) while(%init), condition=%cond, body=%body
  %cp = f32[8]{0} collective-permute(%v), channel_id=9, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  ROOT %out = (f32[8,16]{1,0}, bf16[4,4]{1,0}, (s32[], f32[8]{0}), f32[8]{0}) tuple(%agd, %rsd, %loop, %cp)
}
"""


def test_each_form_is_read_once_with_its_bytes_groups_and_executions():
    found = {(c.kind, c.name): c for c in find_collectives(MODULE)}
    assert len(found) == 4  # the async halves, the wrapper and the loop body's twin call collapse
    gather = found[(CollectiveKind.ALL_GATHER, "ags")]
    # all-gather: the gathered result, 8*16 f32 = 512 bytes; the -done's shape, not the tuple's.
    assert (gather.bytes, gather.shape, gather.is_async, gather.executions) == (512, "f32[8,16]{1,0}", True, 1)
    assert gather.replica_groups == ((0, 1, 2, 3),) and gather.channel_id == 1
    assert gather.operand_origin == "parameter"
    assert (gather.source.file, gather.source.line, gather.source.op_name) == ("/home/u/train, v2/{model}.py", 42, "model/mm")
    scatter = found[(CollectiveKind.REDUCE_SCATTER, "rss")]
    # reduce-scatter: the operand, 16*4 bf16 = 128 bytes; counted at the async-start, in the entry.
    assert (scatter.bytes, scatter.is_async, scatter.computation, scatter.channel_id) == (128, True, "main", 3)
    permute = found[(CollectiveKind.COLLECTIVE_PERMUTE, "cp")]
    assert permute.source_target_pairs == ((0, 1), (1, 2), (2, 3), (3, 0)) and permute.bytes == 32
    reduce = found[(CollectiveKind.ALL_REDUCE, "ar")]
    # [2,2]<=[2,2]T(1,0): iota(4) as 2x2, transposed: groups {0,2} and {1,3}.
    assert reduce.replica_groups == ((0, 2), (1, 3)) and reduce.group_size == 2


def test_loops_multiply_by_their_known_trip_count_and_say_when_it_is_unknown():
    reduces = [c for c in find_collectives(MODULE) if c.kind is CollectiveKind.ALL_REDUCE]
    assert sorted((c.executions is None, c.executions) for c in reduces) == [(False, 3), (True, None)]
    summed = totals(find_collectives(MODULE))[CollectiveKind.ALL_REDUCE]
    # 3 trips of 32 bytes, plus the unknown loop counted once.
    assert (summed.count, summed.bytes, summed.unknown_executions) == (4, 128, 1)


def test_known_causes():
    graph = analyze(MODULE)
    gather = next(c for c in graph.collectives if c.kind is CollectiveKind.ALL_GATHER)
    assert classify_collective(gather, graph).category == "input-all-gather"
    reduce = next(c for c in graph.collectives if c.kind is CollectiveKind.ALL_REDUCE)
    # f32[8], the shape of the replicated input v, in a graph that shards w.
    assert classify_collective(reduce, graph).category == "replicated-weight-gradient"
    assert [p.sharding for p in graph.parameters] == ["{devices=[4,1]0,1,2,3}", "{replicated}", "{replicated}"]


def test_a_graph_round_trips_through_json():
    graph = analyze(MODULE)
    assert PartitionedGraph.from_dict(json.loads(json.dumps(graph.to_dict()))) == graph


def test_text_without_an_entry_computation_is_refused():
    with pytest.raises(ValueError, match="ENTRY"):
        find_collectives("HloModule empty\n")


_JAX_PROGRAM = r"""
import base64, json
from functools import partial
import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(jax.devices()[:4], ("x",))

@partial(jax.shard_map, mesh=mesh, in_specs=P("x"), out_specs=P(), check_vma=False)
def smooth(h):
    return jax.lax.fori_loop(0, 5, lambda i, h: jax.lax.psum(jnp.tanh(h), "x") / 4.0, h)

def step(w, x):
    h = jnp.tanh(x @ w)
    return smooth(h).sum(), (w * 2.0)

w = jax.device_put(jnp.ones((64, 64)), NamedSharding(mesh, P("x", None)))
x = jax.device_put(jnp.ones((32, 64)), NamedSharding(mesh, P("x", None)))
compiled = jax.jit(step, out_shardings=(NamedSharding(mesh, P()), NamedSharding(mesh, P(None, "x")))).lower(w, x).compile()
module = compiled.runtime_executable().hlo_modules()[0]
print(json.dumps({"text": compiled.as_text(), "proto": base64.b64encode(module.as_serialized_hlo_module_proto()).decode()}))
"""


@pytest.mark.skipif(not _optional.is_available("jax"), reason="needs jax")
def test_a_jax_program_matches_a_count_from_its_proto(tmp_path):
    program = tmp_path / "jax_program.py"
    program.write_text(_JAX_PROGRAM)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, str(program)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    compiled = json.loads(done.stdout.strip().splitlines()[-1])
    ours = find_collectives(compiled["text"])
    reference = _proto_reference.collectives(base64.b64decode(compiled["proto"]))
    assert ours
    assert sorted((c.kind.value, c.bytes, c.replica_groups, c.channel_id, c.executions) for c in ours) == sorted(
        (c["kind"], c["bytes"], c["groups"], c["channel_id"], c["executions"]) for c in reference
    )
    # The psum in the loop runs once per trip (XLA knows the fori_loop's 5), and JAX records the
    # user's own line in the metadata.
    psum = next(i for i, line in enumerate(_JAX_PROGRAM.splitlines(), 1) if "psum" in line)
    # Newer XLA (jax 0.11) keeps the line only in the proto's stack-frame index, not in the text.
    stacks = instruction_stacks(base64.b64decode(compiled["proto"]))
    ours = find_collectives(compiled["text"], stacks=stacks)
    looped = [c for c in ours if c.kind is CollectiveKind.ALL_REDUCE and c.executions == 5]
    assert looped
    for collective in looped:
        frame = collective.user_frame(lambda filename: filename == str(program))
        assert frame is not None and (frame.filename, frame.lineno) == (str(program), psum)
