"""Hand-written CUDA device headers included by generated kernels."""
