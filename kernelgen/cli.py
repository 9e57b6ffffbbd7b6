"""The `kernelgen` command: list, render, check, build; errors become one line and exit 1."""
from __future__ import annotations

import argparse
import contextlib
import functools
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import knobs
from ._version import __version__
from .build import toolchain as tc
from .codegen.guards import GUARDS, violations
from .codegen.launch import resolve
from .codegen.render import render_variant
from .errors import KernelgenError, storage_error
from .layout.layout import layout_of
from .spec.group import Group
from .spec.parse import Spec, load_spec, shipped_specs
from .spec.variant import Variant

if TYPE_CHECKING:
    from rich.progress import Progress as Bar

CHECK_TARGETS = "sm_90a,sm_100a,sm_120a"
SPEC_HELP = "a spec file or a shipped spec name, e.g. dsv4_indexer (`kernelgen list` shows the shipped ones)"
SPECS_HELP = "spec files or shipped spec names (default: all shipped)"
HEARTBEAT_S = 30.0  # piped output gets a line at least this often while ninja works: one compile can take minutes
_VERBS = {"nvcc": "compiled", "link": "linked"}  # the first word of each ninja step's description (buildplan)
out = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 200)


def _specs(paths: list[str]) -> list[Spec]:
    return [load_spec(p) for p in paths] if paths else shipped_specs()


def _status(v: Variant) -> str:
    broken = violations(v)
    return "ok" if not broken else f"[red]violates {broken[0].id}[/red]"


def layout_record(v: Variant) -> dict[str, object]:
    """The machine-readable layout of one variant (what a pool allocator needs), launch and guard status."""
    from .layout.doc import layout_json

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
            rope = (f"{v.rope_dim} {v.rope_place} {v.rope_style}" + (" cos|sin" if v.rope_table == "halves" else "")
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
              f"page {lay.page_bytes} B (cache = uint8 [num_pages, {lay.page_bytes}]); slot s -> page s // "
              f"{lay.page_size}, off s % {lay.page_size}", markup=False)
    for f in lay.fields:
        out.print(f"  {f.name:<7} token off at byte {f.base} + off*{f.stride}, {f.size} B: {f.what}", markup=False)
    for start, end, text in lay.byte_map():
        out.print(f"  [{start:>6}, {end:>6})  {text}", markup=False)


def cmd_render(args: argparse.Namespace) -> int:
    source = render_variant(load_spec(args.spec).kernel(args.variant))
    if args.output:
        Path(args.output).write_text(source)
    else:
        sys.stdout.write(source)
    return 0


def _toolchain() -> tc.Toolchain:
    """The detected toolchain, saying which nvcc compiles."""
    toolchain = tc.detect()
    err.print(f"nvcc: {toolchain.describe()}", markup=False)
    return toolchain


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _step_label(step: str) -> str:
    """'nvcc dir/x.o' -> 'compiled x.o': what a finished ninja step made."""
    verb, _, target = step.partition(" ")
    return f"{_VERBS[verb]} {Path(target).name}" if verb in _VERBS and target else step


class _CompileProgress:
    """The compile steps of one command as ninja reports them (lifecycle's Progress callback; ninja, writing
    to a pipe, reports each step as it finishes), counted over every ninja run of the command (export runs
    one per arch, a failing tuning build several) against the total the command knows before the first
    starts. On a terminal a bar (`bar`) shows that total from the start; piped, a line per finished step,
    and one at least every HEARTBEAT_S while ninja is quiet."""

    def __init__(self, what: str, bar: Bar | None) -> None:
        self.what, self.bar, self.task = what, bar, None
        self.total = self.base = 0
        self.run = (0, 0)  # (done, total) of the ninja run reporting now
        self.start = self.said = time.monotonic()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.beat: threading.Thread | None = None

    def expect(self, steps: int, headline: str) -> None:
        """Say what will compile and how many steps it takes, before ninja starts."""
        err.print(f"{self.what}: {headline}", markup=False, soft_wrap=True)
        with self.lock:
            self.total, self.start, self.said = steps, time.monotonic(), time.monotonic()
        if self.bar is not None:
            self.task = self.bar.add_task(self.what, total=steps, what=self.what, step="")
        elif self.beat is None:
            self.beat = threading.Thread(target=self._heartbeat, name="kernelgen-progress", daemon=True)
            self.beat.start()

    def __call__(self, done: int, total: int, step: str) -> None:
        with self.lock:
            run_done, run_total = self.run
            if done <= run_done or total != run_total:  # the first report of another ninja run
                self.base += run_done
            self.run = (done, total)
            self.total = max(self.total, self.base + total)
            done = self.base + done
        label = _step_label(step)
        if self.bar is None:
            self._line(done, label)
            return
        if self.task is None:
            self.task = self.bar.add_task(self.what, total=self.total, what=self.what, step="")
        self.bar.update(self.task, completed=done, total=self.total, description=escape(f"{self.what}: {label}"),
                        step=escape(label))

    def _line(self, done: int, label: str) -> None:
        left = self.total - done
        err.print(f"[{done}/{self.total}] {time.monotonic() - self.start:5.1f} s  {label}"
                  + (f" ({left} to go)" if left > 0 else ""), markup=False, soft_wrap=True)
        self.said = time.monotonic()

    def _heartbeat(self) -> None:
        while not self.stop.wait(min(HEARTBEAT_S / 4, 1.0)):
            with self.lock:
                done, quiet = self.base + self.run[0], time.monotonic() - self.said
            if quiet >= HEARTBEAT_S:
                self._line(done, "still compiling")

    def close(self) -> None:
        self.stop.set()
        if self.beat is not None:
            self.beat.join()
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, visible=False)


