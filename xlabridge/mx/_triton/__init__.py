"""The MX casts on CUDA tensors as Triton kernels: row-wise (``rows``), column-wise and both
layouts from one read (``cols``, its kernel in ``cols_kernel``). MXFP4: the cast and its inverse
(``fp4``, kernels in ``fp4_kernels``) and the matmul reading MXFP4 weights (``fp4_matmul``, its
kernel in ``fp4_matmul_kernel``)."""
