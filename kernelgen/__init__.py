"""kernelgen: fused norm -> RoPE -> Hadamard -> quantize -> paged-KV-store CUDA kernels from YAML specs."""
from __future__ import annotations

__version__ = "0.1.0"
