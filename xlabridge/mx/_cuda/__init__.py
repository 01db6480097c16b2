"""CUDA C++ kernels of ``xlabridge.mx``, compiled at run time by NVRTC (``_runtime``): the MXFP4
decode matmul for Hopper and newer (``fp4_decode``, its source ``fp4_decode.cu``)."""
