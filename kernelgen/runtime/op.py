"""Load a built kernel through tvm-ffi and call it with checked tensors on torch's current stream.

A kernel is a launch group of members (codegen/render.py `members`): a variant is a group of one member (role "",
the family's argument names), a launch group its members under their roles (q, k_cache, ...). One Op runs either,
one checker interprets either's check table (render.group_checks), and both call one exported symbol."""
from __future__ import annotations

from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import knobs
from ..build import toolchain as tc
from ..build.lifecycle import build, load_module
from ..build.store import Artifact
from ..codegen import checks
from ..codegen.launch import LaunchPlan, resolve
from ..codegen.render import Member, group_args, group_checks, members
from ..errors import LayoutMismatch
from ..layout.layout import Layout
from ..layout.pages import Pages, pages_of
from ..spec.group import Group
from ..spec.pages import POOL_SHARES, SLOT_SOURCES
from ..spec.variant import Variant
from ..tune import lookup
from ..tune.gpu import GpuInfo
from ..tune.gpu import current as current_gpu

if TYPE_CHECKING:
    import torch

# A variant's op takes these positionally (op(x, weight, freqs, positions, out_loc, kvcache, eps=, bias=, scale=));
# a launch group's takes every tensor by name.
POSITIONAL = ("x", "weight", "freqs", "positions", "out_loc", "kvcache")
_BIAS_SCALE_ORDER = ("bias", "scale")
_BIAS_SCALE = frozenset(_BIAS_SCALE_ORDER)


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _ints(values: Any) -> str:
    return "[" + ", ".join(str(int(s)) for s in values) + "]"


