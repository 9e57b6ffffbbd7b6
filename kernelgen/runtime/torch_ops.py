"""Loaded kernels as torch.library custom ops (`torch.ops.kernelgen.<name>`), for torch.compile and graphs.

Each op mutates its outputs in place (a variant's `Tensor(a!) kvcache`, a launch group's every output, declared so
torch.compile and CUDA graphs know) and returns nothing. Its fake implementation checks shapes and dtypes only: no
data_ptr (fake tensors have no storage), no build, no device work. Build and load happen in
`register` (call it before tracing or capture); the op itself never compiles anything."""
from __future__ import annotations

from typing import Any

from .op import Op

NAMESPACE = "kernelgen"
SCHEMA = ("(Tensor x, Tensor? weight, Tensor? freqs, Tensor? positions, Tensor out_loc, Tensor(a!) kvcache, "
          "float eps=1e-06, Tensor? bias=None, Tensor? scale=None) -> ()")
_VARIANT_PARAMS = ("x", "weight", "freqs", "positions", "out_loc", "kvcache", "eps", "bias", "scale")  # SCHEMA's
_registered: dict[str, Any] = {}  # variant or group name -> the op its custom op calls (re-registering swaps it)
_library: Any = None


def _lib() -> Any:
    global _library
    if _library is None:
        import torch

        _library = torch.library.Library(NAMESPACE, "FRAGMENT")
    return _library


def group_schema(op: Op) -> str:
    """A launch group's schema: its symbol's tensors by name, each output (a member's dense output or cache)
    declared mutated in place with an alias set of its own, then eps."""
    outputs = {m.names["kvcache"] for m in op.members}
    sets = iter("abcdefgh")
    params = [f"Tensor({next(sets)}!) {a}" if a in outputs else f"Tensor {a}" for a in op.args]
    return "(" + ", ".join(params + ["float eps=1e-06"]) + ") -> ()"


def schema(op: Op) -> tuple[str, tuple[str, ...]]:
    """The custom op's schema and its parameters in order: a variant's takes the family's tensors as its op does
    (SCHEMA), a launch group's its symbol's (group_schema)."""
    if op.positional:
        return SCHEMA, _VARIANT_PARAMS
    return group_schema(op), (*op.args, "eps")


def register(op: Op) -> Any:
    """Make op callable as torch.ops.kernelgen.<name> (idempotent; a later op of the same name replaces the earlier
    one's implementation). Returns the torch op: a variant's takes (x, weight, freqs, positions, out_loc, kvcache,
    eps=1e-6, bias=None, scale=None); a launch group's (q, k, v, ..., q_out, k_cache, v_cache, ..., eps=1e-6), its
    arguments in `op.args` order (under torch.compile pass a q_out of its own: a Q output that aliases the q input
    is for eager calls and CUDA graphs)."""
    import torch

    name = op.variant.name
    if name not in _registered:
        text, params = schema(op)

        def named(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[dict[str, Any], float]:
            given = {**dict(zip(params, args)), **kwargs}
            return given, given.pop("eps", 1e-6)

        def run(*args: Any, **kwargs: Any) -> None:
            tensors, eps = named(args, kwargs)
            _registered[name](**tensors, eps=eps)

        def check(*args: Any, **kwargs: Any) -> None:
            _registered[name].checker.check(named(args, kwargs)[0], metadata_only=True)

        lib = _lib()
        lib.define(name + text)
        lib.impl(name, run, "CUDA")
        lib.impl(name, run, "CPU")  # so a CPU tensor gets kernelgen's message, not a dispatch error
        torch.library.register_fake(f"{NAMESPACE}::{name}", check, lib=lib)
    _registered[name] = op
    return getattr(torch.ops.kernelgen, name)


register_group = register  # a launch group's register(), by its earlier name
