"""The `kernelgen` command: list, render, check, build; errors become one line and exit 1."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import __version__
from .build import toolchain as tc
from .codegen.guards import GUARDS, violations
from .codegen.launch import resolve
from .codegen.render import render_variant
from .errors import KernelgenError
from .layout.layout import layout_of
from .spec.parse import Spec, load_spec, shipped_specs
from .spec.variant import Variant

CHECK_TARGETS = "sm_90a,sm_100a,sm_120a"
out = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 200)


def _specs(paths: list[str]) -> list[Spec]:
    return [load_spec(p) for p in paths] if paths else shipped_specs()


def _status(v: Variant) -> str:
    broken = violations(v)
    return "ok" if not broken else f"[red]violates {broken[0].id}[/red]"


def layout_record(v: Variant) -> dict[str, object]:
    """The machine-readable layout of one variant (what a pool allocator needs)."""
    lay, lo = layout_of(v), resolve(v).launch
    return {
        "variant": v.name, "spec": v.spec_name, "store": lay.store, "head_dim": lay.head_dim,
        "page_size": lay.page_size, "bytes_per_token": lay.bytes_per_token, "page_bytes": lay.page_bytes,
        "fields": [{"name": f.name, "encoding": f.encoding, "base": f.base, "stride": f.stride, "size": f.size,
                    "what": f.what} for f in lay.fields],
        "byte_map": [{"start": a, "end": b, "what": t} for a, b, t in lay.byte_map()],
        "launch": {"threads_per_token": lo.threads_per_token, "tokens_per_block": lo.tokens_per_block, "vec": lo.vec},
        "violates": [g.id for g in violations(v)],
    }


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
            rope = f"{v.rope_dim} {v.rope_place} {v.rope_style}" if v.rope_dim else "-"
            norm = v.norm + ("+bias" if v.norm_bias else "")
            lo = r.launch
            table.add_row(v.name, str(v.head_dim), rope, norm, "yes" if v.hadamard else "-", v.input_dtype, v.store,
                          str(v.page_size), str(lay.bytes_per_token), str(lay.page_bytes),
                          f"{lo.threads_per_token},{lo.tokens_per_block},{lo.vec}", _status(v))
        out.print(table)
        if args.layouts:
            for v in spec.variants:
                _print_layout(v)
    return 0


def _print_layout(v: Variant) -> None:
    lay = layout_of(v)
    out.print(f"\n{v.name}: {lay.store}, {lay.bytes_per_token} B/token, page_size {lay.page_size}, "
              f"page {lay.page_bytes} B (cache = uint8 [num_pages, {lay.page_bytes}]); slot s -> page s // "
              f"{lay.page_size}, off s % {lay.page_size}", markup=False)
    for f in lay.fields:
        out.print(f"  {f.name:<7} token off at byte {f.base} + off*{f.stride}, {f.size} B: {f.what}", markup=False)
    for start, end, text in lay.byte_map():
        out.print(f"  [{start:>6}, {end:>6})  {text}", markup=False)


def cmd_render(args: argparse.Namespace) -> int:
    source = render_variant(load_spec(args.spec).variant(args.variant))
    if args.output:
        Path(args.output).write_text(source)
    else:
        sys.stdout.write(source)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from .build.lifecycle import compile_only, one_per_layout

    archs = tc.resolve_archs(args.arch, fallback=CHECK_TARGETS)  # check needs no GPU
    variants = [v for spec in _specs(args.specs) for v in spec.variants]
    skipped = 0
    if not args.all:
        variants, skipped = one_per_layout(variants)
    start = time.monotonic()
    results = compile_only(variants, tc.detect(), archs, args.jobs)
    table = Table(title=f"kernelgen check: {len(variants)} variants x {', '.join(archs)}", title_justify="left")
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
        err.print(f"error: {r.variant} [{r.arch}]: {r.message}", markup=False)
    return 1 if failures else 0




def cmd_build(args: argparse.Namespace) -> int:
    from .build.lifecycle import build

    archs = tc.resolve_archs(args.arch)
    variants = [v for spec in _specs(args.specs) for v in spec.variants]
    start = time.monotonic()
    artifacts = build(variants, tc.detect(), archs, Path(args.cache_dir) if args.cache_dir else None, args.jobs)
    table = Table(title=f"kernelgen build: {len(artifacts)} variants for {', '.join(archs)}", title_justify="left")
    for col in ("variant", "page B", "library"):
        table.add_column(col)
    for a in artifacts:
        table.add_row(a.variant.name, str(layout_of(a.variant).page_bytes), escape(str(a.library)))
    out.print(table)
    out.print(f"built or found {len(artifacts)} variants in {time.monotonic() - start:.1f} s")
    return 0


def cmd_guards(args: argparse.Namespace) -> int:
    table = Table(title="guards (Python precheck == static_assert text)", title_justify="left")
    for col in ("id", "message"):
        table.add_column(col)
    for g in GUARDS:
        table.add_row(g.id, g.message)
    out.print(table)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kernelgen", description="fused norm/RoPE/quantize/KV-store CUDA kernels from YAML specs")
    p.add_argument("--version", action="version", version=f"kernelgen {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="the variants specs expand to, with their layouts")
    ls.add_argument("specs", nargs="*", help="spec files or shipped spec names (default: all shipped)")
    ls.add_argument("--layouts", action="store_true", help="print each variant's page byte map")
    ls.add_argument("--json", action="store_true", help="machine-readable variants and layouts")
    ls.set_defaults(func=cmd_list)
    rd = sub.add_parser("render", help="print the generated CUDA of one variant")
    rd.add_argument("spec")
    rd.add_argument("variant")
    rd.add_argument("-o", "--output", help="write to a file instead of stdout")
    rd.set_defaults(func=cmd_render)
    ck = sub.add_parser("check", help="guards + compile-only for each target (no GPU needed)")
    ck.add_argument("specs", nargs="*", help="spec files or shipped spec names (default: all shipped)")
    ck.add_argument("--arch", help=f"targets, comma-separated (default: $KERNELGEN_CUDA_ARCH_LIST or {CHECK_TARGETS})")
    ck.add_argument("--all", action="store_true", help="compile every page size, not one per layout")
    ck.add_argument("--jobs", type=int, help="parallel nvcc jobs")
    ck.set_defaults(func=cmd_check)
    bd = sub.add_parser("build", help="compile every variant of specs into the kernel cache")
    bd.add_argument("specs", nargs="*", help="spec files or shipped spec names (default: all shipped)")
    bd.add_argument("--arch", help="targets, comma-separated (default: $KERNELGEN_CUDA_ARCH_LIST or the local GPU)")
    bd.add_argument("--jobs", type=int, help="parallel nvcc jobs")
    bd.add_argument("--cache-dir", help="kernel cache (default: $KERNELGEN_CACHE_DIR or ~/.cache/kernelgen)")
    bd.set_defaults(func=cmd_build)
    gd = sub.add_parser("guards", help="the guard table")
    gd.set_defaults(func=cmd_guards)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except OSError as exc:  # an unwritable -o or cache dir, a full disk: say which file and why
        err.print(f"error: {exc.filename or ''}: {exc.strerror or exc}", markup=False)
        return 1
    except KernelgenError as exc:
        lines = str(exc).splitlines() or [type(exc).__name__]
        err.print(f"error: {lines[0]}", markup=False)
        for line in lines[1:]:
            err.print(f"  {line}", markup=False)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
