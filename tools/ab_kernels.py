"""Same-process A/B of two trees' kernels at small batches: the kernels of an old tree beside this
checkout's, on the same inputs, in one process, alternating A B B A in every round (use an even
number of rounds), with the empty-kernel floor measured in every round too.

    python tools/ab_kernels.py OLD_TREE dsv4_indexer:dsv4_indexer_fp8_p64,dsv4_indexer_bf16_p64 dsv4_mainkv:... \
        [--tokens 1,32,128] [--workloads decode,prefill] [--rounds 6] [--launch t32.b2.v8.pf.pdl] [--json FILE]
    python tools/ab_kernels.py . dsv4_mainkv:dsv4_mainkv_fp8mla_p64 --launch t128.b1.v4.pf.pdl/t256.b1.v2.pf.pdl

OLD_TREE holds kernelgen/, templates/, specs/ and cache/ of the old revision, e.g.
    git archive REV kernelgen templates specs cache pyproject.toml | (mkdir -p ab_old && tar -x -C ab_old)
Each side's library is built by its own tree's kernelgen in a subprocess, with that tree's tuning
records for this GPU (so a code change and a routing change are measured together: each row names
both sides' configurations and marks the rows where they differ), or with `--launch ID` for every
token count on both sides (the code change alone), or `--launch OLD_ID/NEW_ID` for one configuration per
side (with OLD_TREE `.`, two launch configurations of this checkout). Each row also counts the cache bytes
the two sides write differently (0 where the change keeps the bits)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's kernelgen, not an installed one
# Runs in each tree: build SPEC VARIANT (with LAUNCH_ID for every token count, or the tuned routes), then
# print the library and the configuration serving each of TOKENS.
BUILD = """
import json, sys
from kernelgen.codegen.launch import ALL_TOKENS, plan_routes
from kernelgen.runtime.op import load_variant
from kernelgen.spec.parse import load_spec
from kernelgen.spec.variant import Launch
spec, name, launch, tokens = sys.argv[1:5]
v = load_spec(spec).variant(name)
op = load_variant(v, plan=plan_routes(v, [(ALL_TOKENS, Launch.from_id(launch))]) if launch else None)
print(json.dumps({"library": str(op.artifact.library), "plan": op.plan.describe(), "args": getattr(op, "args", None),
                  "routes": {n: op.plan.launch_for(int(n)).id for n in tokens.split(",")}}))
"""


def build_in(tree: Path, spec: str, variant: str, launch: str, tokens: str) -> dict[str, Any]:
    """Build one variant with the tree's own kernelgen (and records, unless launch pins one
    configuration); its library path, dispatch, and the configuration serving each token count."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]),
               KERNELGEN_CACHE_DIR=str(tree / ".kgcache"))
    done = subprocess.run([sys.executable, "-c", BUILD, spec, variant, launch, tokens], cwd=tree, env=env,
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{tree}: building {variant} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def symbol_call(every: tuple[Any, ...], args: list[str] | None, unused: Any) -> tuple[Any, ...]:
    """A side's symbol arguments from launch_args' (every tensor of the family, then eps): the tensors it
    names (op.args), or, for a tree before per-variant symbols, the first seven with `unused` for None."""
    from kernelgen.codegen.checks import ARGS

    *tensors, eps = every
    if args is None:
        return (*(t if t is not None else unused for t in tensors[:7]), eps)
    return (*(tensors[ARGS.index(a)] for a in args), eps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("sets", nargs="+", help="SPEC:VARIANT[,VARIANT...]")
    ap.add_argument("--tokens", default="1,32,128")
    ap.add_argument("--workloads", default="decode,prefill")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--launch", default="", help="one configuration id for both sides and every token count, "
                    "or OLD_ID/NEW_ID")
    ap.add_argument("--json")
    args = ap.parse_args()

    import torch

    from kernelgen.bench import empty_kernel_floor_us
    from kernelgen.build.lifecycle import load_module
    from kernelgen.measure.inputs import workload_inputs
    from kernelgen.measure.timing import launch_args, rotated_graph_us
    from kernelgen.spec.parse import load_spec

    sides = {"old": args.old.resolve(), "new": ROOT}
    ids = args.launch.split("/")
    if len(ids) > 2 or (len(ids) == 2 and not all(ids)):
        ap.error(f"--launch {args.launch!r}: give one configuration id, or OLD_ID/NEW_ID")
    pinned = {"old": ids[0], "new": ids[-1]}  # one id pins both sides
    unused = torch.empty(0, dtype=torch.uint8, device="cuda")  # the symbol's way to say 'no such tensor'
    rows: list[dict[str, Any]] = []
    for item in args.sets:
        if item.count(":") != 1:
            raise SystemExit(f"{item!r}: expected SPEC:VARIANT[,VARIANT...]")
        spec, names = item.split(":")
        for name in names.split(","):
            v = load_spec(spec).variant(name)
            built = {side: build_in(tree, spec, name, pinned[side], args.tokens) for side, tree in sides.items()}
            fns = {side: load_module(Path(b["library"]))[name] for side, b in built.items()}
            for workload in args.workloads.split(","):
                for n in (int(t) for t in args.tokens.split(",")):
                    inputs = workload_inputs(v, n, workload, seed=1)
                    every = launch_args(inputs)
                    calls = {side: symbol_call(every, b.get("args"), unused) for side, b in built.items()}
                    caches = {}
                    for side, fn in fns.items():  # the bytes each side writes into one starting cache
                        cache = inputs["kvcache"].clone()
                        fn(*(cache if t is inputs["kvcache"] else t for t in calls[side]))
                        caches[side] = cache
                    differ = int((caches["old"] != caches["new"]).sum())
                    times: dict[str, list[float]] = {"old": [], "new": [], "floor": []}
                    for r in range(args.rounds):
                        order = ("old", "new") if r % 2 == 0 else ("new", "old")
                        times["floor"].append(empty_kernel_floor_us())
                        for side in order:
                            times[side].append(rotated_graph_us([lambda fn=fns[side], a=calls[side]: fn(*a)]))  # as bench and the floor
                    med = {k: statistics.median(x) for k, x in times.items()}
                    routes = {side: b["routes"][str(n)] for side, b in built.items()}
                    rows.append(dict(variant=name, workload=workload, tokens=n, old_us=round(med["old"], 3),
                                     new_us=round(med["new"], 3), floor_us=round(med["floor"], 3),
                                     change_us=round(med["new"] - med["old"], 3), bytes_differ=differ,
                                     old_launch=routes["old"], new_launch=routes["new"],
                                     old_plan=built["old"]["plan"], new_plan=built["new"]["plan"],
                                     old_runs=[round(t, 3) for t in times["old"]], new_runs=[round(t, 3) for t in times["new"]]))
                    print(f"{name:28} {workload:8} N={n:<5} old {med['old']:.3f}  new {med['new']:.3f}  "
                          f"change {med['new'] - med['old']:+.3f} us  floor {med['floor']:.3f}  bytes differ {differ}  "
                          f"{routes['old']}{' -> ' + routes['new'] if routes['new'] != routes['old'] else ' (same)'}",
                          flush=True)
                    del inputs, a, caches
                    torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rounds": args.rounds, "rows": rows},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
