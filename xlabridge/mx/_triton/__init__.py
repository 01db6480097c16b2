"""The MX casts on CUDA tensors as Triton kernels: row-wise (``rows``), column-wise and both
layouts from one read (``cols``, its kernel in ``cols_kernel``)."""
