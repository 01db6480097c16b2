"""Exceptions xlabridge raises on purpose, so callers can tell them from bugs."""


class XlabridgeError(Exception):
    """Base class of every error xlabridge raises deliberately."""


class MissingDependencyError(XlabridgeError, ImportError):
    """An optional dependency (torch_xla, Triton, JAX, a C++ compiler) is needed but absent."""


class DeviceMismatchError(XlabridgeError, ValueError):
    """Inputs of one compiled graph live on devices that cannot be compiled together."""


class DiagnosticsWarning(UserWarning):
    """Part of the diagnostics could not be collected; the model ran unchanged."""
