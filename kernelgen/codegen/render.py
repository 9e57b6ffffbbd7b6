"""Render a variant into CUDA source through the one strict Jinja environment."""
from __future__ import annotations

import struct
from functools import lru_cache
from typing import Any

import jinja2

from .. import resources
from .._version import __version__
from ..layout.layout import Layout, layout_of
from ..spec.formats import format_of
from ..spec.launchparams import COMPILED
from ..spec.variant import Launch, Variant
from ..spec.group import Group
from .checks import (ARGS, cpp_checks, cpp_condition, cpp_dtype_names, cpp_message, group_blocks, symbol_args, table,
                     used_args)
from .guards import GUARDS, group_cpp_asserts, group_precheck, precheck
from .launch import LaunchPlan, default_plan, resolve, resolve_group

TEMPLATE = "fused_norm_rope_store.cu.j2"
GROUP_TEMPLATE = "fused_group.cu.j2"
_CPP_TYPES = {"bf16": "__nv_bfloat16", "fp16": "__half", "fp32": "float"}
_NORM_ENUM = {"rms": "kRms", "layer": "kLayer", "none": "kNone", "rms_gemma": "kRmsGemma"}


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resources.template_dir())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def f32_literal(value: float) -> str:
    """A C++ float literal that round-trips the float32 nearest to value."""
    text = f"{struct.unpack('f', struct.pack('f', value))[0]:.9g}"
    return f"{text}f" if "." in text or "e" in text else f"{text}.0f"


def _field_constants(layout: Layout) -> dict[str, int]:
    """The device code's field addresses: the first part's values and scales, and a second part (the
    roped dims kept apart, as FlashMLA does) at kRopeBase with the same token stride."""
    out = {"value_base": 0, "value_stride": 0, "scale_base": 0, "scale_stride": 0, "rope_base": 0}
    first, *rest = layout.segments
    values = layout.field(first.part.field)
    out.update(value_base=values.base, value_stride=values.stride)
    if first.part.scale != "none":
        scales = layout.field(first.part.scale_field)
        out.update(scale_base=scales.base, scale_stride=scales.stride)
    for seg in rest:
        out["rope_base"] = layout.field(seg.part.field).base
    return out


def summary(v: Variant) -> str:
    parts = [f"x[{v.heads} x {v.head_dim}]" if v.heads > 1 else f"x[{v.head_dim}]"]
    parts[0] += f" {v.input_dtype}"
    if v.norm != "none":
        parts.append({"rms": "RMSNorm", "rms_gemma": "RMSNorm x (1 + w)", "layer": "LayerNorm"}[v.norm]
                     + (" +bias" if v.norm_bias else "")
                     + f" (w {v.weight_dtype})")
    if v.rope_dim:
        parts.append(f"RoPE {v.rope_style} on {v.rope_place} {v.rope_dim}"
                     + (" (cos|sin table)" if v.rope_table == "halves" else ""))
    if v.hadamard:
        parts.append(f"Hadamard-{v.head_dim}")
    parts.append(f"store {v.store}" + (" (via bf16)" if v.round_through_bf16 else ""))
    return " -> ".join(parts)


def context(v: Variant, plan: LaunchPlan) -> dict[str, Any]:
    """Everything the template needs, decided here so the template stays declarative."""
    v = resolve(v)
    layout, xa = layout_of(v), x_align(v, plan)
    return {
        "kernelgen_version": __version__,
        "spec_name": v.spec_name or "(none)",
        "name": v.name,
        "summary": summary(v),
        "layout_summary": f"{layout.store}: {layout.bytes_per_token} B/token, page_size {v.page_size}, "
                          f"{layout.page_bytes} B/page",
        "dispatch_summary": plan.describe(),
        "guard_ids": [g.id for g in GUARDS],
        "guards": GUARDS,
        "in_type": _CPP_TYPES[v.input_dtype],
        "weight_type": _CPP_TYPES[v.weight_dtype],
        "in_bytes": v.elem_bytes,
        "head_dim": v.head_dim,
        "heads": v.heads,
        "rope_dim": v.rope_dim,
        "rope_begin": v.rope_begin,
        "neox": _cpp_bool(v.rope_style == "neox"),
        "rope_halves": _cpp_bool(v.rope_table == "halves"),
        "norm_enum": _NORM_ENUM[v.norm],
        "norm_bias": _cpp_bool(v.norm_bias),
        "rope_first": _cpp_bool(v.norm_order == "rope_then_norm"),
        "hadamard": _cpp_bool(v.hadamard),
        "hadamard_scale": f32_literal(v.hadamard_scale if v.hadamard else 1.0),
        "store_enum": format_of(v).enum,
        "round_through_bf16": _cpp_bool(v.round_through_bf16),
        "page_size": v.page_size,
        "token_slots": _cpp_bool(v.slots == "token"),
        "hnd": _cpp_bool(v.kv_layout == "hnd" and v.heads > 1),
        "page_bytes": layout.page_bytes,
        "joint_pool": _cpp_bool(v.kv_pool == "joint"),
        "store_align": layout.store_align,
        "checks": cpp_checks(v, layout, xa),
        **_symbol_args(v, layout, xa),
        "dtype_names": cpp_dtype_names(),
        "configs": [_config(i, c) for i, c in enumerate(plan.configs)],
        "dispatch": [{"max_tokens": r.max_tokens, "index": r.config, "pdl": _cpp_bool(r.pdl)} for r in plan.routes],
        **_field_constants(layout),
    }


