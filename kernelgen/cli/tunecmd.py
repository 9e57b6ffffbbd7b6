"""`kernelgen tune`: tune on this machine's GPUs or on a Ray cluster; --show, --verify and --rechoose go to
recordscmd."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.table import Table

import kernelgen.cli.common as common  # err, _toolchain: see common's docstring

from .. import knobs
from .._version import __version__
from ..build import toolchain as tc
from ..errors import KernelgenError
from ..spec.parse import Spec
from ..spec.variant import Variant
from .common import _cache_dir, _count, _fmt, _parse_ints, _selected, out
from .progress import _compiling, _expect_tuning
from .recordscmd import _rechoose_records, _show_records, _verify_records


def cmd_tune(args: argparse.Namespace) -> int:
    from ..tune import runner
    from ..tune.search import DEFAULT_BUCKETS

    if args.show:
        return _show_records()
    if args.verify:
        return _verify_records(args)
    if args.rechoose:
        return _rechoose_records(args)
    if not args.spec:
        raise KernelgenError("kernelgen tune needs a SPEC (or --show, or --verify)")
    spec, variants = _selected(args)
    buckets = _parse_ints(args.buckets, "--buckets") or spec.tune_buckets() or DEFAULT_BUCKETS
    gpus: list[str | None] = [g for g in args.gpus.split(",") if g] if args.gpus else [None]
    if args.out:
        out_dir = knobs.check_folder("--out", Path(args.out))
    else:  # the records go to the tuning/ folder of the environment's cache
        knobs.check_cache_dir(write=True)
        out_dir = knobs.tuning_dir()
    if args.ray is not None:  # the cluster's GPUs time it: this machine needs none
        return _tune_on_ray(args, spec, variants, buckets, out_dir)
    local = runner.require_gpu("tune", args.spec)  # before anything compiles: --arch cannot stand in for a GPU
    cache_dir = _cache_dir(args.cache_dir, write=True)
    archs = tc.resolve_archs(args.arch)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=common.err, disable=not common.err.is_terminal) as bar, \
            _compiling("tuning", bar if common.err.is_terminal else None) as compiling:
        overall = bar.add_task("variants tuned", total=len(variants))
        tasks: dict[str, Any] = {}

        def on_event(name: str, event: dict[str, Any]) -> None:
            kind = event["event"]
            if kind == "compile":
                _expect_tuning(compiling, event, archs)
                return
            if kind == "compiled":
                compiling.close()
                common.err.print(f"tuning: compiled in {event['seconds']:.1f} s; timing "
                                 f"{_count(len(variants), 'variant')} on {_count(len(gpus), 'GPU')}", markup=False)
                return
            if kind == "skipped":
                common.err.print(f"{name}: buckets {', '.join(map(str, event['buckets']))} not timed: a call's inputs "
                                 f"need about {event['need_gb']} GiB there, past what fits the GPU's {event['gpu_gb']} "
                                 "GiB; the last bucket timed serves them", markup=False)
                return
            if not common.err.is_terminal and kind in ("done", "fail"):
                detail = json_line(event) if kind != "done" else f"choice {event['outcome']['choice']}"
                common.err.print(f"{name or 'tune'}: {kind} {detail}", markup=False)
            if name and name not in tasks:
                tasks[name] = bar.add_task(name, total=None)
            if kind == "start":
                bar.update(tasks[name], description=f"{name}: {event['id']} N={event['n']}", advance=1)
            elif kind == "done":
                bar.update(tasks[name], visible=False)
                bar.advance(overall)
        results = runner.tune(variants, spec.path, spec.tune_overrides(), buckets, gpus, archs, cache_dir, out_dir,
                              args.jobs, args.budget, on_event, progress=compiling)
    failed = 0
    for r in results:
        if r.outcome is None:
            failed += 1
            common.err.print(f"error: {r.variant.name}: not tuned: {r.error}", markup=False)
            continue
        _tune_table(r)
        # the spec's largest bucket that this GPU can time (tune said which it left and why)
        top = max(runner.fitting_buckets(r.variant, spec.tune_buckets() or DEFAULT_BUCKETS, local.memory_gb), default=0)
        note = short_of_prefill(r.record, top) if r.record else None
        if note:
            common.err.print(note, markup=False)
    out.print(f"records written to {out_dir}", markup=False)
    return 1 if failed else 0


def _tune_on_ray(args: argparse.Namespace, spec: Spec, variants: list[Variant], buckets: tuple[int, ...],
                 out_dir: Path) -> int:
    """One Ray task per variant on the cluster's GPUs; every result merges into the local record files."""
    from ..codegen.launch import resolve as resolve_launch
    from ..tune.distributed import SearchTask, gpu_execute, run_tasks, write_results
    from ..tune.space import ANY_GPU, candidates, default_space

    tasks = [SearchTask(spec.path, v.name, v.content_key(),  # each task's GPU keeps the candidates it may time
                        tuple(c.id for c in candidates(v, default_space(v, spec.tune_overrides(), ANY_GPU))[0]),
                        resolve_launch(v).launch.id, buckets, tc.parse_arch_list(args.arch) if args.arch else (),
                        promises=v.promises)
             for v in variants]
    common.err.print(f"submitting {len(tasks)} tuning tasks to Ray ({args.ray or 'a new local instance'})",
                     markup=False)
    results = run_tasks(tasks, gpu_execute, 1.0, args.ray or None)
    paths = write_results(results, out_dir, {"kernelgen": __version__}, {"scheduler": "ray"})
    for r in results:
        if r.outcome is None:
            common.err.print(f"error: {r.task.variant}: not tuned: {r.error}", markup=False)
        else:
            out.print(f"{r.task.variant} on {r.gpu.name if r.gpu else '?'}: "
                      + "; ".join(f"<={b}: {lid}" for b, lid in r.outcome.choice), markup=False)
    out.print(f"records written: {', '.join(map(str, paths)) or 'none'}", markup=False)
    return 1 if any(r.outcome is None for r in results) else 0


