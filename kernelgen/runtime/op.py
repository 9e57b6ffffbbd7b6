"""Load a built variant through tvm-ffi and call it with checked tensors on torch's current stream."""
from __future__ import annotations

import logging
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import knobs, resources
from ..build import toolchain as tc
from ..build.lifecycle import build, load_module
from ..build.store import Artifact
from ..codegen.launch import LaunchPlan, default_plan, plan_routes, resolve
from ..codegen.render import x_align
from ..errors import LayoutMismatch
from ..layout.layout import Layout
from ..layout.pages import pages_of
from ..spec.parse import load_spec
from ..spec.variant import TORCH_DTYPES, Variant
from ..tune import records
from ..tune.gpu import GpuInfo
from ..tune.gpu import current as current_gpu

if TYPE_CHECKING:
    import torch

_INDEX_DTYPES = ("int32", "int64")
PARAM_ALIGN = 16  # weight, bias and freqs are read with 16-byte loads
log = logging.getLogger("kernelgen")


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _describe(t: torch.Tensor) -> str:
    return f"{_dtype_name(t)} {list(t.shape)} on {t.device}"


class InputChecker:
    """Every check the kernel relies on, done on tensor metadata before anything is launched."""

    def __init__(self, v: Variant, layout: Layout, x_align: int) -> None:
        import torch

        self.v, self.layout = resolve(v), layout
        self.align = x_align
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

    def no_duplicate_slots(self, out_loc: Any, num_pages: int) -> None:
        """Debug mode (KERNELGEN_DEBUG=1; syncs the device): two rows of one call must not share a slot,
        since their fields would be written by different threads and could mix."""
        loc = out_loc[(out_loc >= 0) & (out_loc < num_pages * self.layout.page_size)]
        unique, counts = loc.unique(return_counts=True)
        if bool((counts > 1).any()):
            raise self.fail(f"out_loc names slot {int(unique[counts > 1][0])} more than once in one call; "
                            "the rows' bytes could mix: pass distinct slots (checked because KERNELGEN_DEBUG=1)")

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

    def explain(self, x: Any, weight: Any, bias: Any, freqs: Any, positions: Any, out_loc: Any, kvcache: Any,
                metadata_only: bool = False) -> None:
        """The slow path: find the first problem and raise a message that names it. With metadata_only
        (torch.compile's fake tensors have no storage) addresses are not checked."""
        v = self.v
        self.tensor("x", x, (TORCH_DTYPES[v.input_dtype],), (None, v.head_dim))
        n = x.shape[0]
        misaligned = not metadata_only and x.data_ptr() % self.align
        if x.stride(1) != 1 or (n > 1 and (x.stride(0) * v.elem_bytes) % self.align) or misaligned:
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
        self.cache(kvcache, metadata_only)
        for name, t in named:
            if name != "x" and not t.is_contiguous():
                raise self.fail(f"{name} must be contiguous")
            if not metadata_only and name in ("weight", "bias", "freqs") and t.data_ptr() % PARAM_ALIGN:
                raise self.fail(f"{name} must start at a {PARAM_ALIGN}-byte aligned address (a fresh tensor does)")
            if t.device != x.device:
                raise self.fail(f"{name} is on {t.device} but x is on {x.device}; put all tensors on one CUDA device")
        if x.device.type != "cuda":
            raise self.fail(f"tensors must be on a CUDA device, got {x.device}")

    def cache(self, kvcache: Any, metadata_only: bool = False) -> None:
        import torch

        if not isinstance(kvcache, torch.Tensor):
            raise self.fail(f"kvcache must be a torch tensor, got {type(kvcache).__name__}")
        row_stride = kvcache.stride(0) if kvcache.dim() == 2 else None
        self.layout.check_cache(tuple(kvcache.shape), _dtype_name(kvcache), row_stride)
        if kvcache.dim() == 2 and kvcache.stride(1) != 1:
            raise self.fail("kvcache must be contiguous")
        if not metadata_only and kvcache.data_ptr() % self.cache_align:
            raise self.fail(f"kvcache must start at a {self.cache_align}-byte aligned address")


@lru_cache(maxsize=None)
def _placeholder(device: Any) -> Any:
    import torch

    return torch.empty(0, dtype=torch.uint8, device=device)


