"""Sweep launch configurations of a few variants on the local GPU and print the fastest.

    python tools/sweep_launch.py [--tokens 262144] [--json out.json]

Each base variant is rebuilt with every valid (threads_per_token, tokens_per_block) pair;
all builds share one ninja graph. Timing is CUDA-graph replay (kernelgen.timing)."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

import torch

from kernelgen.build import toolchain
from kernelgen.build.lifecycle import build
from kernelgen.codegen.guards import violations
from kernelgen.codegen.launch import resolve
from kernelgen.measure.timing import measure
from kernelgen.runtime.op import Op
from kernelgen.spec.parse import load_spec
from kernelgen.spec.variant import Launch, Variant

BASES = [("dsv4_indexer", "dsv4_indexer_fp8_p64"), ("dsv4_indexer", "dsv4_indexer_bf16_p64"),
         ("dsv4_indexer", "dsv4_indexer_fp4_p64"), ("dsv4_mainkv", "dsv4_mainkv_fp8mla_p64"),
         ("dsv4_mainkv", "dsv4_mainkv_bf16_p64")]


def candidates(base: Variant) -> list[Variant]:
    vec = resolve(base).launch.vec
    out = []
    for threads in (4, 8, 16, 32):
        for block in (64, 128, 256, 512):
            if block % threads:
                continue
            v = replace(base, name=f"{base.name}_t{threads}_b{block}", launch=Launch(threads, block // threads, vec))
            if not violations(v):
                out.append(v)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, nargs="+", default=[262144, 2048])
    ap.add_argument("--json")
    args = ap.parse_args()
    variants = [c for spec, name in BASES for c in candidates(load_spec(spec).variant(name))]
    artifacts = build(variants, toolchain.detect(), toolchain.resolve_archs(None))
    rows = []
    for a in artifacts:
        op = Op(a)
        row = {"variant": a.variant.name, "launch": a.variant.launch.describe()}
        for n in args.tokens:
            row[f"us_{n}"], row[f"gbps_{n}"] = measure(op, n)
        rows.append(row)
        print(f"{row['variant']:40} " + " ".join(f"{row[f'us_{n}']:8.1f}us {row[f'gbps_{n}']:6.0f}GB/s" for n in args.tokens))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
