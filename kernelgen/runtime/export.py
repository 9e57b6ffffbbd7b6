"""Ahead-of-time export: compiled variants plus a manifest, loadable where there is no nvcc.

One library per (variant, arch): a tuned dispatch belongs to a GPU model, so each arch's library
carries the dispatch tuned on a GPU of that arch (the H200 records for sm_90a) or the defaults.
Libraries link the CUDA runtime statically (nothing to find at deployment); libtvm_ffi comes
from the tvm-ffi package that loads them. The manifest has no timestamps and sorted keys: the
same libraries give the same bytes."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from .._version import __version__
from ..build import toolchain as tc
from ..build.arch import capability_of_arch
from ..build.store import Artifact, file_sha256
from ..codegen import checks
from ..codegen.launch import LaunchPlan, Route, resolve, resolve_group
from ..codegen.render import group_args, group_checks, members, x_align
from ..errors import KernelgenError, LayoutMismatch, writing
from ..layout.doc import layout_json
from ..layout.layout import layout_of
from ..spec.formats import format_of
from ..spec.group import ROLES, Group
from ..spec.variant import Launch, Variant
from ..tune import lookup
from ..tune.gpu import GpuInfo
from ..tune.gpu import current as current_gpu
from .op import _CURRENT, Op

FORMAT = "kernelgen-export/2"  # 2: a symbol takes only the tensors its variant uses (op.args), not all seven
MANIFEST = "manifest.json"
_ELSEWHERE = "export to another folder (-o)"  # the fix a full or read-only output folder ends on


def plan_for_arch(v: Variant | Group, arch: str) -> tuple[LaunchPlan, str]:
    """The dispatch tuned on a GPU of this arch (the load path's lookup rule, for the GPU models recorded
    with this compute capability), else the defaults; before its device code is checked (build_for_arch)."""
    return _shown(lookup.tuned(v, lookup.record_gpus(capability_of_arch(arch))))


def _shown(found: lookup.Tuned) -> tuple[LaunchPlan, str]:
    return found.plan, found.gpu.slug if found.gpu is not None else "defaults"


_NOTES = {"x": "last dim contiguous; rows aligned to the artifact's x_align bytes",
          "out_loc": "slot per row; < 0 or past the pool: skipped", "kvcache": "written in place"}


def _notes(v: Variant) -> dict[str, str]:
    """_NOTES with the notes that depend on the variant: its RoPE table layout and what its scale is."""
    freqs = ("cos of pair j at column j, sin at rope_dim / 2 + j (a cos_sin_cache)" if v.rope_table == "halves"
             else "(cos, sin) of pair j at columns 2j, 2j+1")
    scale = format_of(v).scale_words
    return {**_NOTES, "freqs": freqs, "scale": f"{scale} on x's device, read by the kernel (a CUDA graph keeps it live)"}


def abi(v: Variant, table: tuple[checks.Check, ...]) -> dict[str, Any]:
    """The exported symbols' calling convention: argument order, dtypes and shapes, from the variant's
    check table (each artifact also lists the checks, which its symbols apply in order before launching)."""
    page_bytes = next(c.value for c in table if c.kind == "page_bytes")
    notes = _notes(v)
    args = []
    for name in checks.symbol_args(table):
        args.append(_abi_arg(table, name, page_bytes, notes.get(name)))
    return _abi(v.name, "tvm-ffi packed function (TVM_FFI_DLL_EXPORT_TYPED_FUNC); tensors as DLPack; runs on the "
                "tvm-ffi environment stream of x's device", args, "variant")


def _abi(symbol: str, calling: str, args: list[dict[str, Any]], what: str) -> dict[str, Any]:
    """A symbol's abi entry: its tensor arguments, then eps; its config twin; how it refuses an argument."""
    return {"symbol": symbol, "calling": calling, "args": [*args, {"name": "eps", "dtype": "float64", "shape": []}],
            "returns": "none", "config_symbol": f"{symbol}_config",
            "config_args": "the same, then config (int64) and pdl (bool)",
            "errors": f"a refused argument raises ValueError '<{what}>: <check>, got <what was passed>' before "
                      "anything is launched; the artifact's `checks` lists them in order"}


