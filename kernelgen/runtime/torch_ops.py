"""Loaded variants as torch.library custom ops (`torch.ops.kernelgen.<variant>`), for torch.compile and graphs.

Each op mutates its cache in place (`Tensor(a!) kvcache`, declared so torch.compile and CUDA
graphs know) and returns nothing. Its fake implementation checks shapes and dtypes only: no
data_ptr (fake tensors have no storage), no build, no device work. Build and load happen in
`register` (call it before tracing or capture); the op itself never compiles anything."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from .op import Op

if TYPE_CHECKING:
    import torch

NAMESPACE = "kernelgen"
SCHEMA = ("(Tensor x, Tensor? weight, Tensor? freqs, Tensor? positions, Tensor out_loc, Tensor(a!) kvcache, "
          "float eps=1e-06, Tensor? bias=None, Tensor? scale=None) -> ()")
_registered: dict[str, Op] = {}  # variant name -> the op its custom op calls (re-registering swaps it)
_library: Any = None


def _lib() -> Any:
    global _library
    if _library is None:
        import torch

        _library = torch.library.Library(NAMESPACE, "FRAGMENT")
    return _library


def _impl(name: str) -> Callable[..., None]:
    def run(x: torch.Tensor, weight: torch.Tensor | None, freqs: torch.Tensor | None, positions: torch.Tensor | None,
            out_loc: torch.Tensor, kvcache: torch.Tensor, eps: float = 1e-6, bias: torch.Tensor | None = None,
            scale: torch.Tensor | None = None) -> None:
        _registered[name](x, weight, freqs, positions, out_loc, kvcache, eps=eps, bias=bias, scale=scale)
    return run


def _fake(name: str) -> Callable[..., None]:
    def check(x: torch.Tensor, weight: torch.Tensor | None, freqs: torch.Tensor | None,
              positions: torch.Tensor | None, out_loc: torch.Tensor, kvcache: torch.Tensor, eps: float = 1e-6,
              bias: torch.Tensor | None = None, scale: torch.Tensor | None = None) -> None:
        checker = _registered[name].checker
        checker.check(x, weight, bias, freqs, positions, out_loc, kvcache, scale, metadata_only=True)
    return check


def register(op: Op) -> Any:
    """Make op callable as torch.ops.kernelgen.<variant name> (idempotent; a later op of the same name
    replaces the earlier one's implementation). Returns the torch op."""
    import torch

    name = op.variant.name
    if name not in _registered:
        lib = _lib()
        lib.define(name + SCHEMA)
        impl = _impl(name)
        lib.impl(name, impl, "CUDA")
        lib.impl(name, impl, "CPU")  # so a CPU tensor gets kernelgen's message, not a dispatch error
        torch.library.register_fake(f"{NAMESPACE}::{name}", _fake(name), lib=lib)
    _registered[name] = op
    return getattr(torch.ops.kernelgen, name)