@contextlib.contextmanager
def _compiling(what: str, bar: Bar | None = None) -> Iterator[_CompileProgress]:
    """A _CompileProgress for a command's builds: on a terminal in `bar` (one of its own where None)."""
    own = None
    if bar is None and err.is_terminal:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        own = bar = Progress(TextColumn("{task.fields[what]}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                             TextColumn("{task.fields[step]}"), console=err, transient=True)
        own.start()
    progress = _CompileProgress(what, bar if err.is_terminal else None)
    try:
        yield progress
    finally:
        progress.close()
        if own is not None:
            own.stop()


def _cache_dir(flag: str | None, write: bool = False) -> Path | None:
    """--cache-dir, else None (the cache the environment names), refused before any work where it cannot be
    a folder (or with `write`, one kernelgen can write in); an error names the flag or the variable."""
    if flag is None:
        knobs.check_cache_dir(write)
        return None
    return knobs.check_folder("--cache-dir", Path(flag), write)


def cmd_check(args: argparse.Namespace) -> int:
    from .build.lifecycle import compile_only, one_per_layout

    archs = tc.resolve_archs(args.arch, fallback=CHECK_TARGETS)  # check needs no GPU
    variants = [v for spec in _specs(args.specs) for v in spec.kernels]
    skipped = 0
    if not args.all:
        variants, skipped = one_per_layout(variants)
    start = time.monotonic()
    toolchain = _toolchain()
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
        err.print(f"error: {r.variant} [{r.arch}]: {r.message}", markup=False, soft_wrap=True)  # one line, as any error
    return 1 if failures else 0


def _expect_builds(progress: _CompileProgress, todo: list[Any], archs: tuple[str, ...]) -> None:
    """Announce the builds lifecycle.build will run (runner.unbuilt's list; nothing where all are cached)."""
    from .tune.runner import STEPS_PER_LIBRARY

    if todo:
        steps = STEPS_PER_LIBRARY * len(todo)
        progress.expect(steps, f"{_count(len({p.variant.name for p in todo}), 'variant')} to compile for "
                               f"{', '.join(archs)}: {steps} steps (nvcc, then link, each)")


def cmd_build(args: argparse.Namespace) -> int:
    from .build.lifecycle import build
    from .tune.runner import unbuilt

    archs = tc.resolve_archs(args.arch)
    cache_dir = _cache_dir(args.cache_dir)
    variants = [v for spec in _specs(args.specs) for v in spec.kernels]
    start = time.monotonic()
    toolchain = _toolchain()
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


def _parse_ints(text: str | None, what: str) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        values = tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        raise KernelgenError(f"{what} must be comma-separated integers, e.g. 1,32,4096; got {text!r}") from None
    if not values or any(v < 1 or v > (1 << 24) for v in values):
        raise KernelgenError(f"{what} must be between 1 and 16777216, got {text!r}")
    return values


def _selected(args: argparse.Namespace) -> tuple[Spec, list[Any]]:
    """The spec and the kernels --variants names (default: every variant, then every launch group)."""
    spec = load_spec(args.spec)
    if not args.variants:
        return spec, list(spec.kernels)
    return spec, [spec.kernel(name) for name in args.variants.split(",") if name]


def cmd_bench(args: argparse.Namespace) -> int:
    import json

    from . import bench, resources
    from .runtime.group_op import load_group_kernel
    from .runtime.op import load_variant
    from .tune.runner import require_gpu

    if args.plot:
        resources.require_matplotlib("--plot")
    for option, path in (("--json", args.json), ("--plot", args.plot)):
        if path:
            knobs.check_file(option, Path(path))
    _, variants = _selected(args)
    gpu = require_gpu("bench", args.spec)
    knobs.check_cache_dir(write=False)
    tokens = _parse_ints(args.tokens, "--tokens") or bench.DEFAULT_TOKENS
    baselines = tuple(b for b in (args.baselines or "").split(",") if b)
    roofline = bench.copy_roofline_gbs()
    floor_start = bench.empty_kernel_floor_us()
    err.print(f"copy roofline {roofline:.0f} GB/s, empty-kernel floor {floor_start:.2f} us; {bench.BYTES_NOTE}", markup=False)
    rows = []
    for v in variants:
        op = load_group_kernel(v) if isinstance(v, Group) else load_variant(v)
        err.print(f"{v.name}: dispatch from {op.tuned_from}: {op.plan.describe()}", markup=False)
        run = bench.bench_group if isinstance(v, Group) else bench.bench_variant
        rows += run(op, tokens, args.workload, roofline, baselines, lambda s: err.print(s, markup=False))  # type: ignore[arg-type]
    # The floor again after the variants, and beside every row: one measurement can catch the GPU between
    # clock states (a 1.0 us floor beside 0.72 us ones was seen on the H200, and 0.75 -> 0.93 us within one
    # run); the lowest is the run's floor, all are recorded (each row's in its floor_us).
    floor_end = bench.empty_kernel_floor_us()
    floor = min([floor_start, floor_end] + [r.floor_us for r in rows if r.floor_us is not None])
    meta = {"gpu": gpu.name, "gpu_info": gpu.as_dict(), "roofline_gbs": round(roofline, 1), "floor_us": round(floor, 3),
            "floor_us_start_end": [round(floor_start, 3), round(floor_end, 3)],
            "workload": args.workload, "method": "CUDA-graph replay (>=20 calls per graph, median of 15 replays); "
            "inputs rotated over >=3x L2 from 4096 tokens"}
    table = Table(title=f"kernelgen bench ({args.workload}) on {gpu.name}: copy {roofline:.0f} GB/s, "
                        f"empty kernel {floor:.2f} us", title_justify="left")
    cols = ["variant", "tokens", "us", "empty us", "TB/s", "% roof", "launch"] + (["eager us", "eager +MB"] if "eager" in baselines else []) \
        + (["compiled us", "compiled +MB"] if "compile" in baselines else [])
    for col in cols:
        table.add_column(col)
    for r in rows:
        cells = [r.variant, str(r.tokens), f"{r.us:.2f}", _fmt(r.floor_us), f"{r.tbps:.2f}", f"{r.roofline_pct:.0f}", r.launch]
        if "eager" in baselines:
            cells += [_fmt(r.eager_us), _fmt(r.eager_extra_mb)]
        if "compile" in baselines:
            cells += [_fmt(r.compiled_us), _fmt(r.compiled_extra_mb)]
        table.add_row(*cells)
    out.print(table)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(bench.to_json(rows, meta), indent=1) + "\n")
    if args.plot:
        bench.plot(rows, args.plot, meta)
    return 0


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def cmd_tune(args: argparse.Namespace) -> int:
    from .tune import runner
    from .tune.search import DEFAULT_BUCKETS

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
    runner.require_gpu("tune", args.spec)  # before anything compiles: --arch cannot stand in for a GPU
    cache_dir = _cache_dir(args.cache_dir, write=True)
    archs = tc.resolve_archs(args.arch)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=err, disable=not err.is_terminal) as bar, \
            _compiling("tuning", bar if err.is_terminal else None) as compiling:
        overall = bar.add_task("variants tuned", total=len(variants))
        tasks: dict[str, Any] = {}

        def on_event(name: str, event: dict[str, Any]) -> None:
            kind = event["event"]
            if kind == "compile":
                _expect_tuning(compiling, event, archs)
                return
            if kind == "compiled":
                compiling.close()
                err.print(f"tuning: compiled in {event['seconds']:.1f} s; timing {_count(len(variants), 'variant')} "
                          f"on {_count(len(gpus), 'GPU')}", markup=False)
                return
            if not err.is_terminal and kind in ("done", "fail"):
                detail = json_line(event) if kind != "done" else f"choice {event['outcome']['choice']}"
                err.print(f"{name or 'tune'}: {kind} {detail}", markup=False)
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
            err.print(f"error: {r.variant.name}: not tuned: {r.error}", markup=False)
            continue
        _tune_table(r)
    out.print(f"records written to {out_dir}", markup=False)
    return 1 if failed else 0


