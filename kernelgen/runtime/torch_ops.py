"""Loaded variants as torch.library custom ops (`torch.ops.kernelgen.<variant>`), for torch.compile and graphs.

Each op mutates its cache in place (`Tensor(a!) kvcache`, declared so torch.compile and CUDA
graphs know) and returns nothing. Its fake implementation checks shapes and dtypes only: no
data_ptr (fake tensors have no storage), no build, no device work. Build and load happen in
`register` (call it before tracing or capture); the op itself never compiles anything."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from .group_op import GroupOp
from .op import Op

if TYPE_CHECKING:
    import torch

NAMESPACE = "kernelgen"
SCHEMA = ("(Tensor x, Tensor? weight, Tensor? freqs, Tensor? positions, Tensor out_loc, Tensor(a!) kvcache, "
          "float eps=1e-06, Tensor? bias=None, Tensor? scale=None) -> ()")
_registered: dict[str, Any] = {}  # variant or group name -> the op its custom op calls (re-registering swaps it)
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


def group_schema(op: GroupOp) -> str:
    """A launch group's schema: its symbol's tensors by name, each output (a member's dense output or cache)
    declared mutated in place with an alias set of its own, then eps."""
    outputs = {op.group.names(role)["kvcache"] for role in op.group.roles}
    sets = iter("abcdefgh")
    params = [f"Tensor({next(sets)}!) {a}" if a in outputs else f"Tensor {a}" for a in op.args]
    return "(" + ", ".join(params + ["float eps=1e-06"]) + ") -> ()"


def register_group(op: GroupOp) -> Any:
    """register() for a launch group: torch.ops.kernelgen.<group name>(q, k, v, ..., q_out, k_cache, v_cache, ...,
    eps=1e-6), its arguments in `op.args` order. Under torch.compile pass a q_out of its own (a Q output that
    aliases the q input is for eager calls and CUDA graphs)."""
    import torch

    name = op.group.name
    names = op.args
    if name not in _registered:
        lib = _lib()
        lib.define(name + group_schema(op))

        def run(*args: Any, **kwargs: Any) -> None:
            tensors, rest = args[:len(names)], args[len(names):]
            eps = kwargs.get("eps", rest[0] if rest else 1e-6)
            _registered[name](**dict(zip(names, tensors)), eps=eps)

        def check(*args: Any, **kwargs: Any) -> None:
            _registered[name].checker.check(dict(zip(names, args[:len(names)])), metadata_only=True)

        lib.impl(name, run, "CUDA")
        lib.impl(name, run, "CPU")
        torch.library.register_fake(f"{NAMESPACE}::{name}", check, lib=lib)
    _registered[name] = op
    return getattr(torch.ops.kernelgen, name)