class InputChecker:
    """The Python side of a kernel's check table (render.group_checks: a variant's table, a launch group's members'
    tables under the symbol's names with the rows and device they share): the exported symbol applies the same
    checks in the same order, so a refusal reads the same from Python and from C++. Used to explain a refusal of
    the symbol, on fake tensors (torch.compile), and per call in debug mode.

    Made from (kernel, plan): the x alignment every configuration of the plan accepts; or, for a variant's table at
    one alignment, (variant, layout, x_align)."""

    def __init__(self, k: Variant | Group, plan: LaunchPlan | Layout, x_align: int | None = None) -> None:
        self.v = self.kernel = resolve(k)  # type: ignore[arg-type]  # resolve fills a group's launch too
        self.prefix = self.kernel.name  # what messages start with
        self.members = members(self.kernel)
        self.args = group_args(self.kernel)  # the symbol's tensors, in its order
        if x_align is None:
            self.blocks = group_checks(self.kernel, plan)  # type: ignore[arg-type]
        else:
            [m] = self.members
            self.blocks = checks.group_blocks([(m.role, m.variant, plan, x_align, m.names)])  # type: ignore[list-item]
        self.checks = tuple(c for _, block in self.blocks for c in block)
        self.inputs = {m.role: m.input for m in self.members}  # each block's x: its member's input
        # the page size of each member that writes at out_loc's slots (a variant's one; a group's K and V caches)
        self.slot_page_sizes = tuple(m.variant.page_size for m in self.members if SLOT_SOURCES[m.variant.slots].reads_out_loc)

    def fail(self, what: str) -> LayoutMismatch:
        return LayoutMismatch(f"{self.prefix}: {what}")

    def named(self, tensors: tuple[Any, ...]) -> dict[str, Any]:
        """The tensors of check() and first_failure() by the symbol's names: one dict, or a variant's tensors in the
        family's order (checks.ARGS: x, weight, bias, freqs, positions, out_loc, kvcache, scale)."""
        if len(tensors) == 1 and isinstance(tensors[0], dict):
            return tensors[0]
        if len(self.members) != 1:
            raise TypeError(f"{self.prefix}: a launch group's tensors are checked by name (a dict of "
                            f"{', '.join(self.args)})")
        names = self.members[0].names
        return {names[a]: t for a, t in zip(checks.ARGS, tensors)}

    def check(self, *tensors: Any, metadata_only: bool = False) -> None:
        """Raise LayoutMismatch with the message of the first check that fails (the op calls this after
        the symbol refused, to say why in Python; debug mode calls it on every call). With
        metadata_only (torch.compile's fake tensors have no storage) addresses are not checked.
        Only Python can be handed something that is not a tensor: that is checked first."""
        import torch

        named = self.named(tensors)
        for name in self.args:
            if not isinstance(named.get(name), torch.Tensor):
                raise self.fail(f"{name} must be a torch tensor, got {type(named.get(name)).__name__}")
        failed = self._first_failure(named, metadata_only)
        if failed is not None:
            raise LayoutMismatch(failed.text(self.prefix, self._got(failed, named[failed.arg])))

    def first_failure(self, *tensors: Any, metadata_only: bool = False) -> checks.Check | None:
        """The first check of the table that the tensors fail (None: all pass)."""
        return self._first_failure(self.named(tensors), metadata_only)

    def _first_failure(self, named: dict[str, Any], metadata_only: bool) -> checks.Check | None:
        for role, block in self.blocks:
            x = named.get(self.inputs[role])
            for c in block:
                if not (metadata_only and c.kind == "aligned") and not self._holds(c, named.get(c.arg), x, named):
                    return c
        return None

    @staticmethod
    def _holds(c: checks.Check, t: Any, x: Any, named: dict[str, Any] | None = None) -> bool:
        """Whether tensor t passes check c (x: its member's input; named: every tensor, for the checks that compare
        a member's input with the first member's)."""
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
        if c.kind == "same_rows":
            return bool(t.shape[0] == (named or {})[c.other].shape[0])
        if c.kind == "same_device":
            return bool(t.device == (named or {})[c.other].device)
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

    def no_duplicate_slots(self, out_loc: Any, *num_pages: int) -> None:
        """Debug mode (KERNELGEN_DEBUG=1; syncs the device): two rows of one call must not share a slot,
        since their fields would be written by different threads and could mix. num_pages: the pages of each
        pool out_loc indexes, in member order (a variant's one; a launch group's K and V caches). A slot is
        written where it is inside a member's pool; every range starts at 0, so a slot two rows share is written
        twice exactly where it is inside the largest."""
        bound = max(n * size for n, size in zip(num_pages, self.slot_page_sizes))
        loc = out_loc[(out_loc >= 0) & (out_loc < bound)]
        unique, counts = loc.unique(return_counts=True)
        if bool((counts > 1).any()):
            raise self.fail(f"out_loc names slot {int(unique[counts > 1][0])} more than once in one call; "
                            "the rows' bytes could mix: pass distinct slots (checked because KERNELGEN_DEBUG=1)")


