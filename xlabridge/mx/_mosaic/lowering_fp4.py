"""placeholder"""
def cast_takes(x, block_size): return False
def dequantize_takes(d, b, t): return False
def matmul_takes(x, d, b): return False
