"""Looping launches against plain ones at large N: each variant with a few large-N mappings, with and
without `loop` (one wave of blocks walks the tokens, next token prefetched), timed like `kernelgen bench`
(graph replay, inputs rotated past 3x L2), copy roofline and floor measured in the same process.

    python tools/loop_probe.py [--tokens 65536 262144 1048576] [--workload prefill] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from kernelgen import bench
from kernelgen.build import toolchain as tc
from kernelgen.build.lifecycle import build
from kernelgen.codegen.guards import violations
from kernelgen.codegen.launch import ALL_TOKENS, plan_routes
from kernelgen.runtime.op import Op
from kernelgen.spec.parse import load_spec
from kernelgen.spec.variant import Launch

BASES = ["dsv4_indexer:dsv4_indexer_fp8_p64", "dsv4_indexer:dsv4_indexer_fp4_p64",
         "dsv4_indexer:dsv4_indexer_bf16_p64", "dsv4_mainkv:dsv4_mainkv_fp8mla_p64",
         "dsv4_mainkv:dsv4_mainkv_bf16_p64"]
MAPPINGS = ["t4.b16.v8", "t4.b64.v8", "t8.b8.v8", "t8.b32.v8", "t16.b4.v8", "t16.b16.v4"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bases", nargs="*", default=BASES)
    ap.add_argument("--tokens", type=int, nargs="+", default=[65536, 262144, 1048576])
    ap.add_argument("--workload", default="prefill", choices=("prefill", "decode"))
    ap.add_argument("--json")
    args = ap.parse_args()
    variants = []
    for item in args.bases:
        spec, name = item.split(":")
        base = load_spec(spec).variant(name)
        for mapping in MAPPINGS:
            for loop in (False, True):
                launch = replace(Launch.from_id(mapping), loop=loop)
                v = replace(base, name=f"{name}_{launch.id.replace('.', '_')}", launch=launch)
                if not violations(v):
                    variants.append(v)
    plans = [plan_routes(v, [(ALL_TOKENS, v.launch)]) for v in variants]
    artifacts = build(variants, tc.detect(), tc.resolve_archs(None), launch_plans=plans)
    roofline = bench.copy_roofline_gbs()
    floor = bench.empty_kernel_floor_us()
    rows = []
    for a in artifacts:
        for r in bench.bench_variant(Op(a), tuple(args.tokens), args.workload, roofline, ()):
            rows.append({"variant": a.variant.name, "launch": a.variant.launch.id, "tokens": r.tokens, "us": r.us,
                         "roofline_pct": r.roofline_pct})
            print(f"{a.variant.name:48} N={r.tokens:<8} {r.us:9.2f} us {r.roofline_pct:5.1f}%", flush=True)
    print(f"copy roofline {roofline:.0f} GB/s, empty-kernel floor {floor:.3f} us")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"roofline_gbs": roofline, "floor_us": floor, "workload": args.workload, "rows": rows}, fh,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
