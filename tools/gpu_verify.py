"""Verify every shipped variant on the local GPU against the reference; print a table, write JSON.

    python tools/gpu_verify.py [--tokens 4096] [--json out.json]

Also times each variant once at a large token count (median of CUDA-event timings) so the
report shows effective bandwidth next to correctness; `kernelgen bench` is the tool for speed."""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from kernelgen.build import toolchain
from kernelgen.build.lifecycle import build
from kernelgen.measure.inputs import timing_inputs
from kernelgen.measure.timing import measure, per_call_us
from kernelgen.measure.verify import verify
from kernelgen.runtime.op import Op
from kernelgen.spec.parse import shipped_variants


def time_op(op: Op, num_tokens: int) -> tuple[float, float, float]:
    """(GPU us per call, GB/s of compulsory bytes, host us per checked call at 8 tokens)."""
    us, gbps = measure(op, num_tokens)
    small = timing_inputs(op.variant, 8)
    host_us = per_call_us(lambda: op(small["x"], small["weight"], small["freqs"], small["positions"],
                                     small["out_loc"], small["kvcache"], bias=small["bias"]), 200)
    return us, gbps, host_us


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--time-tokens", type=int, default=262144)
    ap.add_argument("--json")
    args = ap.parse_args()
    variants = shipped_variants()
    t0 = time.monotonic()
    artifacts = build(variants, toolchain.detect(), toolchain.resolve_archs(None))
    print(f"built {len(artifacts)} variants in {time.monotonic() - t0:.1f} s on {torch.cuda.get_device_name()}")
    rows, ok = [], True
    header = f"{'variant':34} {'rows':>5} {'skip':>4} {'bf16!=':>6} {'code!=':>6} {'far':>3} {'codes':>8} {'ulp':>3} {'ue8m0':>5} {'outside':>7} {'relerr':>8} {'us':>8} {'GB/s':>6} {'host':>5}"
    print(header)
    for seed, a in enumerate(artifacts):
        op = Op(a)
        reports = [verify(op.variant, op, n, 4, "cuda", seed=seed * 10 + i) for i, n in enumerate((args.tokens, 3))]
        us, gbs, host_us = time_op(op, args.time_tokens)
        first = reports[0]
        passed = all(r.ok for r in reports)
        ok &= passed
        rows.append({"reports": [r.as_dict() for r in reports], "time_us": us, "gbps": gbs, "host_us": host_us,
                     "time_tokens": args.time_tokens})
        print(f"{first.variant:34} {first.written_rows:5d} {first.skipped_rows:4d} {first.bf16_mismatches:6d} "
              f"{first.code_mismatches:6d} {first.code_far:3d} {first.codes_total:8d} {first.scale_max_ulp:3d} "
              f"{first.ue8m0_mismatches:5d} {first.outside_changed:7d} {first.rel_err:8.2e} {us:8.1f} {gbs:6.0f} {host_us:5.1f}"
              + ("" if passed else "  FAIL"))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "variants": rows}, fh, indent=1)
    print("ALL OK" if ok else "FAILURES")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
