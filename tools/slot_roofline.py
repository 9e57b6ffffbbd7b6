"""What the memory system gives a layout's slots, prefill against decode: each variant beside a copy
of itself stripped to its store (no norm, no RoPE, no Hadamard: the same rows read and the same slots
written, the same page layout, little math beyond the quantizer's; FlashMLA keeps its RoPE, which its
layout requires), timed in both workloads at large batches on several mappings,
inputs rotated past 3x the L2, the copy roofline measured in the same process.

If the stripped copy loses as much from prefill to decode as the full variant, the decode shortfall
belongs to the scattered slots themselves (how the memory system serves them), not to the kernel's math.

    python tools/slot_roofline.py [--tokens 262144 1048576] [--launches t4.b16.v8 ...] [--json out.json] \
        [SPEC:VARIANT ...]
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

import torch

from kernelgen.bench import copy_roofline_gbs, rotated_us
from kernelgen.build import toolchain as tc
from kernelgen.build.lifecycle import build
from kernelgen.codegen.guards import violations
from kernelgen.runtime.op import Op
from kernelgen.spec.parse import load_spec
from kernelgen.spec.variant import Launch, Variant

BASES = ["dsv4_indexer:dsv4_indexer_fp8_p64", "dsv4_indexer:dsv4_indexer_fp4_p64",
         "dsv4_indexer:dsv4_indexer_bf16_p64", "dsv4_mainkv:dsv4_mainkv_fp8mla_p64",
         "dsv4_mainkv:dsv4_mainkv_bf16_p64"]
LAUNCHES = ["t4.b16.v8", "t8.b8.v8", "t16.b4.v8", "t8.b8.v8.lp"]


def copies(base: Variant, launches: list[str]) -> list[tuple[str, Variant]]:
    """(kind, variant) for the full variant and its store-only copy on every valid launch."""
    bare = replace(base, norm="none", norm_bias=False, rope_dim=0, hadamard=False)
    store_only = bare if not violations(bare) else replace(bare, rope_dim=base.rope_dim)  # FlashMLA keeps its RoPE
    out = []
    for kind, v in (("full", base), ("store", store_only)):
        for lid in launches:
            c = replace(v, name=f"{base.name}_{kind}_{lid.replace('.', '_')}", launch=Launch.from_id(lid))
            if not violations(c):
                out.append((kind, c))
    return out


def timed(op: Op, n: int, workload: str, roofline: float, l2: int) -> tuple[float, float]:
    """(us per call, % of the copy roofline on compulsory bytes), inputs rotated as in kernelgen bench."""
    us, moved, _ = rotated_us(op, n, workload, l2)
    torch.cuda.empty_cache()
    return us, 100 * moved / (us * 1e-6) / 1e9 / roofline


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bases", nargs="*", default=BASES)
    ap.add_argument("--tokens", type=int, nargs="+", default=[262144, 1048576])
    ap.add_argument("--launches", nargs="+", default=LAUNCHES)
    ap.add_argument("--json")
    args = ap.parse_args()
    jobs = [(item.split(":")[1], kind, v) for item in args.bases
            for kind, v in copies(load_spec(item.split(":")[0]).variant(item.split(":")[1]), args.launches)]
    ops = {a.variant.name: Op(a) for a in build([v for _, _, v in jobs], tc.detect(), tc.resolve_archs(None))}
    roofline = copy_roofline_gbs()
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    print(f"copy roofline {roofline:.0f} GB/s", flush=True)
    rows = []
    for base, kind, v in jobs:
        for n in args.tokens:
            row = {"variant": base, "kind": kind, "launch": v.launch.id, "tokens": n}
            for workload in ("prefill", "decode"):
                us, pct = timed(ops[v.name], n, workload, roofline, l2)
                row[f"{workload}_us"], row[f"{workload}_pct"] = round(us, 2), round(pct, 1)
            rows.append(row)
            print(f"{base:26} {kind:5} {v.launch.id:12} N={n:<8} prefill {row['prefill_us']:8.1f} us "
                  f"{row['prefill_pct']:5.1f}%  decode {row['decode_us']:8.1f} us {row['decode_pct']:5.1f}%", flush=True)
    print("best per variant, kind and N (% of the copy roofline): prefill / decode")
    for base in dict.fromkeys(r["variant"] for r in rows):
        for kind in ("full", "store"):
            for n in args.tokens:
                mine = [r for r in rows if (r["variant"], r["kind"], r["tokens"]) == (base, kind, n)]
                if mine:
                    print(f"  {base:26} {kind:5} N={n:<8} {max(r['prefill_pct'] for r in mine):5.1f} / "
                          f"{max(r['decode_pct'] for r in mine):5.1f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "roofline_gbs": roofline, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