def json_line(event: dict[str, Any]) -> str:
    import json

    return json.dumps({k: v for k, v in event.items() if k != "event"})


def short_of_prefill(record: Any, top: int) -> str | None:
    """A warning where a written record (merged with what its file held) stops below the spec's largest bucket, as a
    decode-only --buckets with no earlier record leaves it: a record's last route serves every larger count, so
    prefill would run the route chosen for the last bucket timed."""
    timed = max(record.buckets, default=0)
    if not record.choice or timed >= top:
        return None
    return (f"warning: {record.variant}: its record is timed up to N = {timed}, so every larger count takes the "
            f"{timed} route ({record.choice[-1][1]}); tune it with --buckets reaching {top} (the spec's largest) "
            f"before shipping it for prefill")


def _tune_table(r: Any) -> None:
    from ..codegen.launch import resolve as resolve_launch

    default = resolve_launch(r.variant).launch.id
    o = r.outcome
    table = Table(title=f"{r.variant.name}: {len(o.timings)} configurations timed, {len(o.failures)} failed",
                  title_justify="left")
    for col in ("bucket (N <=)", "default us", "tuned us", "speed-up", "configuration"):
        table.add_column(col)
    bounds = [b for b, _ in o.choice]
    for b in sorted({b for t in o.timings.values() for b in t}):
        lid = next((lid for bound, lid in o.choice if b <= bound), o.choice[-1][1])
        d, tuned = o.timings.get(default, {}).get(b), o.timings.get(lid, {}).get(b)
        speed = f"{d / tuned:.2f}x" if d and tuned else "-"
        marker = "" if lid == default else " *"
        table.add_row(str(b), _fmt(d), _fmt(tuned), speed, f"{lid}{marker}" + (" |" if b in bounds else ""))
    out.print(table)
