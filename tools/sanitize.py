"""Run every shipped variant's kernel with awkward inputs (padding rows, slots past the pool,
positions past freqs) at N = 1 and 4096, for compute-sanitizer:

    compute-sanitizer --tool memcheck --kernel-name kns=fused_norm_rope_store python tools/sanitize.py
    compute-sanitizer --tool racecheck --kernel-name kns=fused_norm_rope_store python tools/sanitize.py"""
from __future__ import annotations

import sys

import torch

from kernelgen.measure.inputs import make_inputs
from kernelgen.measure.timing import launch_args
from kernelgen.runtime.op import load_variant
from kernelgen.spec.parse import shipped_variants


def main() -> int:
    variants = shipped_variants()
    calls = 0
    for v in variants:
        op = load_variant(v)  # the tuned dispatch: every configuration it compiles is run
        for n in (1, 4096):
            inputs = make_inputs(op.variant, n, 4, "cuda", seed=n)
            for config in range(len(op.plan.configs)):
                for pdl in (False, True):
                    op.launch_config(config, pdl, *launch_args(inputs))
                    calls += 1
    torch.cuda.synchronize()
    print(f"sanitize: {calls} launches over {len(variants)} variants done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
