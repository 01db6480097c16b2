"""Reference compiles for the TPU tests, made without xlabridge: JAX and libtpu directly.

Run as a script in a process of its own (libtpu must not load into the pytest process, which
holds torch_xla's PJRT client): ``python _reference.py JOBS OUT``, both pickle files. Each job
compiles one graph for a topology and returns the executable's compiled memory statistics and
its optimized HloModuleProto (counted by ``_hlo_proto.kernels``). JAX functions go through
JAX's own AOT path (``jit(f).trace(...).lower().compile()``); HLO protos through the
compile-only client, as ``hlo_to_stablehlo`` then ``compile``. A job may also ask for a
GSPMD-sharded HloModuleProto of a JAX function (the form torch_xla's SPMD graphs take).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

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
        options = xc.CompileOptions()
        options.executable_build_options.num_partitions = n
        options.executable_build_options.use_shardy_partitioner = False
        if n > 1:
            options.executable_build_options.use_spmd_partitioning = True
            options.executable_build_options.device_assignment = xc.DeviceAssignment.create(np.arange(n).reshape(1, n))
        executable = devices[0].client.compile(
            xc._xla.mlir.hlo_to_stablehlo(job["proto"]), xc.DeviceList(tuple(devices[:n])), options
        )
        return {"memory": _memory(executable.get_compiled_memory_stats()),
                "proto": executable.hlo_modules()[0].as_serialized_hlo_module_proto()}
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
