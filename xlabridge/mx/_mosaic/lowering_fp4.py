"""The MXFP4 Mosaic kernels (``fp4.py``: cast and inverse; ``fp4_matmul.py``: the matmul) as
``tpu_custom_call``s in torch_xla's lazy graph, lowered as ``lowering.py`` lowers the MXFP8 cast
(JAX in this process, a private CPU device for the assignment, payloads cached per shape and
options), through torch_xla's wrappers in ``xlabridge._upstream``.

Each array is handed to the kernel in its physical order (``fp4.plan``, ``fp4_matmul.storage``):
a permute of an array whose XLA:TPU default layout is that order only relabels memory. Where the
default layout of an array is neither order a kernel reads, XLA adds a copy; the cast and its
inverse still take the kernel then and say so once per shape (``MosaicRelayoutWarning``), the
matmul does not (it dequantizes, then multiplies, as on other devices).
"""

from __future__ import annotations

import functools
import warnings

import torch

from xlabridge import _optional
from xlabridge.mx._mosaic import lowering as _tpu
from xlabridge.tpu import _lowering

_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
BLOCK_SIZE = 32


def _tpu_lowering(t: torch.Tensor, block_size: int) -> bool:
    return (block_size == BLOCK_SIZE and _lowering.lowering_for(t.device) is _lowering.LoweringTarget.TPU
            and _optional.is_available("jax"))


def cast_takes(x: torch.Tensor, block_size: int) -> bool:
    """Whether ``to_mxfp4`` of XLA tensor ``x`` takes the Mosaic kernel (a TPU lowering, JAX, block
    size 32, at least two dimensions); else the XLA computation of ``_xla.py``."""
    return _tpu_lowering(x, block_size) and x.dim() >= 2


def dequantize_takes(data: torch.Tensor, block_size: int, dtype: torch.dtype) -> bool:
    """Whether ``from_mxfp4`` into ``dtype`` takes the Mosaic kernel (bfloat16 or float32 output)."""
    return _tpu_lowering(data, block_size) and data.dim() >= 2 and dtype in (torch.bfloat16, torch.float32)


def matmul_takes(x: torch.Tensor, data: torch.Tensor, block_size: int) -> bool:
    """Whether the MXFP4 matmul takes the Mosaic kernel: bfloat16 ``x``, and a weight whose default
    layouts the kernel reads (``fp4_matmul.supports``)."""
    if not _tpu_lowering(x, block_size) or x.dtype != torch.bfloat16:
        return False
    from xlabridge.mx._mosaic import fp4_matmul

    return fp4_matmul.supports(_weight_layouts(tuple(data.shape)), 2 * data.shape[-1])


def _weight_layouts(shape: tuple[int, ...]):
    """Storage of a ``[E, N, K/2]`` weight; a single expert (``E == 1``, a linear's weight with a
    leading axis added) as the 2-D array it is."""
    from xlabridge.mx._mosaic import fp4_matmul

    e, n, half = shape
    return fp4_matmul.weight_layouts(n, 2 * half, None if e == 1 else e)


@functools.lru_cache(maxsize=256)
def _warn_relayouts(shape: tuple[int, ...], relayouts: tuple[str, ...], what: str) -> None:
    from xlabridge.errors import MosaicRelayoutWarning

    warnings.warn(MosaicRelayoutWarning(
        f"xlabridge.mx.{what} on TPU: shape {shape} is at least {1 + len(relayouts)} kernels, not 1: {'; '.join(relayouts)}"
    ), stacklevel=5)


def _to_stored(t: torch.Tensor, shape3: tuple[int, int, int], k_major: bool) -> torch.Tensor:
    t = t.reshape(shape3)
    return t.transpose(1, 2) if k_major else t


def _from_stored(t: torch.Tensor, k_major: bool, shape: tuple[int, ...]) -> torch.Tensor:
    return (t.transpose(1, 2) if k_major else t).reshape(shape)