def _symbol_args(v: Variant, layout: Layout, xa: int) -> dict[str, Any]:
    """The symbol's tensor parameters, and run()'s arguments: every tensor of the family, x where unused."""
    args = symbol_args(table(v, layout, xa))
    return {"args": list(args), "unused": [a for a in ARGS if a not in args],
            "run_args": ", ".join(a if a in args else "x" for a in ARGS)}


def x_align(v: Variant, plan: LaunchPlan) -> int:
    """Byte alignment of x rows that every configuration of the plan accepts (its widest load)."""
    return max(c.vec for c in plan.configs) * v.elem_bytes


def _config(index: int, c: Launch) -> dict[str, Any]:
    """One configuration struct: a constexpr per compiled launch parameter (the launch table's COMPILED)."""
    constants = [{"type": p.cpp_type, "name": p.cpp, "value": _cpp_value(getattr(c, p.name))} for p in COMPILED]
    return {"index": index, "summary": c.describe(), "constants": constants}


def _cpp_value(value: object) -> str:
    return _cpp_bool(value) if isinstance(value, bool) else str(value)


def _cpp_bool(flag: bool) -> str:
    return "true" if flag else "false"


def group_args(g: Group) -> tuple[str, ...]:
    """The group symbol's tensor parameters: each family argument (ARGS order) under each member's name for it
    (ROLES order), a shared one (freqs, positions, out_loc) once."""
    used = {role: used_args(v) for role, v in g.members}
    out: list[str] = []
    for arg in ARGS:
        for role in g.roles:
            if arg in used[role] and g.names(role)[arg] not in out:
                out.append(g.names(role)[arg])
    return tuple(out)


def group_checks(g: Group, plan: LaunchPlan) -> list[tuple[str, tuple[Any, ...]]]:
    """(role, checks under the group's names) blocks in the order both languages apply them (checks.group_blocks)."""
    g = resolve_group(g)
    return group_blocks([(role, v, layout_of(v), x_align(v, plan), g.names(role)) for role, v in g.members])


def group_context(g: Group, plan: LaunchPlan) -> dict[str, Any]:
    g = resolve_group(g)
    members = []
    for role, v in g.members:
        used = used_args(v)
        names = g.names(role)
        members.append({"role": role, "variant": v.name, "struct": f"{g.name}_{role}", "ctx": context(v, plan),
                        "run_args": ", ".join(names[a] if a in used else role for a in ARGS)})
    elem = {role: v.elem_bytes for role, v in g.members}
    blocks = [{"role": role, "checks": [{"condition": cpp_condition(c, elem[role]), "message": cpp_message(c, g.name)}
                                        for c in block]} for role, block in group_checks(g, plan)]
    return {
        "kernelgen_version": __version__,
        "spec_name": g.spec_name or "(none)",
        "name": g.name,
        "members": members,
        "check_blocks": blocks,
        "first": g.roles[0],
        "args": list(group_args(g)),
        "group_asserts": group_cpp_asserts(g),
        "dtype_names": cpp_dtype_names(),
        "configs": [_config(i, c) for i, c in enumerate(plan.configs)],
        "dispatch_summary": plan.describe(),
        "dispatch": [{"max_tokens": r.max_tokens, "index": r.config, "pdl": _cpp_bool(r.pdl)} for r in plan.routes],
    }


def render_group(g: Group, check: bool = True, plan: LaunchPlan | None = None) -> str:
    """CUDA source of a launch group: one symbol that launches every member once."""
    plan = plan or default_plan(resolve_group(g).members[0][1])
    if check:
        group_precheck(g)
        for config in plan.configs:
            group_precheck(g.with_launch(config))
    return environment().get_template(GROUP_TEMPLATE).render(**group_context(g, plan))


def render_variant(v: Variant | Group, check: bool = True, plan: LaunchPlan | None = None) -> str:
    """CUDA source for v with the launch configurations of plan (default: the variant's own launch).
    With check=False the Python precheck is skipped (guard parity tests). A launch group renders its one
    launch of every member (render_group)."""
    if isinstance(v, Group):
        return render_group(v, check, plan)
    plan = plan or default_plan(v)
    if check:
        precheck(v)
        for config in plan.configs:
            precheck(v.with_launch(config))
    ctx = context(v, plan)
    return environment().get_template(TEMPLATE).render(**ctx, ctx=ctx)

