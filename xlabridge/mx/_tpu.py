"""The cast on TPU tensors: the Mosaic kernel of ``_mosaic.py`` as one ``tpu_custom_call`` in
torch_xla's lazy graph.

The kernel is lowered for TPU by JAX in this process, and the custom call's backend config (the
serialized Mosaic kernel, what XLA:TPU compiles) is the payload of
``torch_xla._XLAC._xla_tpu_custom_call``. The lowering needs a device for JAX's device
assignment only, so it is assigned to a CPU client of its own rather than to ``jax.devices()``,
which would initialise every JAX backend: off a TPU VM that would load libtpu next to torch_xla's
PJRT client. On a Cloud TPU VM, JAX 0.7.1 still asks its default backend for the libtpu build date,
to pick a Mosaic serialization version that libtpu accepts (``tpu_custom_call.get_ir_version``);
torch_xla holds the chips by then (an XLA tensor exists), the order torch_xla's own Pallas kernels
rely on (``torch_xla._internal.jax_workarounds``). Not run on a TPU VM here. Payloads are cached per
(shape, dtype, block size, rounding, chip VMEM).

The tiles follow the VMEM of the chip the graph is for (``xlabridge._lowering.lowering_generation``:
the TPU's own generation, or the target of ``xlabridge.hlo.kernel_count(..., target="tpu:v5e")``);
where that is not known they fit the smallest VMEM of ``xlabridge.tpu.CHIPS``.
"""

from __future__ import annotations

import functools
import logging

import torch

from xlabridge import _lowering, _optional

logger = logging.getLogger(__name__)

_JAX_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
_TARGET = "tpu_custom_call"


def takes(x: torch.Tensor, block_size: int) -> bool:
    """Whether the cast of XLA tensor ``x`` goes through the Mosaic kernel: its lowering target is
    TPU, the kernel handles ``block_size`` and ``x``'s dtype (not float16: Mosaic has no float16
    type), and JAX is installed. Otherwise the XLA computation of ``_xla.py`` runs."""
    if _lowering.lowering_for(x.device) is not _lowering.LoweringTarget.TPU:
        return False
    if not _optional.is_available("jax"):
        _warn_no_jax()
        return False
    from xlabridge.mx import _mosaic

    return _mosaic.supports(block_size, _JAX_DTYPES[x.dtype])


@functools.cache
def _warn_no_jax() -> None:
    logger.warning(
        "xlabridge.mx on TPU: JAX is not installed, so the MXFP8 cast runs as an XLA computation "
        "(about 10 kernels) instead of one Mosaic kernel; pip install 'xlabridge[tpu]' to get it."
    )


def to_mxfp8(x: torch.Tensor, block_size: int, rounding: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(data, scale)`` of XLA tensor ``x`` from one ``tpu_custom_call`` (lazy, not executed here)."""
    import torch_xla

    from xlabridge.mx import _mosaic

    shape3 = _mosaic.as_3d(tuple(x.shape))
    scale3 = shape3[:2] + (shape3[2] // block_size,)
    payload = _payload(shape3, _JAX_DTYPES[x.dtype], block_size, rounding, _vmem_bytes(x.device))
    data, scale = torch_xla._XLAC._xla_tpu_custom_call(
        [x.reshape(shape3)], payload, [list(shape3), list(scale3)], [torch.float8_e4m3fn, torch.uint8]
    )
    return data.reshape(x.shape), scale.reshape(x.shape[:-1] + (x.shape[-1] // block_size,))


def _vmem_bytes(device: torch.device) -> int | None:
    """VMEM per TensorCore of the TPU the graph is traced for; None where that is not known."""
    generation = _lowering.lowering_generation(device)
    if generation is None:
        return None
    from xlabridge.tpu.chips import chip_facts

    return chip_facts(generation).vmem_bytes


@functools.cache
def _lowering_device():
    """A device of a CPU client private to this module: JAX's device assignment wants one, and
    taking it from ``jax.devices()`` would initialise every JAX backend (see the docstring)."""
    from jaxlib import xla_client

    return xla_client.make_cpu_client().devices()[0]


@functools.lru_cache(maxsize=128)
def _payload(shape3: tuple[int, int, int], dtype: str, block_size: int, rounding: str, vmem_bytes: int | None) -> str:
    """The backend config of the Mosaic kernel for a ``[L, R, K]`` input, lowered for TPU."""
    import jax
    from jaxlib.mlir import ir

    from xlabridge.mx import _mosaic

    tiles = _mosaic.choose_tiles(shape3, jax.numpy.dtype(dtype).itemsize, block_size, vmem_bytes)
    sharding = jax.sharding.SingleDeviceSharding(_lowering_device())
    cast = functools.partial(_mosaic.cast_3d, block_size=block_size, rounding=rounding, tiles=tiles)
    lowered = (
        jax.jit(cast, in_shardings=sharding, out_shardings=(sharding, sharding))
        .trace(jax.ShapeDtypeStruct(shape3, dtype))
        .lower(lowering_platforms=("tpu",))
    )
    configs = []

    def visit(op):
        if op.name == "stablehlo.custom_call" and ir.StringAttr(op.attributes["call_target_name"]).value == _TARGET:
            configs.append(ir.StringAttr(op.attributes["backend_config"]).value)
        return ir.WalkResult.ADVANCE

    lowered.compiler_ir("stablehlo").operation.walk(visit)
    if len(configs) != 1:
        raise RuntimeError(
            f"lowering the MXFP8 Mosaic kernel for TPU gave {len(configs)} {_TARGET} operations, expected 1 "
            f"(jax {jax.__version__}): xlabridge cannot hand it to torch_xla"
        )
    return configs[0]
