"""Applying the guard table (codegen/guardtable.py) to variants and launch groups: the Python precheck and the
generated static_asserts name the same guard with the same words."""
from __future__ import annotations

from ..errors import GuardViolation
from ..spec.formats import Guard
from ..spec.group import Group
from ..spec.variant import Variant
from .guardtable import GUARDS
from .launch import resolve, resolve_group


def where(v: Variant, g: Guard) -> str:
    """file:line:col of the key that broke guard g (the launch table for launch guards), else the variant's."""
    origins = dict(v.origins)
    for axis in ("launch",) if g.launch else g.axes:
        if axis in origins:
            return origins[axis]
    return v.origin


def violations(v: Variant | Group) -> list[Guard]:
    """The guards v breaks; for a launch group, its own rule, then its members' guards under its launch."""
    if isinstance(v, Group):
        if group_freqs_problem(v):
            return [GROUP_ONE_FREQS]
        if group_positions_problem(v):
            return [GROUP_ONE_POSITIONS]
        return [g for _, m in resolve_group(v).members for g in violations(m)]
    resolved = resolve(v)
    return [g for g in GUARDS if not g.holds(resolved)]


def precheck(v: Variant | Group) -> None:
    """Raise GuardViolation for the first guard the variant (or the launch group) breaks."""
    if isinstance(v, Group):
        return group_precheck(v)
    broken = violations(v)
    if broken:
        g = broken[0]
        at = where(v, g)
        raise GuardViolation(f"{at + ': ' if at else ''}variant {v.name}: {g.message} [guard {g.id}]")


GROUP_ONE_FREQS = Guard("group_one_freqs", lambda g: group_freqs_problem(g) is None, "(see group_cpp_asserts)",
                        "the members of a launch group that rotate share one freqs table: their rope_dim and "
                        "rope_table must agree", axes=("rope_dim", "rope_table"))


def group_freqs_problem(g: Group) -> str | None:
    """Why a group's members cannot share one freqs table (members that rotate must agree on rope_dim and
    the table's layout), else None. The generated code asserts the same (group_cpp_asserts)."""
    roped = [(role, v) for role, v in g.members if v.rope_dim]
    for role, v in roped[1:]:
        first_role, first = roped[0]
        if (v.rope_dim, v.rope_table) != (first.rope_dim, first.rope_table):
            return (f"members {first_role} and {role} rotate with one freqs table, so their rope_dim and rope_table "
                    f"must agree ({first_role}: {first.rope_dim} {first.rope_table}, {role}: {v.rope_dim} "
                    f"{v.rope_table}) [guard group_one_freqs]")
    return None


GROUP_ONE_POSITIONS = Guard("group_one_positions", lambda g: group_positions_problem(g) is None,
                            "(see group_cpp_asserts)",
                            "the members of a launch group that read positions share one positions tensor: its shape "
                            "must suit each ([3, N] where M-RoPE rotates, else [N])",
                            axes=("rope_style", "rope_dim", "temperature"))


def _positions_shape(v: Variant) -> str:
    return "[3, N]" if v.position_streams > 1 else "[N]"


def group_positions_problem(g: Group) -> str | None:
    """Why a group's members cannot share one positions tensor (members that read positions must read the same
    number of streams: Variant.position_streams), else None. The generated code asserts the same."""
    readers = [(role, v) for role, v in g.members if v.reads_positions]
    for role, v in readers[1:]:
        first_role, first = readers[0]
        if v.position_streams != first.position_streams:
            return (f"members {first_role} and {role} read one positions tensor, so they must read it in one shape "
                    f"({first_role}: {_positions_shape(first)}, {role}: {_positions_shape(v)}) [guard "
                    "group_one_positions]")
    return None


def group_cpp_asserts(g: Group) -> list[dict[str, str]]:
    """The group rules as static_asserts over the members' math structs (named <group>_<role>_math)."""
    roped = [role for role, v in g.members if v.rope_dim]
    out = []
    for role in roped[1:]:
        a, b = f"{g.name}_{roped[0]}_math", f"{g.name}_{role}_math"
        out.append({"cpp": f"{a}::kRopeDim == {b}::kRopeDim && {a}::kRopeHalves == {b}::kRopeHalves",
                    "message": f"members {roped[0]} and {role} rotate with one freqs table, so their rope_dim and "
                               "rope_table must agree"})
    readers = [role for role, v in g.members if v.reads_positions]
    streams = "({m}::kRopeDim > 0 ? {m}::kStreams : 1)"  # the rows of positions the device code reads
    for role in readers[1:]:
        a, b = f"{g.name}_{readers[0]}_math", f"{g.name}_{role}_math"
        out.append({"cpp": f"{streams.format(m=a)} == {streams.format(m=b)}",
                    "message": f"members {readers[0]} and {role} read one positions tensor, so they must read it in "
                               "one shape"})
    return out


def group_precheck(g: Group) -> None:
    """Raise GuardViolation for the first rule the group breaks: its own, then each member's guards under the
    group's launch configuration (naming the member)."""
    where = f"{g.origin + ': ' if g.origin else ''}group {g.name}"
    problem = group_freqs_problem(g) or group_positions_problem(g)
    if problem:
        raise GuardViolation(f"{where}: {problem}")
    resolved = resolve_group(g)
    for role, v in resolved.members:
        broken = violations(v)
        if broken:
            gd = broken[0]
            raise GuardViolation(f"{where}: member {role} ({v.name}) under the group's launch "
                                 f"{resolved.launch.id}: {gd.message} [guard {gd.id}]")
