"""The MX casts on TPUs as Mosaic (Pallas TPU) kernels: row-wise (``rows``), column-wise and both
layouts (``cols``), and the dequantizing kernel (``dequant``); ``lowering`` and
``lowering_cols`` put each kernel into torch_xla's lazy graph as one ``tpu_custom_call``."""
