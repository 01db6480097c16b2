"""Reference TPU compiles of StableHLO text, made without xlabridge: JAX and libtpu directly.

Run as a script in a process of its own: ``python _reference.py JOBS OUT`` (pickles). Each job
is ``{"topology": name libtpu knows, "text": StableHLO}`` (and ``"partitions": N`` for a Shardy
program over N devices); the result holds the compiled memory statistics and the optimized
HloModuleProto (counted by ``tests.tpu._hlo_proto.kernels``), or libtpu's refusal (``error``).
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
    jobs_path, out_path = workdir / "jobs.pkl", workdir / "out.pkl"
    jobs_path.write_bytes(pickle.dumps(jobs))
    env = dict(os.environ, ALLOW_MULTIPLE_LIBTPU_LOAD="1", JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT),
               TPU_ACCELERATOR_TYPE="v5litepod-4", TPU_WORKER_HOSTNAMES="localhost")
    done = subprocess.run([sys.executable, __file__, str(jobs_path), str(out_path)], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"reference compile failed:\n{done.stderr[-4000:]}")
    return pickle.loads(out_path.read_bytes())


def _job(job: dict[str, Any]) -> dict[str, Any]:
    from jax._src.interpreters import mlir
    from jax._src.lib import xla_client as xc
    from jax._src.lib.mlir import ir
    from jax.experimental import topologies

    devices = topologies.get_topology_desc(topology_name=job["topology"], platform="tpu").devices
    partitions = job.get("partitions", 1)
    options = xc.CompileOptions()
    if partitions > 1:
        import numpy as np

        build = options.executable_build_options
        build.num_partitions = partitions
        build.use_spmd_partitioning = True
        build.use_shardy_partitioner = True
        build.device_assignment = xc.DeviceAssignment.create(np.arange(partitions).reshape(1, partitions))
    try:
        with mlir.make_ir_context():
            executable = devices[0].client.compile(ir.Module.parse(job["text"]),
                                                   xc.DeviceList(tuple(devices[:partitions])), options)
    except Exception as error:  # libtpu refused it: out of HBM, say
        return {"error": str(error)}
    stats = executable.get_compiled_memory_stats()
    return {
        "memory": {"argument_bytes": stats.argument_size_in_bytes, "output_bytes": stats.output_size_in_bytes,
                   "alias_bytes": stats.alias_size_in_bytes, "temp_bytes": stats.temp_size_in_bytes,
                   "generated_code_bytes": stats.generated_code_size_in_bytes},
        "proto": executable.hlo_modules()[0].as_serialized_hlo_module_proto(),
        "device_kind": devices[0].device_kind,
    }


if __name__ == "__main__":
    jobs = pickle.loads(Path(sys.argv[1]).read_bytes())
    Path(sys.argv[2]).write_bytes(pickle.dumps([_job(job) for job in jobs]))
