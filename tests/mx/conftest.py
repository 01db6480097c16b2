"""Without a CUDA GPU, the MX Triton kernels run in Triton's CPU interpreter (test_mxfp4_triton.py).

Triton decides whether a function is interpreted when ``triton.jit`` decorates it, its own library
(``tl.zeros``...) included, at Triton's import; so the variable is set here, before the tests of
this directory import anything that imports Triton (``torch._dynamo`` does).
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
