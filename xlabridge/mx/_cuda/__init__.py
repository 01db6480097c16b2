"""CUDA C++ kernels of ``xlabridge.mx``, compiled at run time by NVRTC (``_runtime``): the MXFP4
decode matmul for Hopper and newer, with ``mma.sync`` and ``x`` in registers (``fp4_decode``, its
source ``fp4_decode.cu``) and with the warpgroup MMA and ``x`` in shared memory (``fp4_wgmma``,
``fp4_wgmma.cu``, Hopper's ``sm_90a`` only); both put ``fp4_common.cuh`` first, and both are
launched to overlap the kernel before them (``_runtime``'s dependent launch). ``x_order`` puts ``x``
in the order either reads it, in one launch. ``dispatch`` says which of them a configuration
belongs to; ``_counts`` holds the arrival counters of split-K launches."""

from pathlib import Path

COMMON = Path(__file__).with_name("fp4_common.cuh")
"""The device code every kernel here puts before its own source (loads, the E2M1 decoder, launch order)."""
