"""Launch geometry: default thread mapping for a variant, and the numbers derived from it."""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..spec.formats import format_of
from ..spec.group import Group
from ..spec.variant import Launch, Variant
from .guardtable import GUARDS

# Defaults from a launch sweep on the H200 (`git show def195b~1:tools/results/h200_sweep_launch.log`): 16 values
# per thread and 64-thread blocks were within ~10% of the best at 262144 tokens and the best
# or near it at 2048 tokens, for the DeepSeek-V4 indexer (fp8/bf16/fp4) and main-KV layouts.
DEFAULT_BLOCK_THREADS = 64
DEFAULT_VALUES_PER_THREAD = 16
MAX_THREADS_PER_TOKEN = 32  # defaults keep a token in one warp; tokens of 2 or 4 warps are a tuning choice


def _largest_pow2_divisor(n: int, cap: int) -> int:
    p = 1
    while p * 2 <= cap and n % (p * 2) == 0:
        p *= 2
    return p


def default_threads(v: Variant, vec: int) -> int:
    """Enough threads for 16 values each, more where a scale group must span one load step."""
    loads = max(v.head_dim // vec, 1)
    wanted = max(v.head_dim // DEFAULT_VALUES_PER_THREAD, format_of(v).load_group // vec, 1)
    return _largest_pow2_divisor(loads, min(wanted, MAX_THREADS_PER_TOKEN))


def resolve(v: Variant) -> Variant:
    """Fill launch fields left at 0 with defaults; explicit settings are kept as given (a launch group:
    resolve_group)."""
    if isinstance(v, Group):
        return resolve_group(v)  # type: ignore[return-value]
    given = v.launch
    first = _filled(v, given.vec or 16 // v.elem_bytes, given.threads_per_token)
    if (given.vec and given.threads_per_token) or not _breaks_launch_rule(first):
        return first
    # The default breaks a launch rule (e.g. neox RoPE over a rope_dim that is not a power of two needs its
    # partner dims in reach): the nearest configuration that keeps every rule, the fields the spec set kept.
    widths = dict.fromkeys(x for x in (16 // v.elem_bytes, 8 // v.elem_bytes, 2) if x >= 2)  # fp32: 4, 2 once each
    for vec in (given.vec,) if given.vec else widths:
        start = given.threads_per_token or default_threads(v, vec)
        others = sorted((t for t in (1, 2, 4, 8, 16, 32) if t != start), key=lambda t: (abs(t.bit_length()
                        - start.bit_length()), -t))
        for threads in (start,) if given.threads_per_token else (start, *others):
            alt = _filled(v, vec, threads)
            if not _breaks_launch_rule(alt):
                return alt
    return first  # nothing fits: the guards say why


def _filled(v: Variant, vec: int, threads: int) -> Variant:
    """v with the launch fields the spec left at 0 filled in for this vector width (and thread count)."""
    given = v.launch
    threads = threads or default_threads(v, vec)
    tokens = given.tokens_per_block or max(DEFAULT_BLOCK_THREADS // threads, 1)
    return v.with_launch(replace(given, threads_per_token=threads, tokens_per_block=tokens, vec=vec))


def _breaks_launch_rule(v: Variant) -> bool:
    return any(g.launch and not g.holds(v) for g in GUARDS)


@dataclass(frozen=True)
class Geometry:
    threads_per_token: int
    tokens_per_block: int
    vec: int
    chunks: int  # vector loads per thread
    per_thread: int  # elements each thread holds


def geometry(v: Variant) -> Geometry:
    launch = resolve(v).launch
    t, vec = launch.threads_per_token, launch.vec
    return Geometry(t, launch.tokens_per_block, vec, v.head_dim // (t * vec), v.head_dim // t)


ALL_TOKENS = 1 << 62  # the last route's bound: it serves every larger token count too


@dataclass(frozen=True)
class Route:
    max_tokens: int  # serves token counts up to this (and above the previous route's bound)
    config: int  # index into LaunchPlan.configs
    pdl: bool  # launch with programmatic dependent launch


@dataclass(frozen=True)
class LaunchPlan:
    """The launch configurations one build compiles and which token counts each one serves."""

    configs: tuple[Launch, ...]  # resolved template instances (Launch.instance; pdl is a route option)
    routes: tuple[Route, ...]  # increasing max_tokens; the last one has ALL_TOKENS

    def pick(self, num_tokens: int) -> tuple[Launch, bool]:
        """The configuration and PDL flag the generated dispatch uses for num_tokens (host-side compare)."""
        for route in self.routes:
            if num_tokens <= route.max_tokens:
                return self.configs[route.config], route.pdl
        raise AssertionError("the last route serves every token count")

    def launch_for(self, num_tokens: int) -> Launch:
        config, pdl = self.pick(num_tokens)
        return replace(config, pdl=pdl)

    def describe(self) -> str:
        parts = []
        lower = 1
        for r in self.routes:
            span = f"N>={lower}" if r.max_tokens == ALL_TOKENS else f"N<={r.max_tokens}"
            parts.append(f"{span}: {replace(self.configs[r.config], pdl=r.pdl).id}")
            lower = r.max_tokens + 1
        return "; ".join(parts)


def plan_routes(v: Variant | Group, routes: list[tuple[int, Launch]], extra: tuple[Launch, ...] = ()) -> LaunchPlan:
    """A plan from (max_tokens, launch) pairs in increasing order; the last pair serves all larger
    counts. `extra` configurations are compiled too without a route (the tuner calls them by index)."""
    configs: list[Launch] = []
    v = launch_variant(v)

    def index(launch: Launch) -> int:
        inst = resolve(v.with_launch(launch)).launch.instance
        if inst not in configs:
            configs.append(inst)
        return configs.index(inst)

    out = [Route(bound, index(launch), launch.pdl) for bound, launch in routes]
    for launch in extra:
        index(launch)
    merged: list[Route] = []
    for r in out:  # neighbouring routes with the same choice become one
        if merged and (merged[-1].config, merged[-1].pdl) == (r.config, r.pdl):
            merged[-1] = r
        else:
            merged.append(r)
    merged[-1] = replace(merged[-1], max_tokens=ALL_TOKENS)
    return LaunchPlan(tuple(configs), tuple(merged))


def default_plan(v: Variant | Group) -> LaunchPlan:
    """One configuration (the variant's own launch, defaults filled in) for every token count; a launch
    group's is its launch, resolved from its first member."""
    v = launch_variant(v)
    return plan_routes(v, [(ALL_TOKENS, resolve(v).launch)])


def launch_variant(v: Variant | Group) -> Variant:
    """The variant whose launch rules a kernel's configurations follow: itself, or a group's first member
    under the group's launch (every member shares it; group_precheck holds the others to it)."""
    return resolve_group(v).members[0][1] if isinstance(v, Group) else v


def resolve_group(g: Group) -> Group:
    """A launch group with its one launch configuration filled in (from its first member's defaults) and
    applied to every member: the members share the launch's block shape."""
    launch = resolve(g.members[0][1].with_launch(g.launch)).launch
    return replace(g, launch=launch, members=tuple((role, v.with_launch(launch)) for role, v in g.members))
