"""The commands on specs and their kernels: list, render, check, build, export, guards, and recall."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

import kernelgen.cli.common as common  # err, _toolchain: see common's docstring

from .. import knobs
from .._version import __version__
from ..errors import KernelgenError
from ..build import toolchain as tc
from ..codegen.guards import GUARDS, violations
from ..codegen.launch import resolve
from ..codegen.render import render_variant
from ..layout.layout import layout_of
from ..spec.group import Group
from ..spec.parse import load_spec
from ..spec.ropes import ROPE_TABLES
from ..spec.variant import Variant
from .common import CHECK_TARGETS, _cache_dir, _count, _selected, _specs, out
from .progress import _compiling, _expect_builds


def _status(v: Variant) -> str:
    broken = violations(v)
    return "ok" if not broken else f"[red]violates {broken[0].id}[/red]"


def layout_record(v: Variant) -> dict[str, object]:
    """The machine-readable layout of one variant (what a pool allocator needs), launch and guard status."""
    from ..layout.doc import layout_json

    lo = resolve(v).launch
    return {"variant": v.name, "spec": v.spec_name, **layout_json(layout_of(v)),
            "launch": {"threads_per_token": lo.threads_per_token, "tokens_per_block": lo.tokens_per_block,
                       "vec": lo.vec},
            "violates": [g.id for g in violations(v)]}


def cmd_list(args: argparse.Namespace) -> int:
    if args.json:
        import json

        records = [layout_record(v) for spec in _specs(args.specs) for v in spec.variants]
        sys.stdout.write(json.dumps(records, indent=1) + "\n")
        return 0
    for spec in _specs(args.specs):
        table = Table(title=escape(f"{spec.path}: {len(spec.variants)} variants"), title_justify="left")
        for col in ("variant", "D", "rope", "norm", "had", "in", "store", "P", "B/token", "page B", "launch (T,B,vec)", "guards"):
            table.add_column(col)
        for v in spec.variants:
            r, lay = resolve(v), layout_of(v)
            rope = (f"{v.rope_dim} {v.rope_place} {v.rope_style}" + (" cos|sin" if ROPE_TABLES[v.rope_table].halves else "")
                    if v.rope_dim else "-")
            norm = v.norm + ("+bias" if v.norm_bias else "")
            lo = r.launch
            dims = f"{v.heads}x{v.head_dim}" if v.heads > 1 else str(v.head_dim)
            table.add_row(v.name, dims, rope, norm, "yes" if v.hadamard else "-", v.input_dtype, v.store,
                          str(v.page_size), str(lay.bytes_per_token), str(lay.page_bytes),
                          f"{lo.threads_per_token},{lo.tokens_per_block},{lo.vec}", _status(v))
        out.print(table)
        if spec.groups:
            groups = Table(title=escape(f"{spec.path}: {len(spec.groups)} launch groups (one launch writes every "
                                        "member)"), title_justify="left")
            for col in ("group", "members (role: variant)", "launch (T,B,vec)", "guards"):
                groups.add_column(col)
            for g in spec.groups:
                lo = resolve(g).launch
                broken = violations(g)
                groups.add_row(g.name, ", ".join(f"{role}: {v.name}" for role, v in g.members),
                               f"{lo.threads_per_token},{lo.tokens_per_block},{lo.vec}",
                               "ok" if not broken else f"[red]violates {broken[0].id}[/red]")
            out.print(groups)
        if args.layouts:
            for v in spec.variants:
                _print_layout(v)
    return 0


def _print_layout(v: Variant) -> None:
    lay = layout_of(v)
    out.print(f"\n{v.name}: {lay.store}, {lay.bytes_per_token} B/token, page_size {lay.page_size}, "
              f"page {lay.page_bytes} B (cache = {lay.pool_words()}); slot s -> page s // "
              f"{lay.page_size}, off s % {lay.page_size}", markup=False)
    for f in lay.fields:
        at = f"byte {f.base} + off*{f.stride}" if f.interleave == 1 else f"bytes {f.address()}"
        out.print(f"  {f.name:<7} token off at {at}, {f.size} B: {f.what}", markup=False)
    for start, end, text in lay.byte_map():
        out.print(f"  [{start:>6}, {end:>6})  {text}", markup=False)


def cmd_render(args: argparse.Namespace) -> int:
    source = render_variant(load_spec(args.spec).kernel(args.variant))
    if args.output:
        Path(args.output).write_text(source)
    else:
        sys.stdout.write(source)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from ..build.lifecycle import compile_only, one_per_layout

    archs = tc.resolve_archs(args.arch, fallback=CHECK_TARGETS)  # check needs no GPU
    variants = [v for spec in _specs(args.specs) for v in spec.kernels]
    skipped = 0
    if not args.all:
        variants, skipped = one_per_layout(variants)
    start = time.monotonic()
    toolchain = common._toolchain()
    compiled = [v for v in variants if not violations(v)]  # a refused variant costs no compile
    with _compiling("checking") as progress:
        if compiled:
            progress.expect(len(compiled), f"{_count(len(compiled), 'variant')} x {', '.join(archs)}: "
                            f"{len(compiled)} steps (one nvcc per variant for every target; a variant that "
                            "fails is compiled again per target)")
        results = compile_only(variants, toolchain, archs, args.jobs, progress=progress)
    # The title as its own line (a table title wraps at the table's width, which one short variant makes narrow).
    out.print(f"kernelgen check: {len(variants)} variants x {', '.join(archs)}", markup=False, soft_wrap=True)
    table = Table()
    table.add_column("variant")
    for arch in archs:
        table.add_column(arch)
    by_variant: dict[str, dict[str, str]] = {}
    failures = [r for r in results if not r.ok]
    for r in results:
        by_variant.setdefault(r.variant, {})[r.arch] = "[green]ok[/green]" if r.ok else "[red]FAIL[/red]"
    for name, cells in by_variant.items():
        table.add_row(name, *(cells[a] for a in archs))
    out.print(table)
    note = f" ({skipped} variants differing only in page_size not compiled; --all compiles them)" if skipped else ""
    out.print(f"{len(results) - len(failures)}/{len(results)} compiled in {time.monotonic() - start:.1f} s{note}")
    for r in failures:
        # one line, as any error
        common.err.print(f"error: {r.variant} [{r.arch}]: {r.message}", markup=False, soft_wrap=True)
    return 1 if failures else 0


def cmd_build(args: argparse.Namespace) -> int:
    from ..build.lifecycle import build
    from ..tune.runner import unbuilt

    variants = common._kernels_of(_specs(args.specs), args.variants)
    archs = tc.resolve_archs(args.arch)
    cache_dir = _cache_dir(args.cache_dir)
    start = time.monotonic()
    toolchain = common._toolchain()
    todo = unbuilt(variants, toolchain, archs, cache_dir)
    if todo:  # a cache of finished builds may be read-only; one that must take new ones may not
        _cache_dir(args.cache_dir, write=True)
    with _compiling("building") as progress:
        _expect_builds(progress, todo, archs)
        artifacts = build(variants, toolchain, archs, cache_dir, args.jobs, progress=progress)
    table = Table(title=f"kernelgen build: {len(artifacts)} variants for {', '.join(archs)}", title_justify="left")
    for col in ("variant", "page B", "library"):
        table.add_column(col)
    for a in artifacts:
        pages = ("/".join(str(layout_of(m).page_bytes) for _, m in a.variant.members) if isinstance(a.variant, Group)
                 else str(layout_of(a.variant).page_bytes))
        table.add_row(a.variant.name, pages, escape(str(a.library)))
    out.print(table)
    out.print(f"built or found {len(artifacts)} variants in {time.monotonic() - start:.1f} s")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from ..runtime import export as exporting
    from ..tune.runner import unbuilt

    if args.wheel:  # a bad name or version is refused before anything is written
        from ..runtime.wheel import check_version, dist_name

        dist_name(args.wheel)
        check_version(args.wheel_version or __version__)
    elif args.wheel_version:
        raise KernelgenError("--wheel-version is the version of a wheel: give --wheel NAME too")
    _, variants = _selected(args)
    archs = tc.parse_arch_list(args.arch)
    out_dir = knobs.check_folder("-o", Path(args.output))
    knobs.check_cache_dir(write=False)
    start = time.monotonic()
    toolchain = common._toolchain()
    todo: list[Any] = []  # what export's one build per arch will compile
    for arch in archs:
        plans: list[Any] = [exporting.plan_for_arch(v, arch)[0] for v in variants]
        todo += unbuilt(variants, toolchain, (arch,), None, plans, portable=True)
    if todo:
        knobs.check_cache_dir(write=True)
    with _compiling("exporting") as progress:
        _expect_builds(progress, todo, archs)
        manifest = exporting.export(variants, archs, out_dir, args.jobs, progress)
    size = sum(f.stat().st_size for f in out_dir.rglob("*") if f.is_file())
    out.print(f"exported {len(variants)} variants x {', '.join(archs)} to {out_dir} ({size / 2**20:.1f} MiB) in "
              f"{time.monotonic() - start:.1f} s; manifest {manifest}", markup=False)
    if args.wheel:
        from ..runtime.wheel import build_wheel

        wheel = build_wheel(out_dir, out_dir, args.wheel, args.wheel_version or __version__)
        out.print(f"wheel {wheel} ({wheel.stat().st_size / 2**20:.1f} MiB): pip install it where the kernels run "
                  "(needs apache-tvm-ffi and torch only)", markup=False)
    return 0


def cmd_recall(args: argparse.Namespace) -> int:
    from .. import recall

    return recall.run(args, args.command_line)


def cmd_fidelity(args: argparse.Namespace) -> int:
    from .. import fidelity

    return fidelity.run(args, args.command_line)


def cmd_guards(args: argparse.Namespace) -> int:
    table = Table(title="guards (Python precheck == static_assert text)", title_justify="left")
    for col in ("id", "message"):
        table.add_column(col)
    for g in GUARDS:
        table.add_row(g.id, g.message)
    out.print(table)
    return 0
