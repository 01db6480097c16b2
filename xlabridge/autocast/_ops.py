"""The one list of ops xlabridge may register for AutocastXLA, with their policies.

Everything else derives from this module: the C++ kernel table (a header generated from
``ALL_SPECS`` at build time), the pure-Python fallback, ``enable_parity()`` and the tests.

``DEFAULT_SPECS`` is registered on import where torch_xla lacks it (einsum, missing from
AutocastXLA before mid-2025). ``PARITY_SPECS`` is torch's AutocastCUDA list less the ops in
``NOT_APPLICABLE`` and ``TPU_EXCEPTIONS``; ``enable_parity()`` registers those of them that
torch_xla does not, and only while the live AutocastCUDA kernel still has the declared
policy (the dispatcher, not this table, has the last word).

AutocastCUDA's list changes between torch releases; an op that is not in every supported
release carries the releases it is in (``since``/``before``), and the lists above hold only
the ops of the torch that is running.
"""

from __future__ import annotations

import dataclasses
import enum

import torch


class Policy(str, enum.Enum):
    """What an Autocast kernel does to its float inputs, as the audit reports it."""

    LOWER_PRECISION = "lower_precision_fp"
    FP32 = "fp32"
    PROMOTE = "promote"
    BANNED = "banned"
    NONE = "none"
    UNKNOWN = "unknown"


class CastPolicy(str, enum.Enum):
    """The ``at::autocast::CastPolicy`` a kernel is built with (names match the C++ enum)."""

    lower_precision_fp = "lower_precision_fp"
    fp32 = "fp32"
    fp32_set_opt_dtype = "fp32_set_opt_dtype"
    fp32_append_dtype = "fp32_append_dtype"
    promote = "promote"

    @property
    def policy(self) -> Policy:
        """The coarse policy this cast policy shows in the audit."""
        if self is CastPolicy.lower_precision_fp:
            return Policy.LOWER_PRECISION
        if self is CastPolicy.promote:
            return Policy.PROMOTE
        return Policy.FP32


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """One AutocastXLA kernel: ``name`` as the dispatcher spells it ("aten::pow.Scalar").

    ``redispatch`` names the overload the kernel calls when it differs from ``name``
    (``fp32_append_dtype`` ops call the overload that takes a ``dtype``). ``since`` and
    ``before`` bound the torch releases, as (major, minor), whose AutocastCUDA lists the op;
    None: every supported release.
    """

    name: str
    cast: CastPolicy
    redispatch: str | None = None
    since: tuple[int, int] | None = None
    before: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if not self.name.startswith("aten::"):
            raise ValueError(f"OpSpec 'name' must be an aten op such as 'aten::mv', got {self.name!r}")

    def in_torch(self, version: tuple[int, int]) -> bool:
        """Whether torch ``version`` (major, minor) lists this op."""
        return (self.since is None or version >= self.since) and (self.before is None or version < self.before)

    @property
    def base(self) -> str:
        """The op's name without namespace and overload ("pow" for "aten::pow.Scalar")."""
        return self.name[len("aten::") :].partition(".")[0]

    @property
    def overload(self) -> str:
        """The overload name, "" for the default overload."""
        return self.name.partition(".")[2]


def _specs(cast: CastPolicy, names: str, **releases: tuple[int, int]) -> tuple[OpSpec, ...]:
    return tuple(OpSpec(f"aten::{name}", cast, **releases) for name in names.split())


