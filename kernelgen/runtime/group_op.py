"""Load a built launch group through tvm-ffi and call it: one launch writes a layer's Q output and K/V caches."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import knobs
from ..build.lifecycle import load_module
from ..build.store import Artifact
from ..codegen import checks
from ..codegen.launch import LaunchPlan, resolve_group
from ..codegen.render import group_args, group_checks
from ..errors import LayoutMismatch
from ..layout.pages import Pages, pages_of, pool_halves
from ..spec.group import Group
from ..spec.parse import load_spec
from ..tune.gpu import GpuInfo
from .op import _CURRENT, InputChecker, build_for

if TYPE_CHECKING:
    import torch


class GroupChecker:
    """The Python side of a group's check table (render.group_checks): the symbol applies the same checks in the
    same order, member by member, and says the same words."""

    def __init__(self, g: Group, plan: LaunchPlan) -> None:
        self.group = resolve_group(g)
        self.args = group_args(self.group)
        self.members = group_checks(self.group, plan)

    def first_failure(self, tensors: dict[str, Any], metadata_only: bool = False) -> tuple[checks.Check, Any] | None:
        for role, block in self.members:
            x = tensors[role]
            for c in block:
                t = tensors[c.arg]
                if c.kind == "same_rows":
                    ok = t.shape[0] == tensors[c.other].shape[0]
                elif c.kind == "same_device":
                    ok = t.device == tensors[c.other].device
                else:
                    ok = (metadata_only and c.kind == "aligned") or InputChecker._holds(c, t, x)
                if not ok:
                    return c, t
        return None

    def check(self, tensors: dict[str, Any], metadata_only: bool = False) -> None:
        """Raise LayoutMismatch with the message of the first check that fails."""
        import torch

        for name in self.args:
            if not isinstance(tensors.get(name), torch.Tensor):
                got = type(tensors.get(name)).__name__
                raise LayoutMismatch(f"{self.group.name}: {name} must be a torch tensor, got {got}")
        failed = self.first_failure(tensors, metadata_only)
        if failed is not None:
            c, t = failed
            raise LayoutMismatch(c.text(self.group.name, InputChecker._got(c, t)))


class GroupOp:
    """A built launch group, callable as op(q=, k=, v=, ..., eps=1e-6) with its symbol's arguments by name
    (`op.args`: the members' inputs q/k/v, their weights q_weight/k_weight, freqs, positions, out_loc, the
    dense Q output q_out, the caches k_cache/v_cache, and the per-tensor scales k_scale/v_scale where a member's
    store has one). `qkv=` passes one packed projection [N, (Hq + 2 Hkv) x D] instead of q, k and v (column
    slices, no copy); with kv_pool: joint, `kv_cache=` passes the one pool [num_pages, 2, ...] instead of k_cache
    and v_cache (its halves, no copy). An output may be any tensor whose rows are the member's pages or records
    (e.g. bf16 [num_pages, page_size, Hkv, D], bf16 [N, Hq, D] or the Q columns of qkv itself, to write Q in
    place): it is viewed as uint8 rows."""

    def __init__(self, artifact: Artifact, tuned_from: str = "defaults") -> None:
        self.artifact = artifact
        self.group: Group = resolve_group(artifact.variant)  # type: ignore[arg-type]
        self.plan: LaunchPlan = artifact.launch_plan
        self.tuned_from = tuned_from
        self.layouts: dict[str, Pages] = {role: pages_of(v) for role, v in self.group.members}
        self.checker = GroupChecker(self.group, self.plan)
        self.args = self.checker.args
        self.joint = [role for role, v in self.group.members if v.kv_pool == "joint"] == ["k", "v"]
        module = load_module(artifact.library)
        self.function = module[self.group.name]
        self.config_function = module[f"{self.group.name}_config"]
        self.debug = knobs.debug()

    def __repr__(self) -> str:
        return f"GroupOp({self.group.name}, {self.group.summary()}, {self.plan.describe()}, {self.artifact.library})"

    def variant_for(self, num_tokens: int) -> Group:
        """The group with the launch configuration a call of num_tokens tokens runs (compare against it)."""
        return resolve_group(self.group.with_launch(self.plan.pick(num_tokens)[0].instance))

    def tensors(self, given: dict[str, Any]) -> tuple[Any, ...]:
        """The symbol's tensors, in its order, from keyword arguments (qkv split, dense outputs viewed as rows)."""
        unknown = set(given) - set(self.args) - {"qkv", "kv_cache"}
        if unknown:
            raise LayoutMismatch(f"{self.group.name}: unknown argument(s) {', '.join(sorted(unknown))}; "
                                 f"it takes {', '.join(self.args)} (or qkv= for q, k and v)")
        given = dict(given)
        pool = given.pop("kv_cache", None)
        if pool is not None:
            if not self.joint:
                raise LayoutMismatch(f"{self.group.name}: kv_cache= is for K and V caches that are one pool "
                                     "(kv_pool: joint); pass k_cache= and v_cache=")
            try:
                halves = pool_halves(pool)
            except ValueError as e:
                raise LayoutMismatch(f"{self.group.name}: kv_cache: {e}") from None
            for role, half in zip(("k", "v"), halves):
                given.setdefault(self.group.names(role)["kvcache"], half)
        qkv = given.pop("qkv", None)
        if qkv is not None:
            col = 0
            for role, v in self.group.members:
                width = v.heads * v.head_dim
                given.setdefault(role, qkv[:, col:col + width])
                col += width
        for role, v in self.group.members:
            out = self.group.names(role)["kvcache"]
            if out in given:
                given[out] = as_rows(given[out])
        return tuple(given.get(a) for a in self.args)

    def __call__(self, *, eps: float = 1e-6, **tensors: Any) -> None:
        args = self.tensors(tensors)
        if self.debug:
            self.checker.check(dict(zip(self.args, args)))
        try:  # the exported symbol checks every tensor before it launches (nothing is written on failure)
            self.function(*args, float(eps))
        except Exception:
            self.checker.check(dict(zip(self.args, args)))
            raise

    def launch(self, args: tuple[Any, ...], eps: float) -> None:
        """The call without Python's work: args in `op.args` order (the symbol still checks them)."""
        self.function(*args, eps)

    def launch_config(self, config: int, pdl: bool, args: tuple[Any, ...], eps: float) -> None:
        """`launch` with one compiled configuration (index into op.plan.configs), for tuning and tests."""
        self.config_function(*args, float(eps), int(config), bool(pdl))


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


def load_group_kernel(g: Group, *, arch: str | None = None, cache_dir: str | Path | None = None,
                      plan: LaunchPlan | None = None, gpu: GpuInfo | None | object = _CURRENT) -> GroupOp:
    """Build (or find) a launch group with its tuned dispatch for `gpu` (default: the local GPU; as
    load_variant) and load it. An explicit `plan` overrides the tuning records."""
    artifact, where = build_for(g, arch, cache_dir, plan, gpu)
    return GroupOp(artifact, where)


def load_group(spec: str | Path, name: str, *, arch: str | None = None, cache_dir: str | Path | None = None) -> GroupOp:
    """Build (or find in the cache) one launch group of a spec and return it as a callable op."""
    return load_group_kernel(load_spec(spec).group(name), arch=arch, cache_dir=cache_dir)
