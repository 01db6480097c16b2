"""Linear layers whose weight stays MXFP4 in memory: ``mxfp4_linear``, ``mxfp4_expert_linear`` (the
matmul of a mixture-of-experts layer such as gpt-oss's, one weight per expert) and ``MXFP4Linear``.

Each is ``torch.nn.functional.linear`` of the weight dequantized to ``x``'s dtype, computed so that
the weight is read as MXFP4 (0.53 bytes per parameter instead of bfloat16's 2): on CUDA one Triton
kernel and on TPU one Mosaic kernel dequantize it tile by tile on the way into the matrix unit,
accumulating in float32 and rounding once (so results equal dequantize-then-matmul within the
output dtype's rounding, the order of the float32 sums aside); elsewhere the weight is
dequantized, then multiplied. Inference only: there is no gradient through these ops. The weight's
``packing`` goes down with it: the CUDA decode kernels read ``Packing.DECODE`` as stored, every
other route repacks it to ``SPEC`` first.
"""

from __future__ import annotations

import torch

from xlabridge.mx import _checks, _dispatch
from xlabridge.mx import _constants as C
from xlabridge.mx._fp4_packing import Packing
from xlabridge.mx._mxfp4 import MXFP4Tensor, _packing_arg, to_mxfp4

__all__ = ["MXFP4Linear", "mxfp4_expert_linear", "mxfp4_linear"]