class Op:
    """A built kernel: a variant, or a launch group (one launch writing each member's output over the same tokens).
    A variant is callable as op(x, weight, freqs, positions, out_loc, kvcache, eps=1e-6, bias=None, scale=None), or
    with those names as keywords; a launch group as op(q=, k=, v=, ..., eps=1e-6) with its symbol's arguments by name
    (`op.args`: the members' inputs q/k/v, their weights q_weight/k_weight, freqs, positions, out_loc, the dense Q
    output q_out, the caches k_cache/v_cache, and the per-tensor scales k_scale/v_scale where a member's store has
    one). For a group, `qkv=` passes one packed projection [N, (Hq + 2 Hkv) x D] instead of q, k and v (column
    slices, no copy); with kv_pool: joint, `kv_cache=` passes the one pool [num_pages, 2, ...] instead of k_cache
    and v_cache (its halves, no copy); a group's output may be any tensor whose rows are the member's pages or
    records (e.g. bf16 [num_pages, page_size, Hkv, D], bf16 [N, Hq, D] or the Q columns of qkv itself, to write Q
    in place): it is viewed as uint8 rows.

    Its build holds one or more launch configurations; each call picks one from the token count
    (the tuned dispatch, compiled into the library). `op.plan` says which serves which counts.
    The exported symbol takes only the tensors the kernel uses (`op.args`, then eps): a variant's op passes those
    and drops the rest (a weight given to a variant without a norm is ignored)."""

    def __init__(self, artifact: Artifact, tuned_from: str = "defaults") -> None:
        self.artifact = artifact
        # the kernel: a Variant, or a Group (op.group, kept for launch groups' callers, is the same)
        self.variant: Any = resolve(artifact.variant)  # type: ignore[arg-type]
        self.group = self.variant
        self.plan: LaunchPlan = artifact.launch_plan
        self.tuned_from = tuned_from  # the record file the dispatch came from, or "defaults"
        self.members = members(self.variant)
        self.layouts: dict[str, Pages] = {m.role: pages_of(m.variant) for m in self.members}  # a variant's under ""
        self.checker = InputChecker(self.variant, self.plan)
        self.args = self.checker.args
        module = load_module(artifact.library)
        self.function = module[self.variant.name]
        self.config_function = module[f"{self.variant.name}_config"]
        self.debug = knobs.debug()  # read once: the call path reads no environment
        # K and V that share one pool (kv_pool: joint or packed, the same in both): kv_cache= passes the pool
        self.joint = [m.role for m in self.members if POOL_SHARES[m.variant.kv_pool].joint] == ["k", "v"] and \
            self.layouts["k"].pool == self.layouts["v"].pool
        # the members that write at out_loc's slots: their outputs' names (debug mode's duplicate-slot check)
        self.slotted = tuple(m.names["kvcache"] for m in self.members if SLOT_SOURCES[m.variant.slots].reads_out_loc)
        self._conventions(self.members)

    def _conventions(self, ms: list[Member]) -> None:
        """How a call names its tensors. A variant (one member, no role): the family's names, positionally
        (POSITIONAL) or by keyword, those it does not use accepted and dropped, its output its pool as allocated
        (uint8 pages); `launch` also takes its tensors in the family's order. A launch group: its symbol's names by
        keyword, or qkv= and kv_cache=, every output viewed as uint8 rows."""
        lone = ms[0] if len(ms) == 1 and not ms[0].role else None
        if lone is not None:
            self.positional = tuple(lone.names[a] for a in POSITIONAL)
            self.takes = frozenset(lone.names[a] for a in checks.ARGS)
            self.viewed: tuple[str, ...] = ()
            self.pick = checks.symbol_picker(self.args)  # (x, weight, bias, freqs, ..., scale) -> the symbol's
            order = (*self.positional, *(lone.names[a] for a in _BIAS_SCALE_ORDER))  # a usual call's tensors
            self._call_pick = itemgetter(*(order.index(a) for a in self.args))  # ... -> the symbol's
        else:
            self.positional = ()
            self.takes = frozenset(self.args) | {"qkv", "kv_cache"}
            self.viewed = tuple(m.names["kvcache"] for m in ms)
            self.pick = self._no_family_order

    def _no_family_order(self, tensors: tuple[Any, ...]) -> tuple[Any, ...]:
        raise TypeError(f"{self.variant.name}: a launch group's launch takes (tensors in op.args order, eps)")

    def __repr__(self) -> str:
        what = "; ".join(f"{m.role}: {m.variant.name}" if m.role else self.layouts[m.role].describe()
                         for m in self.members)
        return f"Op({self.variant.name}, {what}, {self.plan.describe()}, {self.artifact.library})"

    @property
    def layout(self) -> Pages:
        """A variant's pages (allocate, decode, byte map); a launch group's are per member: op.layouts[role]."""
        if "" not in self.layouts:
            raise AttributeError(f"{self.variant.name} is a launch group: its layouts are per member, "
                                 f"op.layouts[role] ({', '.join(self.layouts)})")
        return self.layouts[""]

    def variant_for(self, num_tokens: int) -> Any:
        """The kernel with the launch configuration a call of num_tokens rows runs (a Variant, or a Group). The
        reference replays that configuration's reduction order, so compare a call's bytes against this one."""
        return resolve(self.variant.with_launch(self.plan.pick(num_tokens)[0].instance))

    def tensors(self, given: dict[str, Any]) -> tuple[Any, ...]:
        """The symbol's tensors, in its order (op.args), from arguments by name (a group's qkv split, its pool's
        halves taken, its outputs viewed as rows)."""
        if not self.takes.issuperset(given):
            self._unknown(set(given) - self.takes)
        if self.viewed:
            given = self._unpacked(given)
        return tuple(map(given.get, self.args))

    def _unknown(self, unknown: set[str]) -> None:
        if self.positional:  # a variant: as Python says it of a keyword its signature does not have
            raise TypeError(f"Op.__call__() got an unexpected keyword argument '{sorted(unknown)[0]}'")
        raise LayoutMismatch(f"{self.variant.name}: unknown argument(s) {', '.join(sorted(unknown))}; "
                             f"it takes {', '.join(self.args)} (or qkv= for q, k and v)")

    def _unpacked(self, given: dict[str, Any]) -> dict[str, Any]:
        """A launch group's arguments with qkv= split into q, k and v, kv_cache= into k_cache and v_cache, and
        every output viewed as uint8 rows."""
        given = dict(given)
        pool = given.pop("kv_cache", None)
        if pool is not None:
            if not self.joint:
                raise LayoutMismatch(f"{self.variant.name}: kv_cache= is for K and V caches that are one pool "
                                     "(kv_pool: joint or packed); pass k_cache= and v_cache=")
            try:
                halves = self.layouts["k"].halves(pool)
            except ValueError as e:
                raise LayoutMismatch(f"{self.variant.name}: kv_cache: {e}") from None
            outputs = {m.role: m.names["kvcache"] for m in self.members}
            for role, half in zip(("k", "v"), halves):
                given.setdefault(outputs[role], half)
        qkv = given.pop("qkv", None)
        if qkv is not None:
            col = 0
            for m in self.members:
                width = m.variant.x_width
                given.setdefault(m.input, qkv[:, col:col + width])
                col += width
        for out in self.viewed:
            if out in given:
                given[out] = as_rows(given[out])
        return given

    def _by_name(self, tensors: tuple[Any, ...], named: dict[str, Any]) -> dict[str, Any]:
        """A call's positional tensors (a variant's, POSITIONAL order) and keywords as one dict by name."""
        if len(tensors) > len(self.positional):
            count = len(self.positional) + 1
            raise TypeError(f"Op.__call__() takes {count} positional argument{'s' if count > 1 else ''} but "
                            f"{len(tensors) + 1} were given")
        given = dict(zip(self.positional, tensors))
        if named:
            both = given.keys() & named.keys()
            if both:
                raise TypeError(f"Op.__call__() got multiple values for argument '{sorted(both)[0]}'")
            given.update(named)
        return given

    def __call__(self, *tensors: Any, eps: float = 1e-6, **named: Any) -> None:
        """Write each member's rows: a variant's rows of x into kvcache at slots out_loc (rows with out_loc < 0 are
        skipped; a slots: token variant takes no out_loc and writes token t to row t of kvcache, its dense output);
        a launch group's members' in one launch. `scale` (a group's k_scale, v_scale) is the float32 [1] device
        tensor of a format with a per-tensor scale (nvfp4's g, fp8_scaled's k_scale), else unused."""
        if len(tensors) == len(self.positional) == len(POSITIONAL) and _BIAS_SCALE.issuperset(named):
            # a variant's usual call (every tensor by position; bias=, scale=): straight to the symbol's order
            args = self._call_pick(tensors + (named.get("bias"), named.get("scale")))
        else:
            args = self.tensors(self._by_name(tensors, named) if tensors else named)
        if self.debug:
            by_name = dict(zip(self.args, args))
            self.checker.check(by_name)
            if self.slotted:
                self.checker.no_duplicate_slots(by_name["out_loc"], *(by_name[out].shape[0] for out in self.slotted))
        try:  # the exported symbol checks every tensor before it launches (nothing is written on failure)
            self.function(*args, float(eps))
        except Exception:
            # Refused, or not convertible: say what is wrong in full words; a launch error stays as it is.
            self.checker.check(dict(zip(self.args, args)))
            raise

    def _launch_args(self, args: tuple[Any, ...]) -> tuple[tuple[Any, ...], Any]:
        *tensors, eps = args
        if len(tensors) == 1 and isinstance(tensors[0], (tuple, list)):
            return tuple(tensors[0]), eps
        return self.pick(tuple(tensors)), eps

    def launch(self, *args: Any) -> None:
        """The call without Python's checks: launch(tensors, eps), the symbol's tensors in `op.args` order (as
        op.tensors gives them), or a variant's in the family's order, launch(x, weight, bias, freqs, positions,
        out_loc, kvcache, scale, eps). The exported symbol still checks every argument, in the same words, and
        raises ValueError. It runs on torch's current stream, also under CUDA-graph capture: tvm-ffi sets its
        environment stream from the first CUDA torch tensor of a call (the stream and graph tests in
        tests/test_gpu.py hold it to that)."""
        tensors, eps = self._launch_args(args)
        self.function(*tensors, eps)

    def launch_config(self, config: int, pdl: bool, *args: Any) -> None:
        """`launch` with one compiled configuration (index into op.plan.configs), for tuning and tests:
        launch_config(config, pdl, tensors, eps), or a variant's launch_config(config, pdl, x, weight, ..., eps)."""
        tensors, eps = self._launch_args(args)
        self.config_function(*tensors, float(eps), int(config), bool(pdl))


