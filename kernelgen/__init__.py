"""kernelgen: fused norm -> RoPE -> Hadamard -> quantize -> paged-KV-store CUDA kernels from YAML specs."""
from __future__ import annotations

__version__ = "0.1.0"

from .errors import (  # noqa: E402
    BuildError,
    GuardViolation,
    KernelgenError,
    LayoutMismatch,
    SpecError,
    ToolchainError,
    TuningError,
)
from .layout.layout import Layout, layout_of  # noqa: E402
from .runtime.export import load_exported  # noqa: E402
from .runtime.op import Op, load, load_variant  # noqa: E402
from .spec.parse import Spec, load_spec, parse_spec  # noqa: E402
from .spec.variant import Launch, Variant  # noqa: E402

__all__ = [
    "BuildError", "GuardViolation", "KernelgenError", "LayoutMismatch", "SpecError", "ToolchainError", "TuningError",
    "Layout", "layout_of", "Op", "load", "load_exported", "load_variant", "Spec", "load_spec", "parse_spec", "Launch", "Variant",
]
