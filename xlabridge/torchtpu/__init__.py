"""TorchTPU (``torch-tpu``, ``torch.compile(backend="tpu")``): its graphs, compiled for TPU here.

TorchTPU lowers each graph by running it on its PrivateUse1 ``tpu`` device in a tracing mode,
which needs a TPU: without one its backend fails in ``fx_to_mlir`` (docs/guides/torchtpu.md). What it
compiles is fixed before that, by Dynamo and AOTAutograd, and needs no device. This package
takes the graphs at that point and compiles them for a TPU topology with libtpu's compile-only
client, labelled "compiled for TPU, not run"::

    from xlabridge import torchtpu

    capture = torchtpu.GraphCapture()                 # a Dynamo backend; runs graphs on CPU
    loss = torch.compile(model, backend=capture)(x).sum()
    loss.backward()
    for row in torchtpu.compile_graphs(capture.graphs, "v6e:2x2"):
        print(row.graph.name, row.result.kernel_count, row.result.memory.total_bytes, row.result.fits)

A program written for TorchTPU (``backend="tpu"``) runs unchanged, its tensors on CPU, inside
``with torchtpu.capture_tpu_backend() as capture:``. ``GraphCapture`` runs TorchTPU's own backend, its FX passes, AOTAutograd and split compiler
included, and takes each partition where TorchTPU would lower it (``fx_to_mlir``, which needs
a TPU), with its inputs' shapes, its ops' user lines and its collectives; it runs the partition
on CPU instead. ``lower_to_stablehlo`` lowers a graph with torchax (ATen ops to JAX) and
``jax.export`` for the TPU platform; ``compile_graphs`` compiles the result with
``xlabridge.tpu``. That StableHLO is not TorchTPU's own (its C++ lowering, Pallas kernels and
fused RNN/attention kernels are not used): docs/guides/torchtpu.md says how they
differ. Needs torch_tpu, jax, libtpu and torchax (``requirements/torchtpu.txt``).
"""

from xlabridge.torchtpu._capture import (
    CollectiveSplit,
    GraphCapture,
    TpuGraph,
    capture_tpu_backend,
    torchtpu_available,
)
from xlabridge.torchtpu._lower import lower_to_stablehlo
from xlabridge.torchtpu._view import TorchTpuGraphResult, compile_graphs

__all__ = [
    "CollectiveSplit",
    "GraphCapture",
    "TorchTpuGraphResult",
    "TpuGraph",
    "capture_tpu_backend",
    "compile_graphs",
    "lower_to_stablehlo",
    "torchtpu_available",
]
