"""`kernelgen bench`: time variants per token count on the GPU (kernelgen/bench.py measures)."""
from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

import kernelgen.cli.common as common  # err, _toolchain: see common's docstring

from .. import knobs
from .common import _fmt, _parse_ints, _selected, out


def cmd_bench(args: argparse.Namespace) -> int:
    import json

    from .. import bench, resources
    from ..runtime.op import load_variant
    from ..tune.runner import require_gpu

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
    common.err.print(f"copy roofline {roofline:.0f} GB/s, empty-kernel floor {floor_start:.2f} us; "
                     f"{bench.BYTES_NOTE}", markup=False)
    rows = []
    for v in variants:
        op = load_variant(v)  # a variant or a launch group: one op, one bench path
        common.err.print(f"{v.name}: dispatch from {op.tuned_from}: {op.plan.describe()}", markup=False)
        rows += bench.bench(op, tokens, args.workload, roofline, baselines, lambda s: common.err.print(s, markup=False))
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
