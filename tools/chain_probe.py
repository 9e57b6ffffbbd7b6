"""Where a small-batch call spends its time: each variant timed beside copies of itself with one stage
taken out (no norm, no RoPE, no Hadamard, a bf16 store instead of the quantizer, and all of them out),
same launch configuration (the tuned route for the token count), CUDA-graph replay, the empty-kernel
floor measured in the same process. Differences of those times are the stages' share of the
dependent chain (docs/perf.md).

    python tools/chain_probe.py [--tokens 1 16 128] [--json out.json] [SPEC:VARIANT ...]
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

import torch

from kernelgen.bench import empty_kernel_floor_us
from kernelgen.build import toolchain as tc
from kernelgen.build.lifecycle import build
from kernelgen.codegen.guards import violations
from kernelgen.measure.inputs import workload_inputs
from kernelgen.measure.timing import graph_replay_us, launch_args
from kernelgen.runtime.op import Op, current_gpu, tuned_plan
from kernelgen.spec.parse import load_spec
from kernelgen.spec.variant import Variant

BASES = ["dsv4_indexer:dsv4_indexer_fp8_p64", "dsv4_indexer:dsv4_indexer_fp4_p64",
         "dsv4_indexer:dsv4_indexer_bf16_p64", "dsv4_mainkv:dsv4_mainkv_fp8mla_p64",
         "dsv4_mainkv:dsv4_mainkv_bf16_p64"]


def stripped(v: Variant) -> dict[str, Variant]:
    """v and its copies with one stage removed (only stages v has); names stay unique per copy."""
    out = {"full": v}
    if v.norm != "none":
        out["-norm"] = replace(v, norm="none", norm_bias=False)
    if v.rope_dim:
        out["-rope"] = replace(v, rope_dim=0)
    if v.hadamard:
        out["-hadamard"] = replace(v, hadamard=False)
    if v.store != "bf16":
        out["-quant"] = replace(v, store="bf16")
    out["bare"] = replace(v, norm="none", norm_bias=False, rope_dim=0, hadamard=False, store="bf16")
    return {k: replace(s, name=f"{v.name}_{k.strip('-')}") for k, s in out.items() if not violations(s)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bases", nargs="*", default=BASES)
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 16, 128])
    ap.add_argument("--json")
    args = ap.parse_args()
    gpu = current_gpu()
    jobs = []  # (base name, stage, N, variant with the routed launch)
    for item in args.bases:
        spec, name = item.split(":")
        base = load_spec(spec).variant(name)
        plan, _ = tuned_plan(base, gpu)
        for n in args.tokens:
            launch = plan.launch_for(n)
            for stage, s in stripped(base).items():
                jobs.append((name, stage, n, replace(s, name=f"{s.name}_{launch.id.replace('.', '_')}", launch=launch)))
    unique = {j[3].name: j[3] for j in jobs}
    # each copy's default plan is its one launch (the routed one, PDL included)
    ops = {a.variant.name: Op(a) for a in build(list(unique.values()), tc.detect(), tc.resolve_archs(None))}
    floor = empty_kernel_floor_us()
    rows = []
    for name, stage, n, v in jobs:
        inputs = workload_inputs(v, n, "decode")
        call_args = launch_args(inputs)
        op = ops[v.name]
        us = graph_replay_us(lambda op=op, a=call_args: op.launch(*a), calls=20, reps=25)
        rows.append({"variant": name, "stage": stage, "tokens": n, "launch": v.launch.id, "us": round(us, 3)})
        print(f"{name:26} N={n:<5} {v.launch.id:18} {stage:10} {us:6.3f} us", flush=True)
    print(f"empty-kernel floor {floor:.3f} us")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "floor_us": floor, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
