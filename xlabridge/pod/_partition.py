"""Partition a torch_xla SPMD graph here: its pre-partition HLO compiled for N CPU devices.

In the user's process torch_xla hands over a pending graph as an HLO module proto with the
sharding annotations ``mark_sharding`` left (``torch_xla._XLAC._get_xla_tensors_hlo_proto``);
the partitioned program (with the collectives XLA's SPMD partitioner inserted) exists only
inside torch_xla's compile. ``partition_hlo`` compiles that proto the way torch_xla 2.9 compiles
an SPMD graph (GSPMD, one replica, ``num_partitions`` partitions, output shardings left to
propagation) with jaxlib's XLA:CPU client, in a worker process with ``num_partitions`` host
devices, and returns the optimized module text for ``xlabridge.pod.analyze``.

It costs a process start plus a compile per graph, outside the user's
steps, and needs no environment set before the run. jaxlib's XLA is not torch_xla's build, so
the result is checked against what torch_xla itself ran (``tests/pod``): on the models tested
the collectives are the same. For a TPU topology compile the same proto with ``xlabridge.tpu``
(``num_partitions``), which partitions it as XLA:TPU would.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from xlabridge import _env, _optional
from xlabridge.pod._dump import CompiledModule

__all__ = ["partition_hlo"]


def partition_hlo(protos: Sequence[bytes], num_partitions: int) -> list[CompiledModule]:
    """The partitioned, optimized module of each pre-partition HLO module proto.

    All protos are compiled in one worker process with ``num_partitions`` CPU devices. Each
    result holds the module's text and proto; the proto keeps the Python stacks
    ``XLA_HLO_DEBUG=1`` recorded (they survive the conversion to StableHLO and back).
    """
    if isinstance(protos, (bytes, bytearray)):
        raise TypeError("protos must be a sequence of serialized HLO module protos, not one bytes object: pass [proto]")
    if not isinstance(num_partitions, int) or num_partitions < 1:
        raise ValueError(f"num_partitions must be a positive int (the mesh's device count), got {num_partitions!r}")
    _optional.require("jax", "xlabridge.pod.partition_hlo")
    with tempfile.TemporaryDirectory(prefix="xlabridge-partition-") as workdir:
        paths = []
        for index, proto in enumerate(protos):
            path = Path(workdir, f"graph{index}.pb")
            path.write_bytes(proto)
            paths.append(str(path))
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in (_env.XLA_FLAGS, _env.TPU_ACCELERATOR_TYPE, _env.JAX_PLATFORMS)
        }
        env[_env.XLA_FLAGS] = f"--xla_force_host_platform_device_count={num_partitions}"
        env[_env.JAX_PLATFORMS] = "cpu"
        done = subprocess.run(
            [sys.executable, "-m", "xlabridge.pod._partition", str(num_partitions), *paths],
            env=env, capture_output=True, text=True, check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"partitioning the graphs in a jaxlib worker failed:\n{done.stderr[-4000:]}")
        return [
            CompiledModule(name=module["name"], text=module["text"], proto=base64.b64decode(module["proto"]))
            for module in json.loads(done.stdout.strip().splitlines()[-1])
        ]


def _worker(num_partitions: int, paths: list[str]) -> None:
    """Worker: compile each proto for ``num_partitions`` CPU devices; print the modules as JSON."""
    import jax
    import numpy as np

    from xlabridge._upstream import jax as upstream_jax

    devices = jax.devices("cpu")[:num_partitions]
    client = devices[0].client
    modules = []
    for path in paths:
        module = upstream_jax.hlo_to_stablehlo(Path(path).read_bytes())
        options = upstream_jax.compile_options(
            num_replicas=1,
            num_partitions=num_partitions,
            device_assignment=np.arange(num_partitions).reshape(1, num_partitions),
        )
        # As torch_xla 2.9 compiles SPMD graphs: GSPMD, outputs sharded as propagation decides.
        options.executable_build_options.use_shardy_partitioner = False
        options.executable_build_options.allow_spmd_sharding_propagation_to_output = [True]
        executable = client.compile_and_load(module, upstream_jax.device_list(devices), options)
        optimized = executable.hlo_modules()[0]
        modules.append({
            "name": optimized.name,
            "text": optimized.to_string(),
            "proto": base64.b64encode(optimized.as_serialized_hlo_module_proto()).decode(),
        })
    print(json.dumps(modules))


if __name__ == "__main__":
    _worker(int(sys.argv[1]), sys.argv[2:])