class Op:
    """A built variant, callable as op(x, weight, freqs, positions, out_loc, kvcache, eps=1e-6, bias=None).

    Its build holds one or more launch configurations; each call picks one from the token count
    (the tuned dispatch, compiled into the library). `op.plan` says which serves which counts."""

    def __init__(self, artifact: Artifact, tuned_from: str = "defaults") -> None:
        self.artifact = artifact
        self.variant = resolve(artifact.variant)
        self.plan: LaunchPlan = artifact.launch_plan
        self.tuned_from = tuned_from  # the record file the dispatch came from, or "defaults"
        self.layout = pages_of(self.variant)
        self.checker = InputChecker(self.variant, self.layout, x_align(self.variant, self.plan))
        module = load_module(artifact.library)
        self.function = module[self.variant.name]
        self.config_function = module[f"{self.variant.name}_config"]
        self.debug = knobs.debug()  # read once: the call path reads no environment

    def __repr__(self) -> str:
        return f"Op({self.variant.name}, {self.layout.describe()}, {self.plan.describe()}, {self.artifact.library})"

    def __call__(self, x: torch.Tensor, weight: torch.Tensor | None, freqs: torch.Tensor | None,
                 positions: torch.Tensor | None, out_loc: torch.Tensor, kvcache: torch.Tensor, *,
                 eps: float = 1e-6, bias: torch.Tensor | None = None) -> None:
        """Write rows of x into kvcache at slots out_loc (rows with out_loc < 0 are skipped)."""
        if self.debug:
            self.checker.check(x, weight, bias, freqs, positions, out_loc, kvcache)
            self.checker.no_duplicate_slots(out_loc, kvcache.shape[0])
        try:  # the exported symbol checks every tensor before it launches (nothing is written on failure)
            self.launch(x, weight, bias, freqs, positions, out_loc, kvcache, eps)
        except Exception:
            # Refused, or not convertible: say what is wrong in full words; a launch error stays as it is.
            self.checker.explain(x, weight, bias, freqs, positions, out_loc, kvcache)
            raise

    def launch(self, x: torch.Tensor, weight: Any, bias: Any, freqs: Any, positions: Any,
               out_loc: torch.Tensor, kvcache: torch.Tensor, eps: float) -> None:
        """The unchecked call. It runs on torch's current stream, also under CUDA-graph capture:
        tvm-ffi sets its environment stream from the first CUDA torch tensor of a call (the
        stream and graph tests in tests/test_gpu.py hold it to that)."""
        if weight is None or bias is None or freqs is None or positions is None:
            empty = _placeholder(x.device)
            weight = empty if weight is None else weight
            bias = empty if bias is None else bias
            freqs = empty if freqs is None else freqs
            positions = empty if positions is None else positions
        self.function(x, weight, bias, freqs, positions, out_loc, kvcache, eps)

    def launch_config(self, config: int, pdl: bool, x: torch.Tensor, weight: Any, bias: Any, freqs: Any,
                      positions: Any, out_loc: torch.Tensor, kvcache: torch.Tensor, eps: float) -> None:
        """The unchecked call with one compiled configuration (index into op.plan.configs), for tuning and tests."""
        empty = _placeholder(x.device)
        args = [t if t is not None else empty for t in (x, weight, bias, freqs, positions, out_loc, kvcache)]
        self.config_function(*args, float(eps), int(config), bool(pdl))


_said_default: set[str] = set()


def tuned_plan(v: Variant, gpu: GpuInfo | None) -> tuple[LaunchPlan, str]:
    """The dispatch for v on gpu from the user's tuning records, else the shipped ones, else the
    variant's default launch (said once per variant, at debug level)."""
    found = None
    if gpu is not None and knobs.use_tuned():
        found = records.lookup([knobs.tuning_dir(), resources.tuned_dir()], gpu, v)
    if found is None:
        if v.name not in _said_default:
            _said_default.add(v.name)
            where = f"for {gpu.name} (sm_{gpu.capability.replace('.', '')})" if gpu else "(no GPU)"
            log.debug("%s: no tuning record %s; using the default launch %s (tune with `kernelgen tune %s`)",
                      v.name, where, resolve(v).launch.id, v.spec_name or "SPEC")
        return default_plan(v), "defaults"
    record, path = found
    routes = record.routes()
    if not knobs.pdl_allowed():
        routes = [(bound, replace(launch, pdl=False)) for bound, launch in routes]
    return plan_routes(v, routes), str(path)


_CURRENT = object()


def load_variant(variant: Variant, *, arch: str | None = None, cache_dir: str | Path | None = None,
                 gpu: GpuInfo | None | object = _CURRENT, plan: LaunchPlan | None = None) -> Op:
    """Build (or find) the variant with its tuned dispatch for `gpu` (default: the local GPU) and load it.
    An explicit `plan` overrides the tuning records."""
    archs = tc.resolve_archs(arch)
    where = "explicit plan"
    if plan is None:
        plan, where = tuned_plan(variant, current_gpu() if gpu is _CURRENT else gpu)  # type: ignore[arg-type]
    [artifact] = build([variant], tc.detect(), archs, Path(cache_dir) if cache_dir else None, launch_plans=[plan])
    return Op(artifact, where)


def load(spec: str | Path, variant: str, *, arch: str | None = None, cache_dir: str | Path | None = None,
         gpu: GpuInfo | None | object = _CURRENT) -> Op:
    """Build (or find in the cache) one variant of a spec, tuned for the GPU, and return it as a callable op."""
    return load_variant(load_spec(spec).variant(variant), arch=arch, cache_dir=cache_dir, gpu=gpu)
