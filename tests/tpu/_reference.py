"""Reference compiles for the TPU tests, made without xlabridge: JAX and libtpu directly.

Run as a script in a process of its own (libtpu must not load into the pytest process, which
holds torch_xla's PJRT client): ``python _reference.py JOBS OUT``, both pickle files. Each job
compiles one graph for a topology and returns the executable's compiled memory statistics and
its optimized HloModuleProto (counted by ``_hlo_proto.kernels``). JAX functions go through
JAX's own AOT path (``jit(f).trace(...).lower().compile()``); HLO protos through the
compile-only client, as ``hlo_to_stablehlo`` then ``compile``. A job may also ask for a
GSPMD-sharded HloModuleProto of a JAX function (the form torch_xla's SPMD graphs take).

``hlo_to_stablehlo`` drops a module's buffer donors (``HloModuleProto.buffer_donor``, what
torch_xla marks) but keeps its ``input_output_alias``. A proto job with ``"alias": True`` applies
the donation that way: each output is paired here with the first unpaired donor parameter of the
same element type and dimensions, the pairs are written into the proto as ``input_output_alias``
(may-alias) and the donors removed, and the result holds the pairs (``"aliases"``).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.tpu._hlo_proto import _fields, _varint

ROOT = Path(__file__).resolve().parents[2]


def run(jobs: list[dict[str, Any]], workdir: Path) -> list[dict[str, Any]]:
    """Run ``jobs`` in a fresh process; returns one result dict per job."""
    jobs_path, out_path = workdir / "jobs.pkl", workdir / "out.pkl"
    jobs_path.write_bytes(pickle.dumps(jobs))
    env = dict(
        os.environ, ALLOW_MULTIPLE_LIBTPU_LOAD="1", JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT),
        TPU_ACCELERATOR_TYPE="v5litepod-4", TPU_WORKER_HOSTNAMES="localhost",
    )
    done = subprocess.run([sys.executable, __file__, str(jobs_path), str(out_path)], env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"reference compile failed:\n{done.stderr[-4000:]}")
    return pickle.loads(out_path.read_bytes())


def _memory(stats: Any) -> dict[str, int]:
    return {
        "argument_bytes": stats.argument_size_in_bytes, "output_bytes": stats.output_size_in_bytes,
        "alias_bytes": stats.alias_size_in_bytes, "temp_bytes": stats.temp_size_in_bytes,
        "generated_code_bytes": stats.generated_code_size_in_bytes,
    }


# HloModuleProto.{host_program_shape, input_output_alias, buffer_donor}; ProgramShapeProto.
# {parameters, result}; ShapeProto.{element_type, dimensions, tuple_shapes};
# HloBufferDonorProto.entries, BufferDonorEntryProto.{parameter_number, parameter_shape_index};
# HloInputOutputAliasProto.entries, AliasEntryProto.{output_shape_index, parameter_number, kind}.
_PROGRAM_SHAPE, _ALIAS, _DONORS = 4, 8, 18
_PARAMETERS, _RESULT = 1, 2
_ELEMENT_TYPE, _DIMENSIONS, _TUPLE_SHAPES = 2, 3, 4
_MAY_ALIAS = 1


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _encode(fields: list[tuple[int, int, Any]]) -> bytes:
    out = bytearray()
    for number, wire, value in fields:
        out += _encode_varint(number << 3 | wire)
        if wire == 0:
            out += _encode_varint(value)
        elif wire == 2:
            out += _encode_varint(len(value)) + value
        else:
            out += value
    return bytes(out)


def _array(shape: bytes) -> tuple[int, tuple[int, ...]]:
    """(element type, dimensions) of an array ShapeProto."""
    element, dimensions = 0, []
    for number, wire, value in _fields(shape):
        if number == _ELEMENT_TYPE:
            element = value
        elif number == _DIMENSIONS:
            if wire == 2:
                i = 0
                while i < len(value):
                    item, i = _varint(value, i)
                    dimensions.append(item)
            else:
                dimensions.append(value)
    return element, tuple(dimensions)


def donors_to_aliases(proto: bytes) -> tuple[bytes, list[tuple[int, int]]]:
    """``proto`` with its buffer donors replaced by input_output_alias pairs; the (output, parameter) pairs."""
    fields = list(_fields(proto))
    donors = sorted(
        next((v for n, _, v in _fields(entry) if n == 1), 0)
        for n, _, record in fields if n == _DONORS for _, _, entry in _fields(record)
    )
    program = next(v for n, _, v in fields if n == _PROGRAM_SHAPE)
    parameters = [_array(v) for n, _, v in _fields(program) if n == _PARAMETERS]
    result = next(v for n, _, v in _fields(program) if n == _RESULT)
    outputs = [_array(v) for n, _, v in _fields(result) if n == _TUPLE_SHAPES]
    free, pairs = list(donors), []
    for output, shape in enumerate(outputs):
        donor = next((d for d in free if parameters[d] == shape), None)
        if donor is not None:
            free.remove(donor)
            pairs.append((output, donor))
    entries = [(1, 2, _encode([(1, 2, _encode_varint(output)), (2, 0, parameter), (4, 0, _MAY_ALIAS)]))
               for output, parameter in pairs]
    kept = [field for field in fields if field[0] not in (_ALIAS, _DONORS)]
    return _encode(kept + [(_ALIAS, 2, _encode(entries))]), pairs


def _job(job: dict[str, Any]) -> dict[str, Any]:
    import importlib

    import jax
    import numpy as np
    from jax._src.lib import xla_client as xc
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

    devices = topologies.get_topology_desc(topology_name=job["topology"], platform="tpu").devices
    if job["kind"] == "proto":
        n = job.get("num_partitions", 1)
        proto, aliases = donors_to_aliases(job["proto"]) if job.get("alias") else (job["proto"], [])
        options = xc.CompileOptions()
        options.executable_build_options.num_partitions = n
        options.executable_build_options.use_shardy_partitioner = False
        if n > 1:
            options.executable_build_options.use_spmd_partitioning = True
            options.executable_build_options.device_assignment = xc.DeviceAssignment.create(np.arange(n).reshape(1, n))
        executable = devices[0].client.compile(
            xc._xla.mlir.hlo_to_stablehlo(proto), xc.DeviceList(tuple(devices[:n])), options
        )
        cost = executable.cost_analysis()
        return {"memory": _memory(executable.get_compiled_memory_stats()),
                "proto": executable.hlo_modules()[0].as_serialized_hlo_module_proto(), "aliases": aliases,
                "cost": dict(cost[0] if isinstance(cost, list) else cost)}
    module, _, name = job["fn"].partition(":")
    fn = getattr(importlib.import_module(module), name)
    mesh_axes = job.get("mesh")
    if mesh_axes:
        count = int(np.prod([size for _, size in mesh_axes]))
        mesh = Mesh(np.array(devices[:count]).reshape([s for _, s in mesh_axes]), [a for a, _ in mesh_axes])
        shardings = [NamedSharding(mesh, PartitionSpec(*spec)) for spec in job["in_specs"]]
    else:
        shardings = [SingleDeviceSharding(devices[0])] * len(job["args"])
    args = [jax.ShapeDtypeStruct(shape, jax.numpy.dtype(dtype), sharding=sharding)
            for (shape, dtype), sharding in zip(job["args"], shardings)]
    if job["kind"] == "gspmd-proto":
        shardy = jax.config.jax_use_shardy_partitioner
        jax.config.update("jax_use_shardy_partitioner", False)
        try:
            text = jax.jit(fn).trace(*args).lower(lowering_platforms=("tpu",)).as_text()
        finally:
            jax.config.update("jax_use_shardy_partitioner", shardy)
        return {"proto": xc._xla.mlir.mlir_module_to_xla_computation(text).as_serialized_hlo_module_proto()}
    compiled = jax.jit(fn).trace(*args).lower(lowering_platforms=("tpu",)).compile()
    return {"memory": _memory(compiled.memory_analysis()),
            "proto": compiled.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto(),
            "cost": dict(compiled.cost_analysis())}


if __name__ == "__main__":
    jobs = pickle.loads(Path(sys.argv[1]).read_bytes())
    Path(sys.argv[2]).write_bytes(pickle.dumps([_job(job) for job in jobs]))
