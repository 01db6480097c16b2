"""xlabridge.tpu compiles torch_xla graphs and JAX functions for TPU topologies with libtpu.

Every figure is checked against a reference compile made without xlabridge in a process of its
own (``_reference.py``: JAX's AOT path, or the compile-only client directly): kernel names
against a walk of the optimized HloModuleProto (``_hlo_proto.py``), HBM figures against the
executable's compiled memory statistics; per-device shard sizes against arithmetic.
"""

from __future__ import annotations

import collections
import functools
import json
from importlib import metadata

import pytest
from packaging.version import Version

from tests.tpu import _hlo_proto, _reference
from tests.tpu.conftest import requires_tpu_compiler
from xlabridge import _optional

pytestmark = requires_tpu_compiler

jax = pytest.importorskip("jax")
jnp = jax.numpy

FUNCTIONS = "tests.tpu._functions"
MLP_ARGS = [((16, 64), "float32"), ((64, 128), "float32"), ((128, 8), "float32")]
# a: rows sharded over 4 devices; w: replicated.
SHARDED_ARGS = [((1024, 512), "float32"), ((512, 256), "float32")]
SHARDED_SPECS = [("x", None), (None, None)]
SHARDED_ARGUMENT_BYTES = (1024 // 4) * 512 * 4 + 512 * 256 * 4
BIG = [((65536, 32768), "float32")] * 2  # 8 GiB each: two inputs and the sum need 24 GiB
PALLAS_COMPILES = _optional.is_available("libtpu") and Version(metadata.version("libtpu")) >= Version("0.0.23")


def _specs(args):
    return [jax.ShapeDtypeStruct(shape, jnp.dtype(dtype)) for shape, dtype in args]


def _torch_training_step_proto() -> bytes:
    """The lazy graph of one SGD step of a small MLP (forward, backward, update), unrun."""
    import torch
    import torch_xla

    device = torch_xla.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 64).to(device), torch.randint(0, 10, (32,)).to(device)
    torch_xla.sync()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return torch_xla._XLAC._get_xla_tensors_hlo_proto([loss, *model.parameters()])


@pytest.fixture(scope="module")
def step_proto():
    if not _optional.is_available("torch_xla"):
        pytest.skip("needs torch_xla (pip install 'xlabridge[xla]')")
    return _torch_training_step_proto()


@pytest.fixture(scope="module")
def reference(step_proto, tmp_path_factory):
    jobs = {
        **{("step", t): {"kind": "proto", "proto": step_proto, "topology": t} for t in ("v5e:2x2", "v6e:2x2")},
        **{("mlp", t): {"kind": "jax", "fn": f"{FUNCTIONS}:mlp", "args": MLP_ARGS, "topology": t}
           for t in ("v5e:2x2", "v6e:2x2")},
        ("sharded", "v5e:2x2"): {"kind": "jax", "fn": f"{FUNCTIONS}:sharded_matmul", "args": SHARDED_ARGS,
                                 "mesh": [("x", 4)], "in_specs": SHARDED_SPECS, "topology": "v5e:2x2"},
        ("gspmd", "v5e:2x2"): {"kind": "gspmd-proto", "fn": f"{FUNCTIONS}:sharded_matmul", "args": SHARDED_ARGS,
                               "mesh": [("x", 4)], "in_specs": SHARDED_SPECS, "topology": "v5e:2x2"},
    }
    if PALLAS_COMPILES:
        jobs[("pallas", "v5e:2x2")] = {"kind": "jax", "fn": f"{FUNCTIONS}:pallas_double",
                                       "args": [((64, 128), "float32")], "topology": "v5e:2x2"}
    results = _reference.run(list(jobs.values()), tmp_path_factory.mktemp("reference"))
    return dict(zip(jobs, results))


def _assert_matches_reference(result, expected):
    assert collections.Counter(result.kernels) == collections.Counter(_hlo_proto.kernels(expected["proto"]))
    memory = result.memory
    assert {
        "argument_bytes": memory.argument_bytes, "output_bytes": memory.output_bytes,
        "alias_bytes": memory.alias_bytes, "temp_bytes": memory.temp_bytes,
        "generated_code_bytes": memory.generated_code_bytes,
    } == expected["memory"]


@pytest.mark.parametrize("topology", ["v5e:2x2", "v6e:2x2"])
def test_torch_training_step_compiles(compiler, step_proto, reference, topology):
    result = compiler.compile_hlo_proto(step_proto, topology=topology, name="mlp_step")
    _assert_matches_reference(result, reference[("step", topology)])
    generation = topology.split(":")[0]
    assert result.generation == generation and result.topology == topology
    assert result.devices == 1 and result.chips == 1 and result.fits
    assert any(k.startswith("fusion/") for k in result.kernels) and "ENTRY" in result.hlo
    assert result.compile_seconds > 0
    assert result.label == f"compiled for TPU {generation} ({topology}, 1 chip) by libtpu {result.libtpu_version}, not run"


