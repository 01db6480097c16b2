"""Every environment variable xlabridge reads or sets, named in one place.

Modules read variables through the functions here, never through ``os.environ`` directly, so
that the full list of knobs, and what each means, is this file. Variables that belong to
other projects (``PJRT_DEVICE``, ``TPU_ACCELERATOR_TYPE``...) are listed too when xlabridge
reads or sets them.
"""

from __future__ import annotations

import os

# xlabridge's own
CACHE_DIR = "XLABRIDGE_CACHE_DIR"
"""Directory of the persistent XLA compilation cache (``xlabridge.cache``)."""
REPORT_DIR = "XLABRIDGE_REPORT_DIR"
"""Set by ``xlabridge report`` for the processes it runs: where each writes its observations."""
AUTOCAST_BACKEND = "XLABRIDGE_AUTOCAST_BACKEND"
"""``auto`` | ``cpp`` | ``python``: how autocast kernels are registered (``xlabridge.autocast``)."""
AUTOCAST_BUILD_DIR = "XLABRIDGE_AUTOCAST_BUILD_DIR"
"""Where the autocast C++ extension is built and cached."""

# other projects'
PJRT_DEVICE = "PJRT_DEVICE"
"""torch_xla's device type (``CPU``, ``TPU``, ``CUDA``)."""
TPU_ACCELERATOR_TYPE = "TPU_ACCELERATOR_TYPE"
"""A TPU VM's accelerator type (``v5litepod-8``); libtpu reads it too."""
TPU_TYPE = "TPU_TYPE"
"""Older name of the accelerator type on some TPU VMs."""
TPU_WORKER_HOSTNAMES = "TPU_WORKER_HOSTNAMES"
"""A TPU VM's host list; set (if unset) for the TPU compile worker to quiet libtpu's start-up."""
ALLOW_MULTIPLE_LIBTPU_LOAD = "ALLOW_MULTIPLE_LIBTPU_LOAD"
"""Set for the TPU compile worker: libtpu then skips its process lock (``/tmp/libtpu_lockfile``)."""
JAX_PLATFORMS = "JAX_PLATFORMS"
"""Set to ``cpu`` for the TPU compile worker: its JAX needs no backend of its own."""
PYTHONPATH = "PYTHONPATH"
"""Set for the TPU compile worker to the caller's ``sys.path``, so it imports the caller's functions."""
XDG_CACHE_HOME = "XDG_CACHE_HOME"
"""Base of per-user caches."""


def get(name: str, default: str | None = None) -> str | None:
    """The value of environment variable ``name`` (one of the names above), or ``default``."""
    return os.environ.get(name, default)