def as_rows(t: Any) -> Any:
    """An output as the uint8 rows the kernel writes (pages of a cache, rows of a dense output): [rows, ...] of
    any dtype, each row contiguous, viewed (never copied: a copy would take the writes) as uint8 [rows, bytes]."""
    import torch

    if not isinstance(t, torch.Tensor) or t.dtype == torch.uint8:
        return t
    if t.dim() < 2 or t.stride(-1) != 1:
        return t  # the symbol's checks say what is wrong with it
    rows = t if t.dim() == 2 else t.view(t.shape[0], -1)  # raises where rows cannot be viewed (never a copy)
    return rows.view(torch.uint8)


def tuned_plan(v: Variant | Group, gpu: GpuInfo | None) -> tuple[LaunchPlan, str]:
    """The dispatch the tuning records name for v on gpu (the user's, then the shipped ones), else the
    variant's default launch, and where it came from; before the device code is checked (a load builds it
    and checks that: kernelgen/tune/lookup.py build_tuned)."""
    found = lookup.tuned(v, [gpu] if gpu is not None else [])
    return found.plan, found.source


_CURRENT = object()


def load_variant(variant: Variant | Group, *, arch: str | None = None, cache_dir: str | Path | None = None,
                 gpu: GpuInfo | None | object = _CURRENT, plan: LaunchPlan | None = None) -> Op:
    """Build (or find) the variant or launch group with its tuned dispatch for `gpu` (default: the local GPU) and
    load it. An explicit `plan` overrides the tuning records."""
    artifact, where = build_for(variant, arch, cache_dir, plan, gpu)
    return Op(artifact, where)


def build_for(v: Variant | Group, arch: str | None, cache_dir: str | Path | None, plan: LaunchPlan | None,
              gpu: GpuInfo | None | object) -> tuple[Artifact, str]:
    """The artifact a load runs and where its dispatch came from: an explicit plan, else the tuning record for
    `gpu` (default: the local GPU) whose device code is what this kernelgen builds, else the defaults."""
    archs, where = tc.resolve_archs(arch, flag="arch="), Path(cache_dir) if cache_dir else None
    if plan is not None:
        [artifact] = build([v], tc.detect(), archs, where, launch_plans=[plan])
        return artifact, "explicit plan"
    on = current_gpu() if gpu is _CURRENT else gpu
    [(artifact, found)] = lookup.build_tuned([v], [on] if isinstance(on, GpuInfo) else [], tc.detect(), archs, where)
    return artifact, found.source