def _plan_json(plan: LaunchPlan) -> dict[str, Any]:
    return {"configs": [c.id for c in plan.configs],
            "routes": [{"max_tokens": r.max_tokens, "config": r.config, "pdl": r.pdl} for r in plan.routes],
            "describe": plan.describe()}


def _plan_from_json(d: dict[str, Any]) -> LaunchPlan:
    return LaunchPlan(tuple(Launch.from_id(c) for c in d["configs"]),
                      tuple(Route(int(r["max_tokens"]), int(r["config"]), bool(r["pdl"])) for r in d["routes"]))


def _abi_arg(table: tuple[checks.Check, ...], name: str, page_bytes: int, note: str | None) -> dict[str, Any]:
    """One argument of a symbol's abi: its dtype and shape from its first check (the page size filled in)."""
    first = next(c for c in table if c.arg == name and c.kind == "dtype_shape")
    arg: dict[str, Any] = {"name": name, "dtype": first.dtypes[0] if len(first.dtypes) == 1 else list(first.dtypes),
                           "shape": [page_bytes if s == "page_bytes" else s for s in first.shape]}
    return arg | ({"note": note} if note else {})


def group_abi(g: Group, plan: LaunchPlan) -> dict[str, Any]:
    """abi() of a launch group's symbol: its arguments in order (each member's, the shared ones once)."""
    blocks = group_checks(g, plan)
    args = []
    for name in group_args(g):
        role, block = next((r, b) for r, b in blocks if any(c.arg == name and c.kind == "dtype_shape" for c in b))
        page = next((c.value for c in block if c.arg == name and c.kind == "page_bytes"), 0)
        family = next(a for a, n in g.names(role).items() if n == name)
        args.append(_abi_arg(block, name, page, _notes(g.member(role)).get(family)))
    return _abi(g.name, "tvm-ffi packed function; tensors as DLPack; one launch runs every member on the tvm-ffi "
                "environment stream of the first member's device", args, "group")


def _group_entry(g: Group, plan: LaunchPlan) -> dict[str, Any]:
    """A launch group's own manifest fields: its members (each a variant's math and layout) and its abi."""
    g = resolve_group(g)
    members = {role: {"variant": v.name, "math": v.math_fields(), "layout": layout_json(layout_of(v))}
               for role, v in g.members}
    return {"spec": g.spec_name, "content_key": g.content_key(), "group": members,
            "abi": group_abi(g, plan), "artifacts": {}}


def _variant_entry(v: Variant, plan: LaunchPlan) -> dict[str, Any]:
    """A variant's own manifest fields: its math, its layout and its abi."""
    layout = layout_of(v)
    return {"spec": v.spec_name, "content_key": v.content_key(), "variant": v.math_fields(),
            "layout": layout_json(layout), "abi": abi(v, checks.table(resolve(v), layout, x_align(v, plan))),
            "artifacts": {}}


def export(variants: list[Variant | Group], archs: tuple[str, ...], out_dir: Path, jobs: int | None = None,
           progress: Any = None) -> Path:
    """Build every variant (and launch group) for every arch (portable libraries) and write DIR/<name>/<arch>/
    + manifest."""

    toolchain = tc.detect()
    entries: dict[str, Any] = {}
    for arch in archs:
        built = lookup.build_tuned(variants, lookup.record_gpus(capability_of_arch(arch)), toolchain, (arch,), None,
                                   jobs, progress, portable=True)
        for v, (a, found) in zip(variants, built):
            plan, source = _shown(found)
            if v.name not in entries:  # the kernel's own fields: the same for every arch
                entries[v.name] = _group_entry(v, plan) if isinstance(v, Group) else _variant_entry(v, plan)
            target = _copy_artifact(v.name, arch, a, out_dir)
            aligns = {m.role: x_align(m.variant, plan) for m in members(v)}  # a variant's one, under its role ""
            entries[v.name]["artifacts"][arch] = {
                "library": f"{v.name}/{arch}/{a.library.name}", "sha256": file_sha256(target / a.library.name),
                "build_key": a.key, "tuned_on": source, "dispatch": _plan_json(plan),
                "device_code": a.device_code().get(arch, {}), "x_align": aligns.get("", aligns),
                "checks": checks.requirements(tuple(c for _, block in group_checks(v, plan) for c in block))}
    manifest = {"format": FORMAT, "kernelgen": __version__,
                "toolchain": {"nvcc": toolchain.nvcc_version, "tvm_ffi": toolchain.tvm_ffi_version},
                "archs": list(archs), "variants": entries}
    path = out_dir / MANIFEST
    with writing(path, _ELSEWHERE):
        path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return path


