"""Render a kernel into CUDA source through the one strict Jinja environment and its one template.

A kernel is a launch group of members: a variant renders as a group of one member (its structs named after it,
its symbol taking the family's argument names), a launch group as its members under their roles' names. The
template, the check function, the token-count dispatch and the host launch (kernelgen::run<Cfg...>) are one."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from .. import resources
from .._version import __version__
from ..layout.layout import Layout, layout_of
from ..spec.formats import device_constants, format_of
from ..spec.launchparams import COMPILED
from ..spec.norms import NORMS
from ..spec.pages import POOL_SHARES, SCALE_ORDERS, SLOT_SOURCES
from ..spec.ropes import ROPE_STYLES, ROPE_TABLES, TEMPERATURES
from ..spec.variant import Launch, Variant
from ..spec.group import Group
from .checks import ARGS, cpp_condition, cpp_dtype_names, cpp_message, group_blocks, used_args
from .guards import GUARDS, group_cpp_asserts, group_precheck, precheck
from .launch import LaunchPlan, default_plan, resolve, resolve_group

if TYPE_CHECKING:
    import jinja2

TEMPLATE = "fused_norm_rope_store.cu.j2"
_CPP_TYPES = {"bf16": "__nv_bfloat16", "fp16": "__half", "fp32": "float"}


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    import jinja2  # here: loading a compiled kernel (an export, a wheel) renders nothing and needs no jinja2

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
    if NORMS[v.norm].title:
        parts.append(NORMS[v.norm].title
                     + (" +bias" if v.norm_bias else "")
                     + f" (w {v.weight_dtype})")
    if v.rope_dim:
        parts.append(f"RoPE {v.rope_style} on {v.rope_place} {v.rope_dim}" + ROPE_TABLES[v.rope_table].header)
    if v.hadamard:
        parts.append(f"Hadamard-{v.head_dim}")
    parts.append(f"store {v.store}" + (" (via bf16)" if v.round_through_bf16 else ""))
    if v.round_norm_bf16:
        parts.insert(2 if NORMS[v.norm].title else 1, "bf16")
    return " -> ".join(parts)


def context(v: Variant, plan: LaunchPlan) -> dict[str, Any]:
    """Everything the template needs, decided here so the template stays declarative."""
    v = resolve(v)
    layout = layout_of(v)
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
        "neox": _cpp_bool(ROPE_STYLES[v.rope_style].neox),
        "rope_halves": _cpp_bool(ROPE_TABLES[v.rope_table].halves),
        "x_head_stride": v.x_head_stride or v.head_dim,
        "streams": ROPE_STYLES[v.rope_style].streams,
        "temperature": _cpp_bool(TEMPERATURES[v.temperature].on),
        "temp_floor_scale": repr(float(TEMPERATURES[v.temperature].floor_scale)),
        "temp_attn_scale": repr(float(TEMPERATURES[v.temperature].attn_scale)),
        # M-RoPE's pairs per stream; a list of another length renders -1s, which its guard's static_assert refuses
        "sections": tuple(v.rope_sections) if len(v.rope_sections) == 3 else (-1, -1, -1) if v.rope_sections else (0, 0, 0),
        "interleaved_streams": _cpp_bool(ROPE_STYLES[v.rope_style].interleaved_streams),
        "norm_enum": NORMS[v.norm].enum,
        "norm_bias": _cpp_bool(v.norm_bias),
        "rope_first": _cpp_bool(v.norm_order == "rope_then_norm"),
        "norm_nope": _cpp_bool(v.norm_dims == "nope"),
        "norm_width": v.norm_width,
        "hadamard": _cpp_bool(v.hadamard),
        "hadamard_scale": f32_literal(v.hadamard_scale if v.hadamard else 1.0),
        "store_enum": format_of(v).enum,
        **{k: _cpp_value(x) for k, x in device_constants(format_of(v), v).items()},
        "round_through_bf16": _cpp_bool(v.round_through_bf16),
        "round_norm_bf16": _cpp_bool(v.round_norm_bf16),
        "page_size": v.page_size,
        "token_slots": _cpp_bool(SLOT_SOURCES[v.slots].dense),
        "hnd": _cpp_bool(layout.hnd),
        "page_bytes": layout.page_bytes,
        "joint_pool": _cpp_bool(layout.joint),
        "packed_pool": _cpp_bool(POOL_SHARES[layout.pool].packed),
        "scale_interleave": SCALE_ORDERS[v.scale_order].interleave,
        "page_stride": layout.page_stride,
        "store_align": layout.store_align,
        "configs": [_config(i, c) for i, c in enumerate(plan.configs)],
        **_field_constants(layout),
    }


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


@dataclass(frozen=True)
class Member:
    """One member of the kernel a translation unit defines."""

    role: str  # its role in a launch group; "" for a variant rendered alone
    variant: Variant  # resolved, under the kernel's launch
    struct: str  # what its structs are called: the variant's name alone, <group>_<role> in a group
    names: dict[str, str]  # family argument -> the symbol's parameter

    @property
    def input(self) -> str:
        return self.names["x"]


def members(k: Variant | Group) -> list[Member]:
    """A kernel's members: a variant is the one member of its own kernel, under the family's argument names."""
    if isinstance(k, Group):
        g = resolve_group(k)
        return [Member(role, v, f"{g.name}_{role}", g.names(role)) for role, v in g.members]
    return [Member("", resolve(k), k.name, {a: a for a in ARGS})]


def group_args(g: Variant | Group) -> tuple[str, ...]:
    """The symbol's tensor parameters: each family argument (ARGS order) under each member's name for it
    (ROLES order), a shared one (freqs, positions, out_loc) once."""
    out: list[str] = []
    ms = members(g)
    used = {m.struct: used_args(m.variant) for m in ms}
    for arg in ARGS:
        for m in ms:
            if arg in used[m.struct] and m.names[arg] not in out:
                out.append(m.names[arg])
    return tuple(out)


def group_checks(g: Variant | Group, plan: LaunchPlan) -> list[tuple[str, tuple[Any, ...]]]:
    """(role, checks under the symbol's names) blocks in the order both languages apply them (checks.group_blocks;
    a variant's are its table, its shapes then where its tensors are)."""
    return group_blocks([(m.role, m.variant, layout_of(m.variant), x_align(m.variant, plan), m.names)
                         for m in members(g)])


def kernel_context(k: Variant | Group, plan: LaunchPlan) -> dict[str, Any]:
    """Everything the template needs for a variant or a launch group, decided here so the template stays
    declarative."""
    ms = members(k)
    group = isinstance(k, Group)
    out_members = [{"role": m.role, "variant": m.variant.name, "struct": m.struct, "ctx": context(m.variant, plan),
                    "run_args": ", ".join(m.names[a] if a in used_args(m.variant) else m.input for a in ARGS)}
                   for m in ms]
    elem = {m.role: m.variant.elem_bytes for m in ms}
    blocks = [{"what": f"member {role}" if group else ("shapes, dtypes and layouts" if i == 0 else "where they are"),
               "alias": role if group else None,
               "checks": [{"condition": cpp_condition(c, elem[role]), "message": cpp_message(c, k.name)} for c in block]}
              for i, (role, block) in enumerate(group_checks(k, plan))]
    return {
        "kernelgen_version": __version__,
        "spec_name": k.spec_name or "(none)",
        "name": k.name,
        "group": group,
        "members": out_members,
        "check_blocks": blocks,
        "first": ms[0].input,
        "args": list(group_args(k)),
        "group_asserts": group_cpp_asserts(k) if group else [],
        "guard_ids": [gd.id for gd in GUARDS],
        "dtype_names": cpp_dtype_names(),
        "configs": [_config(i, c) for i, c in enumerate(plan.configs)],
        "dispatch_summary": plan.describe(),
        "dispatch": [{"max_tokens": r.max_tokens, "index": r.config, "pdl": _cpp_bool(r.pdl)} for r in plan.routes],
    }


def render_variant(k: Variant | Group, check: bool = True, plan: LaunchPlan | None = None) -> str:
    """CUDA source of a variant or a launch group with the launch configurations of plan (default: its own
    launch). With check=False the Python precheck is skipped (guard parity tests)."""
    plan = plan or default_plan(k)
    if check:
        checked = group_precheck if isinstance(k, Group) else precheck
        checked(k)  # type: ignore[arg-type]
        for config in plan.configs:
            checked(k.with_launch(config))  # type: ignore[arg-type]
    return environment().get_template(TEMPLATE).render(**kernel_context(k, plan))
