"""TPU as the compile target: what XLA:TPU makes of a graph, compiled here, nothing run on a TPU.

libtpu (the TPU compiler and runtime, a pip package) opens a *compile-only* client for a TPU
topology on any machine, without TPU hardware. ``xlabridge.tpu`` compiles graphs with it, in a
worker process of its own (libtpu never loads in the calling process), and reports what the
TPU compiler made of each: kernels, HBM per device and whether it fits, compile seconds, the
cost model's figures and the optimized HLO, labelled "compiled for TPU <gen> by libtpu <ver>,
not run", and what to fix for the TPU read from that compiled program (``findings``: padding,
float32 matmuls, inserted copies, HBM, what the cost model cannot cost)::

    from xlabridge import tpu

    with tpu.TpuCompiler("tpu:v5e") as compiler:              # one worker, many compiles
        result = compiler.compile_tensors(loss)               # torch tensors on the XLA device
        result = compiler.compile_hlo_proto(proto)            # an HLO module proto
        result = compiler.compile_jax(fn, jax.ShapeDtypeStruct((8, 128), jnp.float32))
        result = compiler.compile_tensors(y, num_partitions=4)      # SPMD over 4 devices
    print(result.kernel_count, result.memory.total_bytes, result.fits, result.label)
    for finding in tpu.findings(result):                      # costliest by the cost model first
        print(finding.kind.value, finding.cost_model_seconds, finding.message)

    tpu.compile_tensors(loss, "tpu:v6e:2x4")                  # one-shot: a worker of its own

Targets: ``"tpu:v5e"`` (the generation's default topology), ``"tpu:v5e:2x4"``, ``"v6e:2x2"``.
The TPU view of many programs (the diagnostics' view of a run, the pod view, TorchTPU's graphs)
goes through ``compile_rows``: a ``Program`` (an HLO proto or StableHLO, its partition count) in,
a ``TpuRow`` (the result, or why there is none) out. ``CHIPS`` holds each generation's HBM,
bandwidth and VMEM. Errors: ``MissingDependencyError``
(jax or libtpu absent: ``pip install 'xlabridge[tpu-compile]'``), ``UnknownTopologyError``,
``TpuCompileError`` (XLA:TPU refused the graph: its message and where the graph is saved) and
``TpuWorkerError`` (libtpu aborted the worker). A graph too large for the device's HBM is not
an error: its result has ``fits == False`` and XLA's message in ``out_of_memory``.
"""

from xlabridge.errors import TpuCompileError, TpuWorkerError, UnknownTopologyError
from xlabridge.tpu._chips import CHIPS, ChipFacts, chip_facts
from xlabridge.tpu._compiler import (
    DEFAULT_TARGET,
    TpuCompiler,
    check_dependencies,
    compile_hlo_proto,
    compile_jax,
    compile_stablehlo,
    compile_tensors,
)
from xlabridge.tpu._findings import findings
from xlabridge.tpu._result import HbmUsage, TpuCompileResult, TpuFinding, TpuFindingKind
from xlabridge.tpu._topology import KNOWN_TOPOLOGIES, Topology, resolve_target
from xlabridge.tpu._view import Program, ProgramFormat, TpuRow, compile_program, compile_row, compile_rows

__all__ = [
    "CHIPS",
    "DEFAULT_TARGET",
    "KNOWN_TOPOLOGIES",
    "ChipFacts",
    "Program",
    "ProgramFormat",
    "HbmUsage",
    "Topology",
    "TpuCompileError",
    "TpuCompileResult",
    "TpuCompiler",
    "TpuFinding",
    "TpuFindingKind",
    "TpuRow",
    "TpuWorkerError",
    "UnknownTopologyError",
    "check_dependencies",
    "chip_facts",
    "compile_hlo_proto",
    "compile_jax",
    "compile_program",
    "compile_row",
    "compile_rows",
    "compile_stablehlo",
    "compile_tensors",
    "findings",
    "resolve_target",
]