def _expect_tuning(progress: _CompileProgress, event: dict[str, Any], archs: tuple[str, ...]) -> None:
    """Announce the tuning compile from runner.tune's "compile" event (nothing where all is cached)."""
    steps, todo, variants = event["steps"], event["to_compile"], event["variants"]
    if not steps:
        return
    what = f"{event['instances']} kernel instances of {_count(variants, 'variant')}" if todo == variants \
        else f"{todo} of {_count(variants, 'variant')}"
    progress.expect(steps, f"{what} to compile for {', '.join(archs)}: {steps} steps (nvcc, then link, each)")


def _tune_on_ray(args: argparse.Namespace, spec: Spec, variants: list[Variant], buckets: tuple[int, ...],
                 out_dir: Path) -> int:
    """One Ray task per variant on the cluster's GPUs; every result merges into the local record files."""
    from .codegen.launch import resolve as resolve_launch
    from .tune.distributed import SearchTask, gpu_execute, run_tasks, write_results
    from .tune.space import candidates, default_space

    tasks = [SearchTask(spec.path, v.name, v.content_key(),
                        tuple(c.id for c in candidates(v, default_space(v, spec.tune_overrides()))[0]),
                        resolve_launch(v).launch.id, buckets, tc.parse_arch_list(args.arch) if args.arch else ())
             for v in variants]
    err.print(f"submitting {len(tasks)} tuning tasks to Ray ({args.ray or 'a new local instance'})", markup=False)
    results = run_tasks(tasks, gpu_execute, 1.0, args.ray or None)
    paths = write_results(results, out_dir, {"kernelgen": __version__}, {"scheduler": "ray"})
    for r in results:
        if r.outcome is None:
            err.print(f"error: {r.task.variant}: not tuned: {r.error}", markup=False)
        else:
            out.print(f"{r.task.variant} on {r.gpu.name if r.gpu else '?'}: "
                      + "; ".join(f"<={b}: {lid}" for b, lid in r.outcome.choice), markup=False)
    out.print(f"records written: {', '.join(map(str, paths)) or 'none'}", markup=False)
    return 1 if any(r.outcome is None for r in results) else 0


