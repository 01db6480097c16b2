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

The tiles follow the VMEM of the chip the graph is for (``xlabridge.tpu._lowering.lowering_generation``:
the TPU's own generation, or the target of ``xlabridge.hlo.kernel_count(..., target="tpu:v5e")``);
where that is not known they fit the smallest VMEM of ``xlabridge.tpu.CHIPS``.
"""

from __future__ import annotations

import functools
import logging
import warnings

import torch

from xlabridge.tpu import _lowering
from xlabridge import _optional
from xlabridge._upstream import torch_xla as upstream_xla

logger = logging.getLogger(__name__)

_JAX_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
_TARGET = "tpu_custom_call"


def takes(x: torch.Tensor, block_size: int) -> bool:
    """Whether the cast of XLA tensor ``x`` goes through the Mosaic kernel: its lowering target is
    TPU, the kernel handles ``block_size`` and ``x``'s dtype, and JAX is installed. Otherwise the
    XLA computation of ``_xla.py`` runs."""
    if _lowering.lowering_for(x.device) is not _lowering.LoweringTarget.TPU:
        return False
    if not _optional.is_available("jax"):
        _warn_no_jax()
        return False
    from xlabridge.mx._mosaic import rows as _mosaic

    return _mosaic.supports(block_size, _JAX_DTYPES[x.dtype])


@functools.cache
def _warn_no_jax() -> None:
    logger.warning(
        "xlabridge.mx on TPU: JAX is not installed, so the MXFP8 cast runs as an XLA computation "
        "(about 10 kernels) instead of one Mosaic kernel; pip install 'xlabridge[tpu]' to get it."
    )


def to_mxfp8(x: torch.Tensor, block_size: int, rounding: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(data, scale)`` of XLA tensor ``x`` from one ``tpu_custom_call`` (lazy, not executed here).

    The kernel reads and writes each array in XLA:TPU's default layout of it (``_mosaic.plan``):
    the permutes and reshapes around the call only relabel memory, so XLA adds no copy. Where the
    plan leaves an array to relayout, ``MosaicRelayoutWarning`` says so, once per shape."""
    from xlabridge.mx._mosaic import rows as _mosaic

    p = _mosaic.plan(tuple(x.shape), x.element_size(), block_size, float16=x.dtype == torch.float16)
    generation = _lowering.lowering_generation(x.device)
    if p.relayouts:
        _warn_relayouts(p, x.dtype, generation)
    dtype = _JAX_DTYPES[x.dtype]
    if x.dtype == torch.float16:
        x = _float16_bits(x)
    stored = x.permute(_mosaic.stored_input_order(p)).reshape(_mosaic.stored_shape(p.shape3, p.rows_minor.x))
    scale3 = p.shape3[:2] + (p.shape3[2] // block_size,)
    payload = _payload(p.shape3, dtype, block_size, rounding, _vmem_bytes(x.device), p.rows_minor)
    data, scale = upstream_xla.tpu_custom_call(
        [stored],
        payload,
        [list(_mosaic.stored_shape(p.shape3, p.rows_minor.data)), list(_mosaic.stored_shape(scale3, p.rows_minor.scale))],
        [torch.float8_e4m3fn, torch.uint8],
    )
    data_shape, data_order, scale_shape, scale_order = _mosaic.output_orders(p, block_size)
    return data.reshape(data_shape).permute(data_order), scale.reshape(scale_shape).permute(scale_order)


def _float16_bits(x: torch.Tensor) -> torch.Tensor:
    """``x``'s float16 bit patterns as bfloat16 (Mosaic takes no float16 or int16 operands)."""
    from xlabridge.mx import _xla

    return _xla.bitcast(x, torch.bfloat16)


@functools.lru_cache(maxsize=256)
def _warn_relayouts(p, dtype: torch.dtype, generation: str | None) -> None:
    from xlabridge.errors import MosaicRelayoutWarning

    warnings.warn(
        MosaicRelayoutWarning(
            f"xlabridge.mx.to_mxfp8 on TPU {generation or '(generation unknown)'}: an input of shape "
            f"{tuple(p.shape)} and dtype {str(dtype).removeprefix('torch.')} is at least {p.kernel_count} kernels, not 1: "
            f"{'; '.join(p.relayouts)} (see docs/guides/mxfp8.md, on TPU)"
        ),
        stacklevel=4,
    )


def _vmem_bytes(device: torch.device) -> int | None:
    """VMEM per TensorCore of the TPU the graph is traced for; None where that is not known."""
    generation = _lowering.lowering_generation(device)
    if generation is None:
        return None
    from xlabridge.tpu._chips import chip_facts

    return chip_facts(generation).vmem_bytes


@functools.cache
def _lowering_device():
    """A device of a CPU client private to this module: JAX's device assignment wants one, and
    taking it from ``jax.devices()`` would initialise every JAX backend (see the docstring)."""
    from jaxlib import xla_client

    return xla_client.make_cpu_client().devices()[0]


@functools.lru_cache(maxsize=128)
def _payload(
    shape3: tuple[int, int, int], dtype: str, block_size: int, rounding: str, vmem_bytes: int | None, rows_minor
) -> str:
    """The backend config of the Mosaic kernel for a ``[L, R, K]`` input, lowered for TPU."""
    import jax

    from xlabridge.mx._mosaic import rows as _mosaic

    tiles = _mosaic.choose_tiles(shape3, jax.numpy.dtype(dtype).itemsize, block_size, vmem_bytes)
    sharding = jax.sharding.SingleDeviceSharding(_lowering_device())
    float16 = dtype == "float16"
    cast = functools.partial(
        _mosaic.cast_3d, block_size=block_size, rounding=rounding, tiles=tiles, rows_minor=rows_minor, float16=float16
    )
    stored_dtype = "bfloat16" if float16 else dtype
    lowered = (
        jax.jit(cast, in_shardings=sharding, out_shardings=(sharding, sharding))
        .trace(jax.ShapeDtypeStruct(_mosaic.stored_shape(shape3, rows_minor.x), stored_dtype))
        .lower(lowering_platforms=("tpu",))
    )
    return kernel_config(lowered, "MXFP8")


def kernel_config(lowered, kind: str) -> str:
    """The backend config of the one Mosaic kernel in ``lowered`` (a JAX program lowered for TPU):
    what torch_xla's ``tpu_custom_call`` takes; ``kind`` names the kernel in the error."""
    import jax
    from jaxlib.mlir import ir

    configs = []

    def visit(op):
        if op.name == "stablehlo.custom_call" and ir.StringAttr(op.attributes["call_target_name"]).value == _TARGET:
            configs.append(ir.StringAttr(op.attributes["backend_config"]).value)
        return ir.WalkResult.ADVANCE

    lowered.compiler_ir("stablehlo").operation.walk(visit)
    if len(configs) != 1:
        raise RuntimeError(
            f"lowering the {kind} Mosaic kernel for TPU gave {len(configs)} {_TARGET} operations, expected 1 "
            f"(jax {jax.__version__}): xlabridge cannot hand it to torch_xla"
        )
    return configs[0]
