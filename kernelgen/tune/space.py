"""The tunable launch parameters of the fused_norm_rope_store template, their defaults and validity rules.

A point of the space is a Launch. Validity rules are the guard table's launch guards (the same
predicate and message as the static_asserts), so a point the space offers always compiles and a
point it rejects says why."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Callable

from ..codegen.guards import GUARDS, Guard
from ..codegen.launch import resolve
from ..errors import TuningError
from ..spec.variant import Launch, Variant


@dataclass(frozen=True)
class Param:
    name: str
    doc: str
    values: Callable[[Variant], tuple[object, ...]]  # the default candidate values for a variant


def _vec_values(v: Variant) -> tuple[object, ...]:
    widest = 16 // v.elem_bytes
    return tuple(x for x in (widest, widest // 2) if x >= 2)


PARAMS: tuple[Param, ...] = (
    Param("threads_per_token", "threads that share a token: lanes of one warp (1..32, a power of two), or two or "
          "four warps (64, 128: fewer values per thread for a short small-batch chain, the sums crossing warps "
          "through shared memory)", lambda v: (1, 2, 4, 8, 16, 32, 64, 128)),
    Param("vec", "elements per vector load (16-byte and 8-byte loads by default)", _vec_values),
    Param("block_threads", "threads per block; tokens_per_block = block_threads / threads_per_token",
          lambda v: (64, 256)),
    Param("prefetch", "issue weight/bias/freqs loads at kernel entry (one memory round trip for small N)",
          lambda v: (False, True)),
    Param("pdl", "programmatic dependent launch (overlaps the previous kernel's tail; a launch option)",
          lambda v: (False, True)),
    Param("loop", "one wave of blocks walks the tokens, loading the next token while computing the current "
          "(off by default until measured: a spec opts in with `tune: {loop: [false, true]}`)",
          lambda v: (False,)),
)
PARAM_NAMES = tuple(p.name for p in PARAMS)
# The guards that constrain the launch; the other guards are about the variant itself.
LAUNCH_GUARDS: tuple[Guard, ...] = tuple(g for g in GUARDS if g.launch)


@dataclass(frozen=True)
class Space:
    """Candidate values per parameter; a spec's `tune:` section narrows or extends the defaults."""

    values: tuple[tuple[str, tuple[object, ...]], ...]

    def get(self, name: str) -> tuple[object, ...]:
        return dict(self.values)[name]


def default_space(v: Variant, overrides: dict[str, tuple[object, ...]] | None = None) -> Space:
    overrides = overrides or {}
    unknown = set(overrides) - set(PARAM_NAMES)
    if unknown:
        raise TuningError(f"unknown tune parameter(s) {', '.join(sorted(unknown))}; known: {', '.join(PARAM_NAMES)}")
    return Space(tuple((p.name, tuple(overrides.get(p.name, p.values(v)))) for p in PARAMS))


def point(threads_per_token: int, vec: int, block_threads: int, prefetch: bool, pdl: bool, loop: bool = False) -> Launch:
    return Launch(threads_per_token, max(block_threads // threads_per_token, 1), vec, prefetch, pdl, loop)


def rejection(v: Variant, launch: Launch) -> str | None:
    """Why the launch is not a valid point for v (the first launch guard it breaks), or None."""
    candidate = v.with_launch(launch)
    for g in LAUNCH_GUARDS:
        if not g.holds(candidate):
            return f"{g.message} [guard {g.id}]"
    return None


def candidates(v: Variant, space: Space) -> tuple[list[Launch], list[tuple[Launch, str]]]:
    """(valid points, rejected points with the reason). The variant's default launch is always
    first among the valid points, so ties resolve to it."""
    valid: list[Launch] = [resolve(v).launch]
    rejected: list[tuple[Launch, str]] = []
    for t, vec, block, pf, pdl, loop in itertools.product(*(space.get(n) for n in PARAM_NAMES)):
        launch = point(int(t), int(vec), int(block), bool(pf), bool(pdl), bool(loop))  # type: ignore[arg-type]
        why = rejection(v, launch)
        if why:
            rejected.append((launch, why))
        elif launch not in valid:
            valid.append(launch)
    return valid, rejected


def instances(launches: list[Launch]) -> list[Launch]:
    """Distinct compiled template instances (pdl is a launch-time option, not an instance)."""
    out: list[Launch] = []
    for launch in launches:
        inst = replace(launch, pdl=False)
        if inst not in out:
            out.append(inst)
    return out
