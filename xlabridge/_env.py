"""Every environment variable xlabridge reads or sets, named in one place.

Modules read variables through the functions here, never through ``os.environ`` directly, so
that the full list of knobs, and what each means, is this file. Variables that belong to
other projects (``PJRT_DEVICE``, ``TPU_ACCELERATOR_TYPE``...) are listed too when xlabridge
reads or sets them.
"""

from __future__ import annotations

import os
from pathlib import Path

# xlabridge's own
CACHE_DIR = "XLABRIDGE_CACHE_DIR"
"""Directory of the persistent XLA compilation cache (``xlabridge.backend.cache``)."""
REPORT_DIR = "XLABRIDGE_REPORT_DIR"
"""Set by ``xlabridge report`` for the processes it runs: where each writes its event log."""
CAPTURE_HLO = "XLABRIDGE_CAPTURE_HLO"
"""``1``, set by ``xlabridge report --capture-hlo``: each process saves its XLA graphs' HLO protos."""
POD = "XLABRIDGE_POD"
"""``1``, set by ``xlabridge report --pod``: each process captures its XLA graphs (lazy ones too),
their collectives and source lines (``xlabridge.pod.capture_environment``); automatic when
``WORLD_SIZE`` > 1."""
POD_SET = "XLABRIDGE_POD_SET"
"""Set with a process's capture (``xlabridge.pod.plan_capture``): JSON of each variable it set, as
``[the user's value or null, the value set]``, so that a child process that inherits them starts
from the user's values (its own capture, its own directory)."""
RUN_ID = "XLABRIDGE_RUN_ID"
"""Set by ``xlabridge report`` for the processes it runs: the run they belong to, recorded in each log, so
that logs of two runs in one directory are told apart."""
STALL_AFTER = "XLABRIDGE_STALL_AFTER"
"""Seconds, set by ``xlabridge report --stall-after``: each process reports where it is when no step made
progress for that long."""
AUTOCAST_BACKEND = "XLABRIDGE_AUTOCAST_BACKEND"
"""``auto`` | ``cpp`` | ``python``: how autocast kernels are registered (``xlabridge.autocast``)."""
AUTOCAST_BUILD_DIR = "XLABRIDGE_AUTOCAST_BUILD_DIR"
"""Where the autocast C++ extension is built and cached."""

# other projects'
TORCH_TRACE = "TORCH_TRACE"
"""torch's structured trace: the directory each process writes its log into (read when torch is
imported). ``xlabridge report --trace-dir`` reads such a directory; a run observed by xlabridge with it
set also writes xlabridge's rows into it; the probe self-test's child runs without it."""
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
TPU_SKIP_MDS_QUERY = "TPU_SKIP_MDS_QUERY"
"""``1``: libtpu does not ask the GCE metadata server for the TPU's topology. Set (if unset) by
``xlabridge.torchtpu`` where there is no TPU: with torch_tpu installed, the autograd engine's first
``backward()`` asks TorchTPU's device guard for its device count, which starts libtpu's PJRT client,
which retries the metadata server for minutes off a TPU VM."""
JAX_PLATFORMS = "JAX_PLATFORMS"
"""Set to ``cpu`` for the TPU compile worker: its JAX needs no backend of its own."""
PYTHONPATH = "PYTHONPATH"
"""Set for the TPU compile worker to the caller's ``sys.path``, so it imports the caller's functions."""
XDG_CACHE_HOME = "XDG_CACHE_HOME"
"""Base of per-user caches."""
XLA_PERSISTENT_CACHE_PATH = "XLA_PERSISTENT_CACHE_PATH"
"""torch_xla's persistent compilation cache directory; ``xlabridge.backend.cache`` sets it before torch_xla loads."""
XLA_PERSISTENT_CACHE_READ_ONLY = "XLA_PERSISTENT_CACHE_READ_ONLY"
"""``0``: torch_xla writes new entries to its persistent cache (set with the path above)."""
RANK = "RANK"
"""A distributed launcher's rank of this process (torchrun); the diagnostics label events with it."""
WORLD_SIZE = "WORLD_SIZE"
"""A distributed launcher's number of processes (torchrun)."""
XLA_FLAGS = "XLA_FLAGS"
"""XLA's own flags, read once when XLA starts: ``xlabridge.pod`` sets ``--xla_dump_to`` for a run it
captures (keeping a user's own dump directory and options) and the host device count for its
partitioning worker."""
CPU_NUM_DEVICES = "CPU_NUM_DEVICES"
"""How many devices torch_xla's PJRT CPU client opens (read once at start-up)."""
XLA_HLO_DEBUG = "XLA_HLO_DEBUG"
"""``1``: torch_xla records each HLO instruction's Python stack and source line in its metadata."""
PT_XLA_DEBUG_LEVEL = "PT_XLA_DEBUG_LEVEL"
"""``2``: torch_xla writes every graph compilation and execution, its cause and frames."""
PT_XLA_DEBUG_FILE = "PT_XLA_DEBUG_FILE"
"""Where ``PT_XLA_DEBUG_LEVEL`` output goes (``xlabridge.pod._lazy`` reads it)."""
PT_XLA_DEBUG_MAX_FRAME = "PT_XLA_DEBUG_MAX_FRAME"
"""How many Python frames torch_xla's debug output keeps per execution (innermost first; 8 by
default, too few to reach the user's line from inside the Dynamo bridge or ``torch.nn``):
``xlabridge.pod`` raises it for a capture."""
XLA_SAVE_TENSORS_FILE = "XLA_SAVE_TENSORS_FILE"
"""torch_xla appends each synced graph (frames, hash, HLO) to this file (plus ``.<ordinal>``)."""
XLA_SAVE_TENSORS_FMT = "XLA_SAVE_TENSORS_FMT"
"""Format of the save-tensors file: ``hlo`` for HLO text."""
XLA_DUMP_POST_OPTIMIZATIONS = "XLA_DUMP_POST_OPTIMIZATIONS"
"""``1``: the save-tensors file holds the optimized (partitioned) module instead of torch_xla's HLO."""


def get(name: str, default: str | None = None) -> str | None:
    """The value of environment variable ``name`` (one of the names above), or ``default``."""
    return os.environ.get(name, default)


def put(name: str, value: str) -> None:
    """Set environment variable ``name`` (one of the names above) for this process and its children."""
    os.environ[name] = value


def cache_home() -> Path:
    """``$XDG_CACHE_HOME``, else ``~/.cache``: the base of xlabridge's per-user caches."""
    return Path(get(XDG_CACHE_HOME) or Path.home() / ".cache")
