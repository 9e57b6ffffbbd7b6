"""The search space of the fused_norm_rope_store template: the launch table's candidate values and rules.

A point of the space is a Launch. Its parameters, their names here, their default candidate values
and their validity rules are the launch table's (kernelgen/spec/launchparams.py). Validity rules are
the guard table's launch guards (the same predicate and message as the static_asserts), so a point
the space offers always compiles and a point it rejects says why."""
from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

from ..codegen.guards import GUARDS, Guard
from ..codegen.launch import resolve, resolve_group
from ..errors import TuningError
from ..spec.launchparams import IN_SPACE_ORDER, LAUNCH_PARAMS, LaunchParam
from ..spec.group import Group
from ..spec.variant import Launch, Variant

PARAMS: tuple[LaunchParam, ...] = IN_SPACE_ORDER  # the space's axes, in the order candidates are enumerated
PARAM_NAMES = tuple(p.tune for p in PARAMS)
# The guards that constrain the launch; the other guards are about the variant itself.
LAUNCH_GUARDS: tuple[Guard, ...] = tuple(g for g in GUARDS if g.launch)


@dataclass(frozen=True)
class Space:
    """Candidate values per parameter; a spec's `tune:` section narrows or extends the defaults."""

    values: tuple[tuple[str, tuple[object, ...]], ...]

    def get(self, name: str) -> tuple[object, ...]:
        return dict(self.values)[name]


ANY_GPU = "any"  # default_space's capability where the GPU is not known yet (a Ray task): offered_on filters later


def offered_on(launch: Launch, capability: str | None) -> bool:
    """Whether a GPU of this compute capability may time the launch: every parameter bound to some GPUs
    (LaunchParam.capabilities) is at its default or the GPU is one of them."""
    return all(getattr(launch, p.name) == p.default or capability in p.capabilities for p in PARAMS if p.capabilities)


def default_space(v: Variant, overrides: dict[str, tuple[object, ...]] | None = None,
                  capability: str | None = None) -> Space:
    """The candidate values per parameter for v: the table's defaults, or a spec's `tune:` values. A parameter
    bound to some GPUs (LaunchParam.capabilities, e.g. a Blackwell instruction) keeps its default alone unless
    capability, the tuning GPU's compute capability, is one of them (ANY_GPU keeps every value, for a task whose
    GPU filters its candidates with offered_on); a `tune:` value asking for more there is refused in one line."""
    overrides = overrides or {}
    unknown = set(overrides) - set(PARAM_NAMES)
    if unknown:
        raise TuningError(f"unknown tune parameter(s) {', '.join(sorted(unknown))}; known: {', '.join(PARAM_NAMES)}")
    out = []
    for p in PARAMS:
        values = tuple(overrides.get(p.tune, p.values(v)))
        if p.noop_elsewhere and p.tune in overrides:  # the other values only where they change the code
            values = tuple(x for x in values if x == p.default or x in p.values(v)) or (p.default,)
        if p.capabilities and capability != ANY_GPU and capability not in p.capabilities:
            if p.tune in overrides and any(x != p.default for x in values):
                raise TuningError(f"tune: {p.tune} {list(values)}: its other values need a GPU of compute capability "
                                  f"{', '.join(p.capabilities)}; this one is {capability or 'not known'}: "
                                  f"give {p.tune}: [{str(p.default).lower()}] or tune on such a GPU")
            values = (p.default,)
        out.append((p.tune, values))
    return Space(tuple(out))


def group_space(g: Group, overrides: dict[str, tuple[object, ...]] | None = None,
                capability: str | None = None) -> Space:
    """A launch group's space: its first member's (the members share the launch), except that a flag, or a
    parameter bound to some GPUs, takes the values of every member, in first-seen order: a value one member's
    store has no use for (hw_convert or lean_math for a bf16 Q) leaves that member's code as it is."""
    spaces = [default_space(v, overrides, capability) for _, v in g.members]
    return Space(tuple((p.tune, tuple(dict.fromkeys(x for s in spaces for x in s.get(p.tune)))
                        if p.capabilities or p.kind is bool else spaces[0].get(p.tune)) for p in PARAMS))


def admits(promises: tuple[str, ...], launch: Launch) -> bool:
    """Whether a kernel whose spec made `promises` (Variant.promises) may run the launch: each parameter whose other
    values rest on a promise (LaunchParam.promise, e.g. early_reads) is at its default or promised. A record's
    timings of a kernel of the same content key from a spec that made the promise do not let another spec's
    kernel, or a Python-built variant, run it."""
    return all(getattr(launch, p.name) == p.default or p.name in promises for p in PARAMS if p.promise)


def point(values: Mapping[str, object]) -> Launch:
    """The Launch at one point of the space (values by space name, e.g. block_threads)."""
    return Launch(**{p.name: p.field_value(values) for p in LAUNCH_PARAMS})


def _requirements_met(launch: Launch) -> bool:
    """Every parameter off its default has the flags it requires on (LaunchParam.requires)."""
    return all(getattr(launch, r) for p in PARAMS if p.requires and getattr(launch, p.name) != p.default
               for r in p.requires)


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
    for values in itertools.product(*(space.get(n) for n in PARAM_NAMES)):
        launch = point(dict(zip(PARAM_NAMES, values)))
        if not _requirements_met(launch):
            continue  # not a point of the space (LaunchParam.requires), not a rejection
        why = rejection(v, launch)
        if why:
            rejected.append((launch, why))
        elif launch not in valid:
            valid.append(launch)
    return valid, rejected


def instances(launches: list[Launch]) -> list[Launch]:
    """Distinct compiled template instances, in first-seen order (Launch.instance)."""
    return list(dict.fromkeys(launch.instance for launch in launches))


def group_candidates(g: Group, space: Space) -> tuple[list[Launch], list[tuple[Launch, str]]]:
    """candidates() for a launch group: its first member's points that every member accepts (the members
    share the launch); a point a member rejects carries that member's reason."""
    members = resolve_group(g).members
    valid, rejected = candidates(members[0][1], space)
    kept = []
    for launch in valid:
        why = next((f"member {role}: {w}" for role, v in members[1:] if (w := rejection(v, launch))), None)
        if why:
            rejected.append((launch, why))
        else:
            kept.append(launch)
    return kept, rejected
