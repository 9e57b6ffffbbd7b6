"""Load a built variant through tvm-ffi and call it with checked tensors on torch's current stream."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import knobs
from ..build import toolchain as tc
from ..build.lifecycle import build, load_module
from ..build.store import Artifact
from ..codegen import checks
from ..codegen.launch import LaunchPlan, resolve
from ..codegen.render import x_align
from ..errors import LayoutMismatch
from ..layout.layout import Layout
from ..layout.pages import pages_of
from ..spec.group import Group
from ..spec.variant import Variant
from ..tune import lookup
from ..tune.gpu import GpuInfo
from ..tune.gpu import current as current_gpu

if TYPE_CHECKING:
    import torch


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _ints(values: Any) -> str:
    return "[" + ", ".join(str(int(s)) for s in values) + "]"


class InputChecker:
    """The Python side of the variant's check table (codegen/checks.py): the exported symbol applies
    the same checks in the same order, so a refusal reads the same from Python and from C++. Used to
    explain a refusal of the symbol, on fake tensors (torch.compile), and per call in debug mode."""

    def __init__(self, v: Variant, layout: Layout, x_align: int, names: dict[str, str] | None = None,
                 prefix: str = "") -> None:
        self.v, self.layout = resolve(v), layout
        self.names = {a: (names or {}).get(a, a) for a in checks.ARGS}  # family argument -> the symbol's name
        self.prefix = prefix or self.v.name  # what messages start with (a launch group's name)
        self.checks = checks.table(self.v, layout, x_align, names)
        self.used = checks.used_args(self.v)  # family names, ARGS order

    def fail(self, what: str) -> LayoutMismatch:
        return LayoutMismatch(f"{self.prefix}: {what}")

    def _named(self, tensors: tuple[Any, ...]) -> dict[str, Any]:
        return {self.names[a]: t for a, t in zip(checks.ARGS, tensors)}

    def check(self, x: Any, weight: Any, bias: Any, freqs: Any, positions: Any, out_loc: Any, kvcache: Any,
              scale: Any = None, metadata_only: bool = False) -> None:
        """Raise LayoutMismatch with the message of the first check that fails (the op calls this after
        the symbol refused, to say why in Python; debug mode calls it on every call). With
        metadata_only (torch.compile's fake tensors have no storage) addresses are not checked.
        Only Python can be handed something that is not a tensor: that is checked first."""
        import torch

        args = self._named((x, weight, bias, freqs, positions, out_loc, kvcache, scale))
        for name in (self.names[a] for a in self.used):
            if not isinstance(args[name], torch.Tensor):
                raise self.fail(f"{name} must be a torch tensor, got {type(args[name]).__name__}")
        failed = self._first_failure(args, metadata_only)
        if failed is not None:
            raise LayoutMismatch(failed.text(self.prefix, self._got(failed, args[failed.arg])))

    def first_failure(self, x: Any, weight: Any, bias: Any, freqs: Any, positions: Any, out_loc: Any, kvcache: Any,
                      scale: Any = None, metadata_only: bool = False) -> checks.Check | None:
        """The first check of the table that the tensors fail (None: all pass)."""
        return self._first_failure(self._named((x, weight, bias, freqs, positions, out_loc, kvcache, scale)),
                                   metadata_only)

    def _first_failure(self, args: dict[str, Any], metadata_only: bool) -> checks.Check | None:
        x = args[self.names["x"]]
        for c in self.checks:
            if not (metadata_only and c.kind == "aligned") and not self._holds(c, args[c.arg], x):
                return c
        return None

    @staticmethod
    def _holds(c: checks.Check, t: Any, x: Any) -> bool:
        if c.kind == "dtype_shape":
            return (_dtype_name(t) in c.dtypes and t.dim() == len(c.shape)
                    and all(got == (x.shape[0] if s == "N" else s) for s, got in zip(c.shape, t.shape)
                            if s == "N" or isinstance(s, int)))
        if c.kind == "cuda":
            return bool(t.device.type == "cuda")
        if c.kind == "device":
            return bool(t.device == x.device)
        if c.kind == "contiguous":
            return bool(t.is_contiguous())
        if c.kind == "rows":
            return t.stride(1) == 1 and (t.shape[0] <= 1 or t.stride(0) * t.element_size() % c.value == 0)
        if c.kind == "aligned":
            return t.data_ptr() % c.value == 0
        if c.kind == "page_bytes":
            return t.shape[1] == c.value
        if c.kind == "pool_half":
            return t.stride(1) == 1 and (t.shape[0] <= 1 or t.stride(0) == c.value)
        raise AssertionError(f"unknown check kind {c.kind}")

    @staticmethod
    def _got(c: checks.Check, t: Any) -> str:
        what = checks.GOT[c.kind]
        if what == "description":
            return f"{_dtype_name(t)} {_ints(t.shape)} on {t.device}"
        if what == "strides":
            return f"strides {_ints(t.stride())}"
        if what == "address":
            return f"an address {t.data_ptr() % c.value} bytes past a {c.value}-byte boundary"
        return str(int(t.shape[1]))

    def no_duplicate_slots(self, out_loc: Any, num_pages: int) -> None:
        """Debug mode (KERNELGEN_DEBUG=1; syncs the device): two rows of one call must not share a slot,
        since their fields would be written by different threads and could mix."""
        loc = out_loc[(out_loc >= 0) & (out_loc < num_pages * self.layout.page_size)]
        unique, counts = loc.unique(return_counts=True)
        if bool((counts > 1).any()):
            raise self.fail(f"out_loc names slot {int(unique[counts > 1][0])} more than once in one call; "
                            "the rows' bytes could mix: pass distinct slots (checked because KERNELGEN_DEBUG=1)")


class Op:
    """A built variant, callable as op(x, weight, freqs, positions, out_loc, kvcache, eps=1e-6, bias=None, scale=None).

    Its build holds one or more launch configurations; each call picks one from the token count
    (the tuned dispatch, compiled into the library). `op.plan` says which serves which counts.
    The exported symbol takes only the tensors the variant uses (`op.args`, in checks.ARGS order, then
    eps): the op passes those and drops the rest (a weight given to a variant without a norm is ignored)."""

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
        self.args = self.checker.used
        # (x, weight, bias, freqs, positions, out_loc, kvcache, scale) -> the symbol's tensors, in C
        self.pick = checks.symbol_picker(self.args)
        self.debug = knobs.debug()  # read once: the call path reads no environment

    def __repr__(self) -> str:
        return f"Op({self.variant.name}, {self.layout.describe()}, {self.plan.describe()}, {self.artifact.library})"

    def variant_for(self, num_tokens: int) -> Variant:
        """The variant with the launch configuration a call of num_tokens rows runs. The reference
        replays that configuration's reduction order, so compare a call's bytes against this one."""
        return self.variant.with_launch(self.plan.pick(num_tokens)[0].instance)

    def __call__(self, x: torch.Tensor, weight: torch.Tensor | None, freqs: torch.Tensor | None,
                 positions: torch.Tensor | None, out_loc: torch.Tensor | None, kvcache: torch.Tensor, *,
                 eps: float = 1e-6, bias: torch.Tensor | None = None, scale: torch.Tensor | None = None) -> None:
        """Write rows of x into kvcache at slots out_loc (rows with out_loc < 0 are skipped; a slots: token variant
        takes no out_loc and writes token t to row t of kvcache, its dense output). `scale` is the
        float32 [1] device tensor of a format with a per-tensor scale (nvfp4's g, fp8_scaled's k_scale), else
        unused."""
        if self.debug:
            self.checker.check(x, weight, bias, freqs, positions, out_loc, kvcache, scale)
            if "out_loc" in self.args:
                self.checker.no_duplicate_slots(out_loc, kvcache.shape[0])
        try:  # the exported symbol checks every tensor before it launches (nothing is written on failure)
            self.function(*self.pick((x, weight, bias, freqs, positions, out_loc, kvcache, scale)), eps)
        except Exception:
            # Refused, or not convertible: say what is wrong in full words; a launch error stays as it is.
            self.checker.check(x, weight, bias, freqs, positions, out_loc, kvcache, scale)
            raise

    def launch(self, x: torch.Tensor, weight: Any, bias: Any, freqs: Any, positions: Any,
               out_loc: torch.Tensor, kvcache: torch.Tensor, scale: Any, eps: float) -> None:
        """The call without Python's checks (the exported symbol still checks every argument, in the same
        words, and raises ValueError). It runs on torch's current stream, also under CUDA-graph capture:
        tvm-ffi sets its environment stream from the first CUDA torch tensor of a call (the
        stream and graph tests in tests/test_gpu.py hold it to that)."""
        self.function(*self.pick((x, weight, bias, freqs, positions, out_loc, kvcache, scale)), eps)

    def launch_config(self, config: int, pdl: bool, x: torch.Tensor, weight: Any, bias: Any, freqs: Any,
                      positions: Any, out_loc: torch.Tensor, kvcache: torch.Tensor, scale: Any, eps: float) -> None:
        """`launch` with one compiled configuration (index into op.plan.configs), for tuning and tests."""
        self.config_function(*self.pick((x, weight, bias, freqs, positions, out_loc, kvcache, scale)), float(eps),
                             int(config), bool(pdl))


def tuned_plan(v: Variant | Group, gpu: GpuInfo | None) -> tuple[LaunchPlan, str]:
    """The dispatch the tuning records name for v on gpu (the user's, then the shipped ones), else the
    variant's default launch, and where it came from; before the device code is checked (a load builds it
    and checks that: kernelgen/tune/lookup.py build_tuned)."""
    found = lookup.tuned(v, [gpu] if gpu is not None else [])
    return found.plan, found.source


_CURRENT = object()


def load_variant(variant: Variant, *, arch: str | None = None, cache_dir: str | Path | None = None,
                 gpu: GpuInfo | None | object = _CURRENT, plan: LaunchPlan | None = None) -> Op:
    """Build (or find) the variant with its tuned dispatch for `gpu` (default: the local GPU) and load it.
    An explicit `plan` overrides the tuning records."""
    artifact, where = build_for(variant, arch, cache_dir, plan, gpu)
    return Op(artifact, where)


def build_for(v: Variant | Group, arch: str | None, cache_dir: str | Path | None, plan: LaunchPlan | None,
              gpu: GpuInfo | None | object) -> tuple[Artifact, str]:
    """The artifact a load runs and where its dispatch came from: an explicit plan, else the tuning record for
    `gpu` (default: the local GPU) whose device code is what this kernelgen builds, else the defaults."""
    archs, where = tc.resolve_archs(arch), Path(cache_dir) if cache_dir else None
    if plan is not None:
        [artifact] = build([v], tc.detect(), archs, where, launch_plans=[plan])
        return artifact, "explicit plan"
    on = current_gpu() if gpu is _CURRENT else gpu
    [(artifact, found)] = lookup.build_tuned([v], [on] if isinstance(on, GpuInfo) else [], tc.detect(), archs, where)
    return artifact, found.source
