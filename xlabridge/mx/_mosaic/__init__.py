"""The MX casts on TPUs as Mosaic (Pallas TPU) kernels: row-wise (``rows``), column-wise and both
layouts (``cols``), and the dequantizing kernel (``dequant``); ``lowering`` and
``lowering_cols`` put each kernel into torch_xla's lazy graph as one ``tpu_custom_call``. MXFP4:
the cast and its inverse (``fp4``) and the matmul reading MXFP4 weights (``fp4_matmul``), put into
the graph by ``lowering_fp4``."""