def to_mxfp4(x: torch.Tensor, block_size: int, rounding: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(data, scale)`` of XLA tensor ``x`` from one ``tpu_custom_call`` (lazy, not executed here)."""
    from xlabridge.mx._mosaic import fp4

    shape = tuple(x.shape)
    p = fp4.plan(shape, x.element_size())
    if p.relayouts:
        _warn_relayouts(shape, p.relayouts, "to_mxfp4")
    dtype = _DTYPES[x.dtype]
    if x.dtype == torch.float16:  # Mosaic takes no float16 operand: its bits as bfloat16 (rows.py)
        x = _tpu._float16_bits(x)
    L, R, K = p.shape3
    payload = _payload("cast", p.shape3, dtype, rounding, _tpu._vmem_bytes(x.device), p.layouts, _pin_hbm(x.device))
    data, scale = _custom_call(
        [_to_stored(x, p.shape3, p.layouts.x)], payload,
        [fp4.stored_shape((L, R, K // 2), p.layouts.data), fp4.stored_shape((L, R, K // BLOCK_SIZE), p.layouts.scale)],
        [torch.uint8, torch.uint8])
    return (_from_stored(data, p.layouts.data, shape[:-1] + (K // 2,)),
            _from_stored(scale, p.layouts.scale, shape[:-1] + (K // BLOCK_SIZE,)))


def from_mxfp4(data: torch.Tensor, scale: torch.Tensor, block_size: int, dtype: torch.dtype) -> torch.Tensor:
    """The values (``[..., 2 * data.shape[-1]]`` of ``dtype``) from one ``tpu_custom_call`` (lazy)."""
    from xlabridge.mx._mosaic import fp4

    shape = tuple(data.shape[:-1]) + (2 * data.shape[-1],)
    p = fp4.plan(shape, torch.empty((), dtype=dtype).element_size())
    if p.relayouts:
        _warn_relayouts(shape, p.relayouts, "from_mxfp4")
    L, R, K = p.shape3
    payload = _payload("dequantize", p.shape3, _DTYPES[dtype], "", _tpu._vmem_bytes(data.device), p.layouts,
                       _pin_hbm(data.device))
    (values,) = _custom_call(
        [_to_stored(data, (L, R, K // 2), p.layouts.data), _to_stored(scale, (L, R, K // BLOCK_SIZE), p.layouts.scale)],
        payload, [fp4.stored_shape(p.shape3, p.layouts.x)], [dtype])
    return _from_stored(values, p.layouts.x, shape)


def _stored(t: torch.Tensor, layout) -> torch.Tensor:
    """An ``[E, N, C]`` weight array in the physical order ``fp4_matmul.stored`` gives it."""
    if layout.value == "outer":
        return t.permute(2, 0, 1).reshape(t.shape[2] * t.shape[0], t.shape[1])
    return t.transpose(1, 2) if layout.value == "k_major" else t


def matmul(x, data, scale, expert_ids, bias, block_size: int) -> torch.Tensor:
    """``y`` ``[A, M, N]`` of the MXFP4 matmul from one ``tpu_custom_call`` (lazy): ``x`` ``[A, M, K]``
    bfloat16, the weight ``[E, N, K/2]`` and its scale bytes handed over in their physical order."""

    A, M, K = x.shape
    E, N = data.shape[0], data.shape[1]
    layouts = _weight_layouts(tuple(data.shape))
    inputs = [] if expert_ids is None else [expert_ids.to(torch.int32)]
    inputs += [x, _stored(data, layouts.data), _stored(scale, layouts.scale)]
    if bias is not None:
        inputs.append(bias.to(torch.float32))
    payload = _matmul_payload((A, M, K), (E, N), expert_ids is not None, bias is not None, layouts, _pin_hbm(x.device))
    (y,) = _custom_call(inputs, payload, [(A, M, N)], [x.dtype])
    return y


def _pin_hbm(device: torch.device) -> bool:
    """Whether the kernels pin their arrays to HBM on the TPU the graph is traced for (``hbm.py``)."""
    from xlabridge.mx._mosaic import hbm

    return hbm.pins(_lowering.lowering_generation(device))


@functools.lru_cache(maxsize=128)
def _payload(kind: str, shape3: tuple[int, int, int], dtype: str, rounding: str, vmem_bytes: int | None, layouts,
             pin_hbm: bool) -> str:
    """The backend config of the MXFP4 cast or dequantize kernel for ``[L, R, K]`` values, lowered for TPU."""
    import jax

    from xlabridge.mx._mosaic import fp4

    L, R, K = shape3
    itemsize = jax.numpy.dtype(dtype).itemsize
    tiles = fp4.tiles_for(shape3, itemsize, vmem_bytes)
    if kind == "cast":
        fn = functools.partial(fp4.cast_3d, rounding=rounding, tiles=tiles, layouts=layouts, float16=dtype == "float16",
                               pin_hbm=pin_hbm)
        args = (jax.ShapeDtypeStruct(fp4.stored_shape(shape3, layouts.x), "bfloat16" if dtype == "float16" else dtype),)
    else:
        fn = functools.partial(fp4.dequantize_3d, dtype=dtype, tiles=tiles, layouts=layouts, pin_hbm=pin_hbm)
        args = (jax.ShapeDtypeStruct(fp4.stored_shape((L, R, K // 2), layouts.data), "uint8"),
                jax.ShapeDtypeStruct(fp4.stored_shape((L, R, K // BLOCK_SIZE), layouts.scale), "uint8"))
    return _lower(fn, args, f"MXFP4 {kind}")


@functools.lru_cache(maxsize=128)
def _matmul_payload(x_shape: tuple[int, int, int], weight: tuple[int, int], has_ids: bool, has_bias: bool, layouts,
                    pin_hbm: bool) -> str:
    import jax

    from xlabridge.mx._mosaic import fp4_matmul

    A, M, K = x_shape
    E, N = weight
    stored = {"rows": lambda c: (E, N, c), "k_major": lambda c: (E, c, N), "outer": lambda c: (c * E, N)}
    args = [jax.ShapeDtypeStruct((A,), "int32")] if has_ids else []
    args += [jax.ShapeDtypeStruct(x_shape, "bfloat16"),
             jax.ShapeDtypeStruct(stored[layouts.data.value](K // 2), "uint8"),
             jax.ShapeDtypeStruct(stored[layouts.scale.value](K // BLOCK_SIZE), "uint8")]
    if has_bias:
        args.append(jax.ShapeDtypeStruct((E, N), "float32"))

    def fn(*operands):
        ids = operands[0] if has_ids else None
        rest = operands[1:] if has_ids else operands
        return fp4_matmul.matmul(*rest[:3], ids, rest[3] if has_bias else None, layouts=layouts, pin_hbm=pin_hbm)

    return _lower(fn, tuple(args), "MXFP4 matmul")


def _lower(fn, args: tuple, kind: str) -> str:
    import jax

    sharding = jax.sharding.SingleDeviceSharding(_tpu._lowering_device())
    lowered = jax.jit(fn, in_shardings=(sharding,) * len(args)).trace(*args).lower(lowering_platforms=("tpu",))
    return _tpu.kernel_config(lowered, kind)


def _custom_call(inputs, payload: str, shapes, dtypes) -> list[torch.Tensor]:
    """The outputs of one ``tpu_custom_call`` running the Mosaic kernel ``payload`` on ``inputs``."""
    from xlabridge._upstream import torch_xla as upstream_xla

    return list(upstream_xla.tpu_custom_call(list(inputs), payload, [list(s) for s in shapes], list(dtypes)))