def torch_release(version: str) -> tuple[int, int]:
    """(major, minor) of a torch version string such as "2.9.0+cu128"."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


TORCH_RELEASE = torch_release(torch.__version__)


_LOWER = CastPolicy.lower_precision_fp
_FP32 = CastPolicy.fp32
_SET_DTYPE = CastPolicy.fp32_set_opt_dtype

DEFAULT_SPECS: tuple[OpSpec, ...] = (OpSpec("aten::einsum", _LOWER),)

# Ops CUDA lists that can never run on an XLA tensor: a cast kernel for them would be dead.
NOT_APPLICABLE: dict[str, str] = {
    "aten::_cudnn_rnn": "cuDNN kernel; XLA tensors never reach it",
    "aten::cudnn_convolution": "cuDNN kernel; XLA tensors never reach it",
    "aten::cudnn_convolution_transpose": "cuDNN kernel; XLA tensors never reach it",
    "aten::_thnn_fused_lstm_cell": "CUDA-only fused kernel; on XLA lstm_cell decomposes instead",
    "aten::_thnn_fused_gru_cell": "CUDA-only fused kernel; on XLA gru_cell decomposes instead",
    "aten::_scaled_dot_product_flash_attention": "CUDA flash-attention kernel; XLA uses the math path",
    "aten::binary_cross_entropy": (
        "CUDA bans it under autocast (raises); torch_xla computes it in fp32, and copying the ban "
        "would turn working XLA programs into errors"
    ),
}

# Ops CUDA runs in lower precision that bf16 gets wrong, or only makes worse, on TPU.
# Each reason is a property of torch_xla's lowering that tests/autocast re-check, so a
# torch_xla release that changes it fails a test instead of leaving a stale exception.
TPU_EXCEPTIONS: dict[str, str] = {
    "aten::linalg_vecdot": (
        "torch_xla lowers it to multiply + reduce with a bf16 adder, not a dot, so in bf16 the "
        "sum accumulates in bf16; CUDA's reduction accumulates in fp32"
    ),
    "aten::scaled_dot_product_attention": (
        "on XLA it takes the math path, which upcasts bf16 q/k/v to fp32 for its matmuls: the "
        "cast would round the inputs to bf16 and buy no bf16 matmul"
    ),
    "aten::addmv": (
        "torch_xla has no lowering; it runs on the host CPU through the aten fallback, so bf16 "
        "only rounds the result and no TPU matmul gets faster"
    ),
    "aten::addr": (
        "torch_xla lowers it to an fp32 elementwise outer product (no dot), so the cast only "
        "rounds inputs and output to bf16"
    ),
}

# Releases where AutocastCUDA's list changed (read from each release's ATen/autocast_mode.h,
# 2.10 to 2.12, and from the dispatcher of 2.8, 2.9, 2.13, 2.14 and 2.15):
# - the named-tensor (Dimname) overloads are listed up to 2.12; torch 2.13 removed the overloads;
# - rms_norm is listed fp32 from 2.12 on;
# - linalg_matrix_sqrth, new in torch 2.14, is listed fp32 from its first release.
_NAMED_OVERLOADS_REMOVED = (2, 13)

# torch's AutocastCUDA list (ATen/autocast_mode.h), less NOT_APPLICABLE, in every release
# xlabridge knows; _CUDA_LIKE below is the running torch's.
_CUDA_LIKE_ALL: tuple[OpSpec, ...] = (
    _specs(
        _LOWER,
        "_convolution.deprecated _convolution conv1d conv2d conv3d conv_tbc conv_transpose1d "
        "conv_transpose2d.input conv_transpose3d.input convolution prelu addmm addmv addr matmul "
        "einsum mm mv linalg_vecdot linear addbmm baddbmm bmm chain_matmul linalg_multi_dot "
        "lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell scaled_dot_product_attention",
    )
    + _specs(
        _FP32,
        "acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan "
        "pow.Tensor_Scalar pow.Tensor_Tensor pow.Scalar softplus layer_norm native_layer_norm "
        "group_norm frobenius_norm.dim nuclear_norm nuclear_norm.dim cosine_similarity "
        "poisson_nll_loss cosine_embedding_loss nll_loss nll_loss2d hinge_embedding_loss kl_div "
        "l1_loss smooth_l1_loss huber_loss mse_loss margin_ranking_loss multilabel_margin_loss "
        "soft_margin_loss triplet_margin_loss multi_margin_loss binary_cross_entropy_with_logits "
        "dist pdist cdist renorm logsumexp upsample_nearest1d _upsample_nearest_exact1d "
        "upsample_nearest2d _upsample_nearest_exact2d upsample_nearest3d _upsample_nearest_exact3d "
        "upsample_linear1d upsample_bilinear2d _upsample_bilinear2d_aa upsample_trilinear3d "
        "upsample_bicubic2d _upsample_bicubic2d_aa",
    )
    + _specs(_FP32, "rms_norm", since=(2, 12))
    + _specs(_FP32, "linalg_matrix_sqrth", since=(2, 14))
    + _specs(
        _SET_DTYPE,
        "prod prod.dim_int softmax.int log_softmax.int cumprod cumsum linalg_vector_norm "
        "linalg_matrix_norm linalg_matrix_norm.str_ord sum sum.dim_IntList",
    )
    + _specs(
        _SET_DTYPE,
        "prod.dim_Dimname softmax.Dimname log_softmax.Dimname cumprod.dimname cumsum.dimname sum.dim_DimnameList",
        before=_NAMED_OVERLOADS_REMOVED,
    )
    + (
        OpSpec("aten::norm.Scalar", CastPolicy.fp32_append_dtype, "aten::norm.ScalarOpt_dtype"),
        OpSpec("aten::norm.ScalarOpt_dim", CastPolicy.fp32_append_dtype, "aten::norm.ScalarOpt_dim_dtype"),
        OpSpec(
            "aten::norm.names_ScalarOpt_dim",
            CastPolicy.fp32_append_dtype,
            "aten::norm.names_ScalarOpt_dim_dtype",
            before=_NAMED_OVERLOADS_REMOVED,
        ),
    )
    + _specs(
        CastPolicy.promote,
        "addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put tensordot scatter_add",
    )
)

_CUDA_LIKE: tuple[OpSpec, ...] = tuple(spec for spec in _CUDA_LIKE_ALL if spec.in_torch(TORCH_RELEASE))

PARITY_SPECS: tuple[OpSpec, ...] = tuple(s for s in _CUDA_LIKE if s.name not in TPU_EXCEPTIONS)

# Every kernel the C++ extension is built with (DEFAULT_SPECS is part of the parity list).
ALL_SPECS: tuple[OpSpec, ...] = PARITY_SPECS

SPECS_BY_NAME: dict[str, OpSpec] = {spec.name: spec for spec in ALL_SPECS}
