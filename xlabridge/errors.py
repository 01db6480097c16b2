"""Exceptions xlabridge raises on purpose, so callers can tell them from bugs, and the warnings it gives."""

__all__ = [
    "AutocastBuildWarning",
    "CacheWarning",
    "DeviceMismatchError",
    "DiagnosticsWarning",
    "MissingDependencyError",
    "MosaicRelayoutWarning",
    "TpuCompileError",
    "TpuWorkerError",
    "UnknownTopologyError",
    "UpstreamChangedError",
    "XlabridgeError",
]


class XlabridgeError(Exception):
    """Base class of every error xlabridge raises deliberately."""


class MissingDependencyError(XlabridgeError, ImportError):
    """An optional dependency (torch_xla, Triton, JAX, a C++ compiler) is needed but absent."""


class UpstreamChangedError(XlabridgeError, AttributeError):
    """A private torch, torch_xla, torch_tpu or JAX name that xlabridge reaches (``xlabridge._upstream``)
    is missing from the installed release; the message names it, the release and the releases checked.

    An ``AttributeError``, as the missing name itself would have raised, so code that tolerates a
    vanished surface (the diagnostics' probes) keeps doing so."""


class DeviceMismatchError(XlabridgeError, ValueError):
    """Inputs of one compiled graph live on devices that cannot be compiled together."""


class UnknownTopologyError(XlabridgeError, ValueError):
    """A TPU target or topology name that libtpu's compile-only client cannot build."""


class TpuCompileError(XlabridgeError, RuntimeError):
    """XLA:TPU refused a graph. ``xla_message`` is XLA's message; ``graph_path`` the saved graph."""

    def __init__(self, message: str, *, xla_message: str = "", graph_path: str | None = None) -> None:
        super().__init__(message)
        self.xla_message = xla_message
        self.graph_path = graph_path


class TpuWorkerError(TpuCompileError):
    """The TPU compile worker process died (libtpu aborted) or stopped answering."""


class DiagnosticsWarning(UserWarning):
    """Part of the diagnostics could not be collected; the model ran unchanged."""


class CacheWarning(UserWarning):
    """The persistent XLA compilation cache asked for is not in effect, and why."""


class AutocastBuildWarning(RuntimeWarning):
    """The C++ autocast kernels could not be built; equivalent Python kernels are used instead."""


class MosaicRelayoutWarning(UserWarning):
    """An MXFP8 cast on TPU is more than one kernel: XLA relayouts an array around the Mosaic
    kernel (the message names the shape, the TPU generation and the kernel count)."""