@pytest.mark.parametrize("topology", ["v5e:2x2", "v6e:2x2"])
def test_jax_function_compiles(compiler, reference, topology):
    result = compiler.compile_jax(f"{FUNCTIONS}:mlp", *_specs(MLP_ARGS), topology=topology)
    expected = reference[("mlp", topology)]
    _assert_matches_reference(result, expected)
    assert result.name == "mlp"
    assert result.flops == expected["cost"]["flops"]
    assert result.bytes_accessed == expected["cost"]["bytes accessed"]


def test_cost_model_time_is_the_same_for_every_generation(compiler):
    """libtpu 0.0.23's optimal_seconds does not depend on the chip (see result.COST_MODEL_NOTE).

    If a libtpu release makes it chip-specific, this fails and the note must change."""
    from tests.tpu import _functions

    specs = _specs(MLP_ARGS)
    v5e = compiler.compile_jax(_functions.mlp, *specs, topology="v5e:2x2")
    v6e = compiler.compile_jax(_functions.mlp, *specs, topology="v6e:2x2")
    assert v5e.cost_model_seconds is not None and v5e.cost_model_seconds > 0
    assert v5e.cost_model_seconds == v6e.cost_model_seconds
    # The HBM floor does use each chip's bandwidth.
    assert v5e.hbm_seconds == pytest.approx(v5e.bytes_accessed / 819e9)
    assert v6e.hbm_seconds == pytest.approx(v6e.bytes_accessed / 1640e9)


@pytest.mark.skipif(not PALLAS_COMPILES, reason="libtpu < 0.0.23 refuses jax 0.7.1's Pallas TPU kernels in "
                    "compile-only mode (torch_xla[tpu] 2.9 pins 0.0.21)")
def test_pallas_tpu_kernel_compiles(compiler, reference):
    result = compiler.compile_jax(f"{FUNCTIONS}:pallas_double", jax.ShapeDtypeStruct((64, 128), jnp.float32))
    _assert_matches_reference(result, reference[("pallas", "v5e:2x2")])
    assert result.kernels == ("custom-call/tpu_custom_call",)


def test_multi_chip_jax_function_gives_per_device_figures(compiler, reference):
    from tests.tpu import _functions

    result = compiler.compile_jax(
        _functions.sharded_matmul, *_specs(SHARDED_ARGS), mesh={"x": 4}, in_specs=SHARDED_SPECS
    )
    _assert_matches_reference(result, reference[("sharded", "v5e:2x2")])
    assert result.devices == 4 and result.chips == 4
    assert result.memory.argument_bytes == SHARDED_ARGUMENT_BYTES
    assert result.memory.output_bytes == 256 * 4
    assert "all-reduce" in result.hlo
    assert result.label.endswith(f"(v5e:2x2, 4 chips) by libtpu {result.libtpu_version}, not run")


def test_multi_chip_hlo_proto_with_gspmd_shardings(compiler, reference):
    """torch_xla's SPMD graphs are HLO protos with GSPMD shardings: partitioned as such."""
    result = compiler.compile_hlo_proto(reference[("gspmd", "v5e:2x2")]["proto"], num_partitions=4)
    assert result.devices == 4
    assert result.memory.argument_bytes == SHARDED_ARGUMENT_BYTES
    assert "all-reduce" in result.hlo


def test_graph_too_large_for_v5e_fits_v5p(compiler):
    specs = _specs(BIG)
    v5e = compiler.compile_jax(f"{FUNCTIONS}:add", *specs)
    assert not v5e.fits and v5e.memory is None and v5e.kernels == ()
    assert "Ran out of memory in memory space hbm" in v5e.out_of_memory
    v5p = compiler.compile_jax(f"{FUNCTIONS}:add", *specs, topology="v5p:2x2x1")
    assert v5p.fits and v5p.out_of_memory is None
    assert v5p.memory.argument_bytes == 2 * 8 * 2**30 and v5p.memory.output_bytes == 8 * 2**30
    assert v5p.memory.capacity_bytes == 95 * 2**30 and v5p.memory.total_bytes > 16 * 2**30


def test_static_arguments_through_functools_partial(compiler):
    from tests.tpu import _functions

    result = compiler.compile_jax(functools.partial(_functions.scale_rows, factor=3.0), jax.ShapeDtypeStruct((8, 128), jnp.float32))
    assert result.name == "scale_rows" and result.kernel_count >= 1


def test_result_round_trips_through_json(compiler, step_proto):
    from xlabridge.tpu import TpuCompileResult

    result = compiler.compile_hlo_proto(step_proto)
    data = json.loads(json.dumps(result.to_dict()))
    assert TpuCompileResult.from_dict(data) == result
    assert data["kernel_count"] == result.kernel_count and data["label"] == result.label
    assert data["memory"]["total_bytes"] == result.memory.total_bytes
