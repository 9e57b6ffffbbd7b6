"""Load a built variant through tvm-ffi and call it with checked tensors on torch's current stream."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..build import toolchain as tc
from ..build.lifecycle import Artifact, build
from ..codegen.launch import resolve
from ..errors import LayoutMismatch
from ..layout.layout import Layout
from ..layout.pages import pages_of
from ..spec.parse import load_spec
from ..spec.variant import TORCH_DTYPES, Variant

if TYPE_CHECKING:
    import torch

_INDEX_DTYPES = ("int32", "int64")
PARAM_ALIGN = 16  # weight, bias and freqs are read with 16-byte loads


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _describe(t: torch.Tensor) -> str:
    return f"{_dtype_name(t)} {list(t.shape)} on {t.device}"


class InputChecker:
    """Every check the kernel relies on, done on tensor metadata before anything is launched."""

    def __init__(self, v: Variant, layout: Layout) -> None:
        import torch

        self.v, self.layout = resolve(v), layout
        self.align = self.v.launch.vec * self.v.elem_bytes
        self.cache_align = layout.store_align
        self.x_dtype = getattr(torch, TORCH_DTYPES[self.v.input_dtype])
        self.w_dtype = getattr(torch, TORCH_DTYPES[self.v.weight_dtype])
        self.index_dtypes = (torch.int32, torch.int64)
        self.u8, self.f32 = torch.uint8, torch.float32

    def check(self, x: Any, weight: Any, bias: Any, freqs: Any, positions: Any, out_loc: Any, kvcache: Any) -> None:
        """Raise LayoutMismatch naming the first problem; the common all-good case takes the fast path."""
        try:
            if self.fast_ok(x, weight, bias, freqs, positions, out_loc, kvcache):
                return
        except (AttributeError, TypeError, IndexError):  # not tensors: the explanation says which
            pass
        self.explain(x, weight, bias, freqs, positions, out_loc, kvcache)
        raise self.fail("inputs rejected by the fast check but no reason found; please report this")

    def fast_ok(self, x: Any, weight: Any, bias: Any, freqs: Any, positions: Any, out_loc: Any, kvcache: Any) -> bool:
        """The same conditions as explain(), as one cheap expression (serving calls this per step)."""
        v, dev = self.v, x.device
        n = x.shape[0]
        ok = (dev.type == "cuda" and x.dtype is self.x_dtype and x.dim() == 2 and x.shape[1] == v.head_dim
              and x.stride(1) == 1 and (n <= 1 or (x.stride(0) * v.elem_bytes) % self.align == 0)
              and x.data_ptr() % self.align == 0
              and self._index_ok(out_loc, n, dev)
              and kvcache.dtype is self.u8 and kvcache.dim() == 2 and kvcache.shape[1] == self.layout.page_bytes
              and (kvcache.stride(0) == self.layout.page_bytes or kvcache.shape[0] <= 1) and kvcache.stride(1) == 1
              and kvcache.device == dev and kvcache.data_ptr() % self.cache_align == 0)
        if ok and v.norm != "none":
            ok = self._vector_ok(weight, self.w_dtype, dev) and (not v.norm_bias or self._vector_ok(bias, self.w_dtype, dev))
        if ok and v.rope_dim:
            ok = (freqs.dtype is self.f32 and freqs.dim() == 2 and freqs.shape[1] == v.rope_dim
                  and freqs.device == dev and freqs.is_contiguous() and freqs.data_ptr() % PARAM_ALIGN == 0
                  and self._index_ok(positions, n, dev))
        return bool(ok)

    def _index_ok(self, t: Any, n: int, dev: Any) -> bool:
        return t.dtype in self.index_dtypes and t.dim() == 1 and t.shape[0] == n and t.device == dev and t.is_contiguous()

    def _vector_ok(self, t: Any, dtype: Any, dev: Any) -> bool:
        return (t.dtype is dtype and t.dim() == 1 and t.shape[0] == self.v.head_dim and t.device == dev
                and t.is_contiguous() and t.data_ptr() % PARAM_ALIGN == 0)

    def fail(self, what: str) -> LayoutMismatch:
        return LayoutMismatch(f"{self.v.name}: {what}")

    def tensor(self, name: str, t: Any, dtypes: tuple[str, ...], shape: tuple[int | None, ...]) -> None:
        import torch

        want = f"{'/'.join(dtypes)} [{', '.join('N' if s is None else str(s) for s in shape)}]"
        if not isinstance(t, torch.Tensor):
            raise self.fail(f"{name} must be a torch tensor {want}, got {type(t).__name__}")
        if _dtype_name(t) not in dtypes or t.dim() != len(shape) or any(
                s is not None and s != got for s, got in zip(shape, t.shape)):
            raise self.fail(f"{name} must be {want}, got {_describe(t)}")

    def explain(self, x: Any, weight: Any, bias: Any, freqs: Any, positions: Any, out_loc: Any, kvcache: Any) -> None:
        """The slow path: find the first problem and raise a message that names it."""
        v = self.v
        self.tensor("x", x, (TORCH_DTYPES[v.input_dtype],), (None, v.head_dim))
        n = x.shape[0]
        if x.stride(1) != 1 or (n > 1 and (x.stride(0) * v.elem_bytes) % self.align) or x.data_ptr() % self.align:
            raise self.fail(f"x rows must be contiguous and {self.align}-byte aligned (stride {tuple(x.stride())})")
        self.tensor("out_loc", out_loc, _INDEX_DTYPES, (n,))
        named = [("x", x), ("out_loc", out_loc), ("kvcache", kvcache)]
        if v.norm != "none":
            self.tensor("weight", weight, (TORCH_DTYPES[v.weight_dtype],), (v.head_dim,))
            named.append(("weight", weight))
        if v.norm_bias:
            self.tensor("bias", bias, (TORCH_DTYPES[v.weight_dtype],), (v.head_dim,))
            named.append(("bias", bias))
        if v.rope_dim:
            self.tensor("freqs", freqs, ("float32",), (None, v.rope_dim))
            self.tensor("positions", positions, _INDEX_DTYPES, (n,))
            named += [("freqs", freqs), ("positions", positions)]
        self.cache(kvcache)
        for name, t in named:
            if name != "x" and not t.is_contiguous():
                raise self.fail(f"{name} must be contiguous")
            if name in ("weight", "bias", "freqs") and t.data_ptr() % PARAM_ALIGN:
                raise self.fail(f"{name} must start at a {PARAM_ALIGN}-byte aligned address (a fresh tensor does)")
            if t.device != x.device:
                raise self.fail(f"{name} is on {t.device} but x is on {x.device}; put all tensors on one CUDA device")
        if x.device.type != "cuda":
            raise self.fail(f"tensors must be on a CUDA device, got {x.device}")

    def cache(self, kvcache: Any) -> None:
        import torch

        if not isinstance(kvcache, torch.Tensor):
            raise self.fail(f"kvcache must be a torch tensor, got {type(kvcache).__name__}")
        row_stride = kvcache.stride(0) if kvcache.dim() == 2 else None
        self.layout.check_cache(tuple(kvcache.shape), _dtype_name(kvcache), row_stride)
        if kvcache.dim() == 2 and kvcache.stride(1) != 1:
            raise self.fail("kvcache must be contiguous")
        if kvcache.data_ptr() % self.cache_align:
            raise self.fail(f"kvcache must start at a {self.cache_align}-byte aligned address")


@lru_cache(maxsize=None)
def _load_module(path: str) -> Any:
    import tvm_ffi

    return tvm_ffi.load_module(path)


@lru_cache(maxsize=None)
def _placeholder(device: str) -> Any:
    import torch

    return torch.empty(0, dtype=torch.uint8, device=device)


class Op:
    """A built variant, callable as op(x, weight, freqs, positions, out_loc, kvcache, eps=1e-6, bias=None)."""

    def __init__(self, artifact: Artifact) -> None:
        self.artifact = artifact
        self.variant = resolve(artifact.variant)
        self.layout = pages_of(self.variant)
        self.checker = InputChecker(self.variant, self.layout)
        self.function = _load_module(str(artifact.library))[self.variant.name]

    def __repr__(self) -> str:
        return f"Op({self.variant.name}, {self.layout.describe()}, {self.artifact.library})"

    def __call__(self, x: torch.Tensor, weight: torch.Tensor | None, freqs: torch.Tensor | None,
                 positions: torch.Tensor | None, out_loc: torch.Tensor, kvcache: torch.Tensor, *,
                 eps: float = 1e-6, bias: torch.Tensor | None = None) -> None:
        """Write rows of x into kvcache at slots out_loc (rows with out_loc < 0 are skipped)."""
        self.checker.check(x, weight, bias, freqs, positions, out_loc, kvcache)
        self.launch(x, weight, bias, freqs, positions, out_loc, kvcache, eps)

    def launch(self, x: torch.Tensor, weight: Any, bias: Any, freqs: Any, positions: Any,
               out_loc: torch.Tensor, kvcache: torch.Tensor, eps: float) -> None:
        """The unchecked call. It runs on torch's current stream, also under CUDA-graph capture:
        tvm-ffi sets its environment stream from the first CUDA torch tensor of a call (the
        stream and graph tests in tests/test_gpu.py hold it to that)."""
        empty = _placeholder(str(x.device))
        args = [t if t is not None else empty for t in (x, weight, bias, freqs, positions, out_loc, kvcache)]
        self.function(*args, float(eps))


def load_variant(variant: Variant, *, arch: str | None = None, cache_dir: str | Path | None = None) -> Op:
    archs = tc.resolve_archs(arch)
    [artifact] = build([variant], tc.detect(), archs, Path(cache_dir) if cache_dir else None)
    return Op(artifact)


def load(spec: str | Path, variant: str, *, arch: str | None = None, cache_dir: str | Path | None = None) -> Op:
    """Build (or find in the cache) one variant of a spec and return it as a callable op."""
    return load_variant(load_spec(spec).variant(variant), arch=arch, cache_dir=cache_dir)
