"""Shared fixtures: the XLA device (skipped where torch_xla is absent) and a clean Dynamo state."""

import os
import signal

os.environ.setdefault("PJRT_DEVICE", "CPU")

if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    # A suite started in the background by a non-interactive shell (``nohup make test &``) inherits
    # SIGINT ignored, and so would every program a test starts: Python then installs no
    # KeyboardInterrupt handler. The tests of how a program ends on SIGINT need it as an interactive
    # shell starts programs; a Python handler is reset to the default at exec, which Python then replaces.
    signal.signal(signal.SIGINT, signal.default_int_handler)

import pytest
import torch

if not torch.cuda.is_available():
    # JAX runs in this process too (tests/mx's interpret-mode kernels): left to itself it would
    # initialise every backend, loading libtpu (installed for xlabridge.tpu's compile worker)
    # next to torch_xla's PJRT client and taking libtpu's process lock. On a GPU machine JAX
    # keeps its GPU backend (tests/mx/test_jax.py runs XLA:GPU there).
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

from xlabridge import _optional
from tests._torchrun_jobs import ddp_inductor_job  # a session fixture that several files read

requires_xla = pytest.mark.skipif(
    not _optional.is_available("torch_xla"), reason="needs torch_xla (pip install 'xlabridge[xla]')"
)
requires_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (run through the device machine)"
)


@pytest.fixture
def xla_device() -> torch.device:
    if not _optional.is_available("torch_xla"):
        pytest.skip("needs torch_xla (pip install 'xlabridge[xla]')")
    import torch_xla

    return torch_xla.device()


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