def json_line(event: dict[str, Any]) -> str:
    import json

    return json.dumps({k: v for k, v in event.items() if k != "event"})


def _tune_table(r: Any) -> None:
    from .codegen.launch import resolve as resolve_launch

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


def _record_status(r: Any, rgpu: Any, gpu: Any, known: dict[str, Variant]) -> str:
    """Whether a usable record applies here; 'invalid: <why>' where its routes cannot run its variant. Whether
    its kernels still build to the code it timed is checked when they are built (`kernelgen tune --verify`)."""
    from .tune import recordcheck

    v = known.get(r.content_key)
    broken = recordcheck.routes_problem(v, r.choice) if v is not None else None
    if broken:
        return f"invalid: {broken}"
    if gpu is None:
        return "no GPU"
    return "yes" if rgpu.matches(gpu) else "no: other GPU"


@functools.lru_cache(maxsize=1)
def _shipped_by_key() -> dict[str, Variant]:
    """Shipped variants and launch groups by content key (the first name where several share one): the ones
    whose guards --show can check a record's routes against."""
    from .spec.parse import shipped_specs

    out: dict[str, Any] = {}
    for spec in shipped_specs():
        for v in [*spec.variants, *spec.groups]:
            out.setdefault(v.content_key(), v)
    return out


def _verify_records(args: argparse.Namespace) -> int:
    """`kernelgen tune [SPEC] --verify`: every record a load would use, compiled for its GPU's arch and compared
    with the device code it timed (no GPU needed); 1 when one is stale or missing."""
    from .spec.parse import shipped_specs
    from .tune.verify import verify

    kernels = _selected(args)[1] if args.spec else [k for spec in shipped_specs() for k in spec.kernels]
    start = time.monotonic()
    with _compiling("verifying records") as progress:
        verdicts = verify(kernels, _toolchain(), jobs=args.jobs, progress=progress)
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

    from .codegen.launch import launch_variant, resolve
    from .tune import records
    from .tune.search import select

    directory = knobs.check_folder("--out", Path(args.out)) if args.out else knobs.tuning_dir()
    known = _shipped_by_key()
    changed = total = 0
    for path, _, record in records.all_records(directory):
        total += 1
        kernel = known.get(record.content_key)
        if kernel is None:
            out.print(f"{record.variant}: not a shipped kernel, left alone", markup=False)
            continue
        choice = tuple(select(record.timings, record.buckets, resolve(launch_variant(kernel)).launch))
        if choice != record.choice:
            out.print(f"{kernel.name}: {list(record.choice)} -> {list(choice)}", markup=False)
            records.write(path.parent, replace(record, choice=choice))  # merged with itself: the new choice
            changed += 1
    out.print(f"{changed} of {total} records in {directory} chosen again", markup=False)
    return 0


