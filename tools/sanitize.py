"""Run every shipped variant's kernel with awkward inputs (padding rows, slots past the pool,
positions past freqs) at N = 1 and 4096, for compute-sanitizer:

    compute-sanitizer --tool memcheck --kernel-name kns=fused_norm_rope_store python tools/sanitize.py
    compute-sanitizer --tool racecheck --kernel-name kns=fused_norm_rope_store python tools/sanitize.py \
        [--specs dsv4_mainkv,...] [--launch t64.b4.v8.lp,t128.b2.v4.pf,...]

Every configuration of each variant's tuned dispatch runs, with and without PDL; --launch adds these
configurations (where a variant's guards allow them) beside the tuned ones, e.g. configurations the
tuner may choose but did not; --specs keeps the variants of these specs only."""
from __future__ import annotations

import argparse
import sys

import torch

from kernelgen.measure.inputs import make_inputs
from kernelgen.measure.timing import launch_args
from kernelgen.codegen.launch import plan_routes
from kernelgen.runtime.op import current_gpu, load_variant, tuned_plan
from kernelgen.spec.parse import shipped_variants
from kernelgen.spec.variant import Launch
from kernelgen.tune.space import rejection


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", default="", help="comma-separated spec names (default: every shipped spec)")
    parser.add_argument("--launch", default="", help="comma-separated launch ids to run beside the tuned ones")
    args = parser.parse_args()
    specs = {s for s in args.specs.split(",") if s}
    extra = [Launch.from_id(i) for i in args.launch.split(",") if i]
    variants = [v for v in shipped_variants() if not specs or v.spec_name in specs]
    calls = 0
    for v in variants:
        plan = None
        allowed = tuple(launch for launch in extra if rejection(v, launch) is None)
        if allowed:  # the tuned routes, with the extra configurations compiled beside them
            tuned = tuned_plan(v, current_gpu())[0]
            plan = plan_routes(v, [(r.max_tokens, tuned.launch_for(r.max_tokens)) for r in tuned.routes], allowed)
        op = load_variant(v, plan=plan)  # every configuration the plan compiles is run
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
