"""The tuning records: which apply here (`tune --show`), whether they still hold (`--verify`), their routes
chosen again (`--rechoose`)."""
from __future__ import annotations

import argparse
import functools
import time
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

import kernelgen.cli.common as common  # err, _toolchain: see common's docstring

from .. import knobs
from ..spec.variant import Variant
from .common import _selected, out
from .progress import _compiling


def _record_status(r: Any, rgpu: Any, gpu: Any, known: dict[str, Variant]) -> str:
    """Whether a usable record applies here; 'invalid: <why>' where its routes cannot run its variant. Whether
    its kernels still build to the code it timed is checked when they are built (`kernelgen tune --verify`)."""
    from ..tune import recordcheck

    v = known.get(r.content_key)
    broken = recordcheck.routes_problem(v, r.choice) if v is not None else None
    if broken:
        return f"invalid: {broken}"
    if gpu is None:
        return "no GPU"
    return "yes" if rgpu.matches(gpu) else "no: other GPU"


@functools.lru_cache(maxsize=1)
def _shipped_kernels() -> tuple[Any, ...]:
    """Every shipped variant and launch group, spec by spec."""
    from ..spec.parse import shipped_specs

    return tuple(k for spec in shipped_specs() for k in spec.kernels)


def _shipped_by_key() -> dict[str, Variant]:
    """Shipped variants and launch groups by content key (the first name where several share one): the ones
    whose guards --show can check a record's routes against."""
    out: dict[str, Any] = {}
    for v in _shipped_kernels():
        out.setdefault(v.content_key(), v)
    return out


def _verify_records(args: argparse.Namespace) -> int:
    """`kernelgen tune [SPEC] --verify`: every record a load would use, compiled for its GPU's arch and compared
    with the device code it timed (no GPU needed); 1 when one is stale or missing."""
    from ..spec.parse import shipped_specs
    from ..tune.verify import verify

    kernels = _selected(args)[1] if args.spec else [k for spec in shipped_specs() for k in spec.kernels]
    start = time.monotonic()
    with _compiling("verifying records") as progress:
        verdicts = verify(kernels, common._toolchain(), jobs=args.jobs, progress=progress)
    table = Table(title="tuning records against the device code this kernelgen builds", title_justify="left")
    for col in ("kernel", "gpu", "record", "detail"):
        table.add_column(col)
    for v in verdicts:
        table.add_row(escape(v.kernel), v.gpu, v.status, escape(v.detail))
    out.print(table)
    counts = {s: sum(v.status == s for v in verdicts) for s in ("holds", "stale", "missing")}
    out.print(f"{counts['holds']} hold, {counts['stale']} stale, {counts['missing']} missing "
              f"({len(kernels)} kernels) in {time.monotonic() - start:.1f} s", markup=False)
    return 1 if counts["stale"] or counts["missing"] else 0


def _rechoose_records(args: argparse.Namespace) -> int:
    """`kernelgen tune --rechoose [--out DIR]`: each record's routes chosen again from its own timings by this
    kernelgen's rule (after a change of the choice rule: kernelgen/tune/search.py select); nothing is re-timed."""
    from dataclasses import replace

    from ..tune import records
    from ..tune.search import select_for

    directory = knobs.check_folder("--out", Path(args.out)) if args.out else knobs.tuning_dir()
    known = _shipped_by_key()
    named = {(k.content_key(), k.name): k for k in _shipped_kernels()}
    changed = total = 0
    for path, _, record in records.all_records(directory):
        total += 1
        kernel = named.get((record.content_key, record.variant), known.get(record.content_key))
        if kernel is None:
            out.print(f"{record.variant}: not a shipped kernel, left alone", markup=False)
            continue
        # the kernel it was tuned under, where shipped: what it admits (its spec's promises) is what it chose among
        choice = tuple(select_for(kernel, record.timings, record.buckets))
        if choice != record.choice:
            out.print(f"{kernel.name}: {list(record.choice)} -> {list(choice)}", markup=False)
            records.write(path.parent, replace(record, choice=choice))  # merged with itself: the new choice
            changed += 1
    out.print(f"{changed} of {total} records in {directory} chosen again", markup=False)
    return 0


def _show_records() -> int:
    from .. import resources
    from ..tune import recordcheck, records
    from ..tune.gpu import current

    gpu = current()
    known = _shipped_by_key()
    here = f"{gpu.name} (sm_{gpu.capability.replace('.', '')}, {gpu.sms} SMs)" if gpu else "no GPU here"
    table = Table(title=escape(f"tuning records; this machine: {here}"), title_justify="left")
    for col in ("where", "gpu", "variant", "routes", "applies here"):
        table.add_column(col)
    aside = []
    for where, directory in (("user", knobs.tuning_dir()), ("shipped", resources.tuned_dir())):
        for path in records.record_files(directory):
            try:
                found = records.scan(path)
            except OSError as exc:
                table.add_row(where, escape(path.name), "-", "-", escape(f"invalid: cannot be read ({exc.strerror})"))
                continue
            if found is None:
                continue
            slug = found.gpu.slug if found.gpu else path.name
            for r in found.records.values():
                routes = "; ".join(f"<={b}: {lid}" for b, lid in r.choice)
                name = known[r.content_key].name if r.content_key in known else r.variant
                table.add_row(where, slug, escape(recordcheck.shown(name)), routes,
                              escape(_record_status(r, found.gpu, gpu, known)))
            for bad in found.rejected:
                table.add_row(where, slug, escape(recordcheck.shown(bad.variant) if bad.key else "-"), "-",
                              escape(f"invalid: {bad.reason}"))
            if records.rejected_file(path).is_file():
                aside.append(records.rejected_file(path))
    out.print(table)
    for path in aside:
        out.print(f"entries moved aside by earlier writes (kept, not used): {path}", markup=False)
    return 0
