"""A launch group: several variants of one spec (its members: q, k, v) run by one kernel launch over the same tokens.

An attention layer's prep is a Q output and K and V appends of the same tokens: three variants of the family
(each with its own heads, norm, RoPE, store and layout), one launch. Each member keeps everything a variant has
(its guards, layout, reference, oracle); the group adds what the launch shares: the token count, the positions,
the freqs table, out_loc (the cache members' slots), and the launch configuration. Pure: no torch, no files."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace

from .pages import SLOT_SOURCES
from .variant import Launch, Variant

ROLES = ("q", "k", "v")  # the members a group may have, in the order the kernel's blocks take them
SHARED = ("freqs", "positions", "out_loc")  # family arguments every member that reads them shares


def arg_names(role: str, v: Variant) -> dict[str, str]:
    """What the group's symbol calls each family argument of the member in `role`: q, q_weight, q_out (a dense
    output, slots: token), k_cache (a paged cache), k_scale...; freqs, positions and out_loc are shared."""
    out = SLOT_SOURCES[v.slots].output
    return {"x": role, "weight": f"{role}_weight", "bias": f"{role}_bias", "kvcache": f"{role}_{out}",
            "scale": f"{role}_scale", **{a: a for a in SHARED}}


@dataclass(frozen=True)
class Group:
    name: str
    members: tuple[tuple[str, Variant], ...]  # (role, variant) in ROLES order
    launch: Launch = field(default_factory=Launch)  # one configuration for every member (0: the first's default)
    spec_name: str = field(default="", compare=False)
    origin: str = field(default="", compare=False)
    promises: tuple[str, ...] = field(default=(), compare=False)  # as Variant.promises: its spec's promises

    def __post_init__(self) -> None:
        roles = [role for role, _ in self.members]
        if roles != [r for r in ROLES if r in roles] or len(set(roles)) != len(roles) or not roles:
            raise ValueError(f"launch group {self.name}: members {roles} must be distinct roles in the order "
                             f"{', '.join(ROLES)} (the kernel's blocks and the symbol's arguments follow it)")

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(role for role, _ in self.members)

    def member(self, role: str) -> Variant:
        return dict(self.members)[role]

    def with_launch(self, launch: Launch) -> Group:
        return replace(self, launch=launch)

    def content_key(self) -> str:
        """Hash of the members' content keys by role: what a tuning record or an export of the group is keyed by."""
        keys = {role: v.content_key() for role, v in self.members}
        return hashlib.sha256(json.dumps({"group": keys}, sort_keys=True).encode()).hexdigest()[:24]

    def names(self, role: str) -> dict[str, str]:
        return arg_names(role, self.member(role))

    def summary(self) -> str:
        return "; ".join(f"{role}: {v.name}" for role, v in self.members)