def _show_records() -> int:
    from . import resources
    from .tune import recordcheck, records
    from .tune.gpu import current

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


def cmd_export(args: argparse.Namespace) -> int:
    from .runtime import export as exporting
    from .tune.runner import unbuilt

    out_dir = knobs.check_folder("-o", Path(args.output))
    _, variants = _selected(args)
    archs = tc.parse_arch_list(args.arch)
    knobs.check_cache_dir(write=False)
    start = time.monotonic()
    toolchain = _toolchain()
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
    return 0


def cmd_recall(args: argparse.Namespace) -> int:
    from . import recall

    return recall.run(args, args.command_line)


def cmd_guards(args: argparse.Namespace) -> int:
    table = Table(title="guards (Python precheck == static_assert text)", title_justify="left")
    for col in ("id", "message"):
        table.add_column(col)
    for g in GUARDS:
        table.add_row(g.id, g.message)
    out.print(table)
    return 0


def parser() -> argparse.ArgumentParser:
    from . import recall

    p = argparse.ArgumentParser(prog="kernelgen", description="fused norm/RoPE/quantize/KV-store CUDA kernels from YAML specs")
    p.add_argument("--version", action="version", version=f"kernelgen {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="the variants specs expand to, with their layouts")
    ls.add_argument("specs", nargs="*", help=SPECS_HELP)
    ls.add_argument("--layouts", action="store_true", help="print each variant's page byte map")
    ls.add_argument("--json", action="store_true", help="machine-readable variants and layouts")
    ls.set_defaults(func=cmd_list)
    rd = sub.add_parser("render", help="print the generated CUDA of one variant")
    rd.add_argument("spec", help=SPEC_HELP)
    rd.add_argument("variant", help="one of the spec's variants (`kernelgen list SPEC` shows them)")
    rd.add_argument("-o", "--output", help="write to a file instead of stdout")
    rd.set_defaults(func=cmd_render)
    ck = sub.add_parser("check", help="guards + device code compiled for each target (nvcc --fatbin; no GPU needed)")
    ck.add_argument("specs", nargs="*", help=SPECS_HELP)
    ck.add_argument("--arch", help=f"targets, comma-separated (default: $KERNELGEN_CUDA_ARCH_LIST or {CHECK_TARGETS})")
    ck.add_argument("--all", action="store_true", help="compile every page size, not one per layout")
    ck.add_argument("--jobs", type=int, help="parallel nvcc jobs")
    ck.set_defaults(func=cmd_check)
    bd = sub.add_parser("build", help="compile every variant of specs into the kernel cache (no GPU with --arch)")
    bd.add_argument("specs", nargs="*", help=SPECS_HELP)
    bd.add_argument("--arch", help="targets, comma-separated (default: $KERNELGEN_CUDA_ARCH_LIST or the local GPU)")
    bd.add_argument("--jobs", type=int, help="parallel nvcc jobs")
    bd.add_argument("--cache-dir", help="kernel cache (default: $KERNELGEN_CACHE_DIR or ~/.cache/kernelgen)")
    bd.set_defaults(func=cmd_build)
    bn = sub.add_parser("bench", help="time variants per token count on the GPU (roofline, floor, baselines)")
    bn.add_argument("spec", help=SPEC_HELP)
    bn.add_argument("--variants", help="comma-separated variant names (default: all of the spec)")
    bn.add_argument("--tokens", help="comma-separated token counts (default: 1,32,128,1024,4096,65536,262144,1048576)")
    bn.add_argument("--workload", choices=("prefill", "decode"), default="prefill")
    bn.add_argument("--baselines", default="eager,compile", help="PyTorch reference baselines: eager,compile (or '')")
    bn.add_argument("--json", help="write the results as JSON")
    bn.add_argument("--plot", help="write a PNG plot (needs matplotlib: pip install kernelgen[plot])")
    bn.set_defaults(func=cmd_bench)
    tu = sub.add_parser("tune", help="autotune launch configurations per token-count bucket on the GPU(s)")
    tu.add_argument("spec", nargs="?", help=SPEC_HELP)
    tu.add_argument("--variants", help="comma-separated variant names (default: all of the spec)")
    tu.add_argument("--buckets", help="comma-separated bucket bounds (default: 1,2,4,...,256,1024,...,1048576)")
    tu.add_argument("--budget", type=float, help="seconds; variants not started by then are reported, not tuned")
    tu.add_argument("--gpus", help="GPU indices, e.g. 0,1: one worker per GPU (default: the current GPU)")
    tu.add_argument("--arch", help="targets (default: the local GPU)")
    tu.add_argument("--jobs", type=int, help="parallel nvcc jobs")
    tu.add_argument("--cache-dir", help="kernel cache (default: $KERNELGEN_CACHE_DIR)")
    tu.add_argument("--out", help="record directory (default: the user's tuning cache)")
    tu.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                    help="schedule one task per variant on a Ray cluster (ADDRESS, e.g. auto; none: a local instance); "
                         "needs pip install 'kernelgen[ray]'")
    tu.add_argument("--show", action="store_true", help="list cached and shipped records and whether they apply here")
    tu.add_argument("--rechoose", action="store_true",
                    help="choose the routes of the records in --out (default: the user's) again from their timings")
    tu.add_argument("--verify", action="store_true",
                    help="compile every record's choice (no GPU) and check it is the device code it timed; "
                         "lists stale and missing records (exit 1 if any)")
    tu.set_defaults(func=cmd_tune)
    ex = sub.add_parser("export", help="compile variants for deployment (no nvcc needed to load them)")
    ex.add_argument("spec", help=SPEC_HELP)
    ex.add_argument("--variants", help="comma-separated variant names (default: all of the spec)")
    ex.add_argument("--arch", required=True, help="targets, comma-separated, e.g. sm_90a,sm_100a,sm_120a")
    ex.add_argument("-o", "--output", required=True, help="export directory")
    ex.add_argument("--jobs", type=int, help="parallel nvcc jobs")
    ex.set_defaults(func=cmd_export)
    rc = sub.add_parser("recall", help="index-key recall of fp8/fp4/bf16 stores vs fp32 (CPU)",
                        description=recall.__doc__)
    recall.add_arguments(rc).set_defaults(func=cmd_recall)
    gd = sub.add_parser("guards", help="the guard table")
    gd.set_defaults(func=cmd_guards)
    p.set_defaults(commands=tuple(sub.choices))
    return p


