"""xlabridge: see why ``torch.compile`` on XLA devices is slow, and fix the common traps.

Importing xlabridge needs only torch; torch_xla, Triton, JAX and libtpu are loaded by the parts
that use them, and each says what it needs when it is missing.
"""

from xlabridge import autocast, cache, diagnostics, hlo, mx, pod, tpu
from xlabridge._compile import compile
from xlabridge._version import __version__
from xlabridge.backend import xlabridge_backend
from xlabridge.diagnostics import Report, compare, diagnose, explain
from xlabridge.errors import DeviceMismatchError, MissingDependencyError, XlabridgeError


autocast.install()

__all__ = [
    "__version__",
    "Report",
    "compare",
    "compile",
    "diagnose",
    "explain",
    "DeviceMismatchError",
    "MissingDependencyError",
    "XlabridgeError",
    "autocast",
    "cache",
    "diagnostics",
    "hlo",
    "mx",
    "pod",
    "tpu",
    "xlabridge_backend",
]
