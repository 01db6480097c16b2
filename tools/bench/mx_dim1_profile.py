"""One launch each of a copy and the column-wise kernel (its loads marked ``evict_last`` and
``evict_first``) on a bf16 16384 x 8192 input, for Nsight Compute (DRAM bytes, L2 sectors,
occupancy):

    ncu --clock-control none -k 'regex:mxfp8|vectorized_elementwise' --metrics ... \\
        python3 tools/bench/mx_dim1_profile.py > tools/bench/results/mx_dim1_profile.txt
"""
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from xlabridge.mx._triton import cols as _triton_cols  # noqa: E402

x = torch.empty(1, 16384, 8192, device="cuda", dtype=torch.bfloat16).normal_()
dst = torch.empty_like(x)
dst.copy_(x)
_triton_cols._launch(x, 32, "floor", both=False, config=_triton_cols.CONFIG)
_triton_cols._launch(x, 32, "floor", both=False, config=_triton_cols.CONFIG[:5] + ("evict_first",))
torch.cuda.synchronize()