def _not_a_command(argv: list[str], commands: tuple[str, ...]) -> str | None:
    """The one line for a first word that names no command (with the nearest command), else None."""
    import difflib

    word = next((a for a in argv if not a.startswith("-")), None)
    if word is None or word in commands:
        return None
    near = difflib.get_close_matches(word[:100], commands, n=1)
    hint = f" (did you mean {near[0]}?)" if near else ""
    return f"'{word}' is not a kernelgen command{hint}; commands: {', '.join(commands)}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = parser()
    unknown = _not_a_command(argv, p.get_default("commands"))
    if unknown is not None:
        err.print(f"error: {unknown}", markup=False, soft_wrap=True)
        return 2  # argparse's status for a usage error
    args = p.parse_args(argv)
    args.command_line = " ".join(["kernelgen", *argv])  # what recall's table says generated it
    try:
        return int(args.func(args))
    except OSError as exc:  # an unwritable -o or cache dir, a full disk: say which file and why
        err.print(f"error: {storage_error(exc, exc.filename or '(a file kernelgen could not name)')}", markup=False)
        return 1
    except KernelgenError as exc:
        lines = str(exc).splitlines() or [type(exc).__name__]
        err.print(f"error: {lines[0]}", markup=False, soft_wrap=True)
        for line in lines[1:]:
            err.print(f"  {line}", markup=False)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