def _check_operands(x: object, weight: object, rank: int, what: str) -> None:
    if not isinstance(weight, MXFP4Tensor):
        raise TypeError(f"weight must be an MXFP4Tensor (to_mxfp4 or MXFP4Tensor.from_checkpoint), got {type(weight).__name__}")
    _checks.check_fp4_packed(weight.data, weight.scale, weight.block_size)
    if weight.data.dim() != rank:
        raise ValueError(f"weight must be {what} for this op, got logical shape {tuple(weight.shape)}")
    if not isinstance(x, torch.Tensor) or x.dtype not in _checks.INPUT_DTYPES:
        raise TypeError(f"x must be a float32/bfloat16/float16 tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.dim() == 0 or x.shape[-1] != weight.shape[-1]:
        raise ValueError(
            f"x's last dimension must be the weight's in_features ({weight.shape[-1]}), got x of shape {tuple(x.shape)}"
        )
    if x.device != weight.data.device:
        raise ValueError(f"x and weight must be on one device, got {x.device} and {weight.data.device}")


def _check_bias(bias: object, shape: tuple[int, ...], device: torch.device) -> None:
    if bias is None:
        return
    if not isinstance(bias, torch.Tensor) or not bias.is_floating_point():
        raise TypeError(f"bias must be a floating tensor or None, got {type(bias).__name__}")
    if tuple(bias.shape) != shape:
        raise ValueError(f"bias must have shape {shape}, got {tuple(bias.shape)}")
    if bias.device != device:
        raise ValueError(f"bias must be on the weight's device ({device}), got {bias.device}")


def mxfp4_linear(x: torch.Tensor, weight: MXFP4Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.nn.functional.linear(x, weight.dequantize(x.dtype), bias)`` reading ``weight`` as MXFP4.

    Args:
        x: ``[..., K]``, float32, bfloat16 or float16 (the fused kernels take bfloat16 and, on CUDA,
            float16; other dtypes dequantize first).
        weight: an MXFP4 tensor of logical shape ``[N, K]`` (out_features, in_features), in
            either packing (``Packing.DECODE`` for CUDA decode).
        bias: ``[N]`` or None.

    Raises:
        TypeError, ValueError: an operand of the wrong type, shape or device, said which.
    """
    _check_operands(x, weight, 2, "[out_features, in_features]")
    n, k = weight.shape
    _check_bias(bias, (n,), weight.data.device)
    y = _dispatch.mxfp4_matmul(x.reshape(1, -1, k), weight.data[None], weight.scale[None], None,
                               None if bias is None else bias[None], weight.block_size, weight.packing.value)
    return y.reshape(*x.shape[:-1], n)


def mxfp4_expert_linear(x: torch.Tensor, weight: MXFP4Tensor, expert_ids: torch.Tensor | None = None,
                        bias: torch.Tensor | None = None) -> torch.Tensor:
    """The expert matmul of a mixture-of-experts layer: ``y[a] = x[a] @ W[e].T (+ bias[e])`` with
    ``e = expert_ids[a]``, the weights of all experts one MXFP4 tensor read as such.

    Args:
        x: ``[A, M, K]``: ``M`` rows (tokens, padded to a common count) for each of ``A`` groups.
        weight: logical shape ``[E, N, K]`` (gpt-oss's ``*_blocks``/``*_scales`` through
            ``MXFP4Tensor.from_checkpoint``), in either packing.
        expert_ids: ``[A]`` integer expert of each group (only those experts' weights are read), or
            None for ``A == E``, group ``a`` taking expert ``a``.
        bias: ``[E, N]`` or None.

    Returns:
        ``[A, M, N]`` in ``x``'s dtype.
    """
    _check_operands(x, weight, 3, "[experts, out_features, in_features]")
    e, n, _ = weight.shape
    if x.dim() != 3:
        raise ValueError(f"x must be [groups, rows, in_features], got shape {tuple(x.shape)}")
    if expert_ids is None:
        if x.shape[0] != e:
            raise ValueError(f"without expert_ids, x must have one group per expert ({e}), got {x.shape[0]}")
    elif (not isinstance(expert_ids, torch.Tensor) or expert_ids.dtype not in (torch.int32, torch.int64)
          or tuple(expert_ids.shape) != (x.shape[0],)):
        raise ValueError(f"expert_ids must be an int32/int64 tensor of shape ({x.shape[0]},), one expert per group of x")
    _check_bias(bias, (e, n), weight.data.device)
    return _dispatch.mxfp4_matmul(x, weight.data, weight.scale, expert_ids, bias, weight.block_size,
                                  weight.packing.value)


_EXTRA_STATE = "_extra_state"  # torch's key suffix for a module's get_extra_state


class MXFP4Linear(torch.nn.Module):
    """A linear layer whose weight is stored as MXFP4 (buffers ``weight_data``, ``weight_scale``) and
    read as such by ``mxfp4_linear``; for inference.

    ``packing`` is the weight's (``MXFP4Tensor.packing``): the layer keeps the one it was built
    with, and ``repack`` changes it, as in ``MXFP4Linear.from_linear(lin).cuda().repack("decode")``
    for CUDA decode. ``state_dict`` holds ``weight_data`` as it is (in the layer's packing) and the
    packing in the layer's extra state, so loading it gives the same layer. A state dict without
    that extra state (one saved before layers had a packing, or by a tool that keeps only tensors,
    such as safetensors) loads as ``Packing.SPEC``: save a ``DECODE`` layer's weight through
    ``repack("spec")`` or ``weight.to_checkpoint()`` where the extra state may be dropped.
    """

    def __init__(self, weight: MXFP4Tensor, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        _check_operands(torch.empty(0, weight.shape[-1], device=weight.data.device), weight, 2,
                        "[out_features, in_features]")
        _check_bias(bias, (weight.shape[0],), weight.data.device)
        self.out_features, self.in_features = weight.shape
        self.block_size = weight.block_size
        self.packing: Packing = weight.packing
        self.register_buffer("weight_data", weight.data)
        self.register_buffer("weight_scale", weight.scale)
        self.register_buffer("bias", bias)

    @property
    def weight(self) -> MXFP4Tensor:
        """The weight as an ``MXFP4Tensor`` of the buffers, in the layer's packing."""
        return MXFP4Tensor(self.weight_data, self.weight_scale, self.block_size, packing=self.packing)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return mxfp4_linear(x, self.weight, self.bias)

    def repack(self, packing: Packing | str) -> MXFP4Linear:
        """Lay the weight out as ``packing`` (a ``Packing`` or ``"spec"``/``"decode"``, see
        ``MXFP4Tensor.repack``) and return this layer. ``weight_data`` becomes a new tensor on its
        device (the tensor the layer was built from, a checkpoint's perhaps, is left as it was);
        nothing changes where the layer already has that packing.

        Raises:
            ValueError: ``packing`` is not a packing, or in_features is not a multiple of 8 (whole
                32-bit words of the packed weight).
        """
        packing = _packing_arg(packing)
        if packing is not self.packing:
            self.weight_data = self.weight.repack(packing).data
            self.packing = packing
        return self

    def get_extra_state(self) -> dict[str, str]:
        """``{"packing": ...}``: how to read ``weight_data`` of this state dict."""
        return {"packing": self.packing.value}

    def set_extra_state(self, state: object) -> None:
        if not isinstance(state, dict) or "packing" not in state:
            raise ValueError(f"MXFP4Linear's extra state must be a dict with a 'packing' entry, got {state!r}")
        self.packing = _packing_arg(state["packing"], "the state dict's packing")

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs) -> None:
        # a state dict without the packing predates it, and held the spec layout: read it as such
        # rather than report a missing key under strict loading
        if prefix + _EXTRA_STATE not in state_dict:
            state_dict = {**state_dict, prefix + _EXTRA_STATE: {"packing": Packing.SPEC.value}}
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, rounding: str | C.Rounding = C.Rounding.FLOOR) -> MXFP4Linear:
        """The MXFP4 cast of ``linear``'s weight (``rounding`` as ``to_mxfp4``), its bias kept, in
        ``Packing.SPEC`` (``.repack("decode")`` for CUDA decode)."""
        with torch.no_grad():
            weight = to_mxfp4(linear.weight.detach(), rounding=rounding)
            bias = None if linear.bias is None else linear.bias.detach().clone()
        return cls(weight, bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"packing={self.packing.value}")