def _copy_artifact(name: str, arch: str, a: Artifact, out_dir: Path) -> Path:
    """The library and its source into DIR/<name>/<arch>/ (the folder returned)."""
    target = out_dir / name / arch
    with writing(target, _ELSEWHERE):
        target.mkdir(parents=True, exist_ok=True)
    for built in (a.library, a.source):
        with writing(target / built.name, _ELSEWHERE):
            shutil.copyfile(built, target / built.name)
    return target


def _pick_arch(available: list[str], gpu: GpuInfo | None, directory: Path) -> str:
    if gpu is None:
        raise KernelgenError(f"{directory}: no CUDA GPU here; the export holds {', '.join(available)}")
    for arch in available:
        if capability_of_arch(arch) == gpu.capability:
            return arch
    raise KernelgenError(f"{directory}: no library for {gpu.name} (compute capability {gpu.capability}); the export "
                         f"holds {', '.join(available)}: export again with --arch sm_{gpu.capability.replace('.', '')}a")


def load_exported(directory: str | Path, variant: str, *, gpu: GpuInfo | None | object = _CURRENT) -> Op:
    """Load an exported variant or launch group as an Op for this GPU's arch (no nvcc needed); the library's sha256
    is checked."""
    root = Path(directory)
    try:
        manifest = json.loads((root / MANIFEST).read_text())
        if manifest.get("format") != FORMAT:
            raise KernelgenError(f"{root}: export format {manifest.get('format')!r}, this kernelgen reads {FORMAT}: "
                                 f"export again with this kernelgen")
        entry = manifest["variants"][variant]
    except FileNotFoundError:
        raise KernelgenError(f"{root}: no {MANIFEST}; export with `kernelgen export SPEC -o {root}`") from None
    except (ValueError, TypeError, AttributeError) as exc:
        raise KernelgenError(f"{root}/{MANIFEST} is corrupt ({exc}); export again") from None
    except KeyError:
        names = ", ".join(sorted(manifest.get("variants", {})))
        raise KernelgenError(f"{root}: no variant {variant!r} in this export (it holds {names})") from None
    arch = _pick_arch(sorted(entry["artifacts"]), current_gpu() if gpu is _CURRENT else gpu, root)  # type: ignore[arg-type]
    art = entry["artifacts"][arch]
    library = root / art["library"]
    if not library.is_file() or file_sha256(library) != art["sha256"]:
        raise LayoutMismatch(f"{library}: missing or modified (sha256 differs from the manifest); export again")
    plan = _plan_from_json(art["dispatch"])
    k = _kernel_of(variant, entry)
    if k.content_key() != entry["content_key"]:
        what = "group" if "group" in entry else "variant"
        raise KernelgenError(f"{root}/{MANIFEST}: {what} {variant} does not match its content key; export again")
    return Op(Artifact(k.with_launch(plan.configs[0]), art["build_key"], library.parent, plan), f"export:{arch}")


def _kernel_of(name: str, entry: dict[str, Any]) -> Variant | Group:
    """The variant, or the launch group (its members from their math, one launch), a manifest entry holds."""
    if "group" in entry:
        by_role = entry["group"]  # the manifest's keys are sorted, the kernel's order is ROLES'
        return Group(name, tuple((role, Variant(name=by_role[role]["variant"], spec_name=entry["spec"],
                                                **by_role[role]["math"])) for role in ROLES if role in by_role),
                     spec_name=entry["spec"])
    return Variant(name=name, spec_name=entry["spec"], **entry["variant"])

