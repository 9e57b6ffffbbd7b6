"""kernelgen: fused norm -> RoPE -> Hadamard -> quantize -> paged-KV-store CUDA kernels from YAML specs.

The public API below loads on first use (PEP 562), so `import kernelgen`, and every `kernelgen ...` command
that imports a submodule, does not pay for the stages it never touches (Jinja, YAML, the runtime)."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__
from .errors import (
    BuildError,
    GuardViolation,
    KernelgenError,
    LayoutMismatch,
    SpecError,
    ToolchainError,
    TuningError,
)

if TYPE_CHECKING:
    from .layout.layout import Layout, layout_of
    from .runtime.export import load_exported
    from .runtime.loader import load
    from .runtime.op import Op, load_variant
    from .spec.parse import Spec, load_spec, parse_spec
    from .spec.variant import Launch, Variant

# name -> the module that defines it
_LAZY = {
    "Layout": ".layout.layout", "layout_of": ".layout.layout",
    "load_exported": ".runtime.export",
    "Op": ".runtime.op", "load": ".runtime.loader", "load_variant": ".runtime.op",
    "Spec": ".spec.parse", "load_spec": ".spec.parse", "parse_spec": ".spec.parse",
    "Launch": ".spec.variant", "Variant": ".spec.variant",
}

__all__ = [
    "__version__",
    "BuildError", "GuardViolation", "KernelgenError", "LayoutMismatch", "SpecError", "ToolchainError", "TuningError",
    "Layout", "layout_of", "Op", "load", "load_exported", "load_variant", "Spec", "load_spec", "parse_spec", "Launch", "Variant",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'kernelgen' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
