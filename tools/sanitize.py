"""Run every shipped variant's kernel with awkward inputs (padding rows, slots past the pool,
positions past freqs) at N = 1 and 4096, for compute-sanitizer:

    compute-sanitizer --tool memcheck --kernel-name kns=fused_norm_rope_store python tools/sanitize.py
    compute-sanitizer --tool racecheck --kernel-name kns=fused_norm_rope_store python tools/sanitize.py \\
        [--specs dsv4_mainkv,...] [--variants NAME,...] [--launch t64.b4.v8.lp,...] [--only] [--tokens 1,4096]

Every configuration of each variant's tuned dispatch runs, with and without PDL; --launch adds these
configurations (where a variant's guards allow them) beside the tuned ones, e.g. configurations the
tuner may choose but did not, and --only runs those alone. --specs and --variants keep the variants
named; a name or launch id that selects nothing is an error. A looping configuration walks several
tokens per block only when N exceeds one wave of blocks (thousands of tokens): give --tokens such an N
to check its exchanges between tokens. --groups runs the shipped launch groups instead (one launch writing a
layer's Q output and K/V caches; their kernel is fused_group_kernel: filter with kns=fused_), every
configuration of each group's tuned dispatch, with and without PDL, awkward inputs as above."""
from __future__ import annotations

import argparse
import sys

import torch

from kernelgen.codegen.launch import ALL_TOKENS, plan_routes
from kernelgen.measure.inputs import make_inputs
from kernelgen.measure.timing import launch_args
from kernelgen.runtime.op import current_gpu, load_variant, tuned_plan
from kernelgen.spec.parse import shipped_variants
from kernelgen.spec.variant import Launch
from kernelgen.tune.space import rejection


def _names(text: str) -> list[str]:
    return [t for t in text.split(",") if t]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", default="", help="comma-separated spec names (default: every shipped spec)")
    parser.add_argument("--variants", default="", help="comma-separated variant names (default: all of the specs)")
    parser.add_argument("--launch", default="", help="comma-separated launch ids to run beside the tuned ones")
    parser.add_argument("--only", action="store_true", help="run the --launch configurations alone")
    parser.add_argument("--tokens", default="1,4096", help="comma-separated token counts (default: 1,4096)")
    parser.add_argument("--groups", action="store_true", help="run the shipped launch groups (--specs keeps those of "
                                                              "the specs named, --variants those named)")
    parser.add_argument("--candidates", action="store_true", help="with --groups: every launch the tuner may choose, "
                                                                  "not only the tuned dispatch's")
    args = parser.parse_args()
    if args.candidates and not args.groups:
        parser.error("--candidates runs launch groups: add --groups")
    if args.groups:
        return groups(set(_names(args.specs)), set(_names(args.variants)), [int(n) for n in _names(args.tokens)],
                      args.candidates)
    specs, names = set(_names(args.specs)), set(_names(args.variants))
    extra = [Launch.from_id(i) for i in _names(args.launch)]
    tokens = [int(n) for n in _names(args.tokens)]
    if args.only and not extra:
        parser.error("--only runs the --launch configurations: name at least one")
    shipped = shipped_variants()
    for what, wanted, have in (("spec", specs, {v.spec_name for v in shipped}), ("variant", names, {v.name for v in shipped})):
        if wanted - have:
            parser.error(f"no shipped {what} named {', '.join(sorted(wanted - have))}")
    variants = [v for v in shipped if (not specs or v.spec_name in specs) and (not names or v.name in names)]
    if not variants:
        parser.error("--specs and --variants together select no variant")
    allowed: dict[str, list[Launch]] = {v.name: [] for v in variants}  # the extra configurations each variant takes
    for v in variants:
        for launch in extra:
            why = rejection(v, launch)
            if why:
                print(f"sanitize: {v.name}: {launch.id} skipped: {why}")
            else:
                allowed[v.name].append(launch)
    unused = [launch.id for launch in extra if not any(launch in mine for mine in allowed.values())]
    if unused:  # refused before anything runs
        print(f"sanitize: no selected variant allows {', '.join(unused)}: drop it from --launch or select a variant that takes it")
        return 2
    calls = 0
    for v in variants:
        mine = allowed[v.name]
        if args.only and not mine:
            continue
        plan = None
        if args.only:
            plan = plan_routes(v, [(ALL_TOKENS, mine[0])], tuple(mine))
        elif mine:  # the tuned routes, with the extra configurations compiled beside them
            tuned = tuned_plan(v, current_gpu())[0]
            plan = plan_routes(v, [(r.max_tokens, tuned.launch_for(r.max_tokens)) for r in tuned.routes], tuple(mine))
        op = load_variant(v, plan=plan)  # every configuration the plan compiles is run
        for n in tokens:
            inputs = make_inputs(op.variant, n, 4, "cuda", seed=n)
            for config in range(len(op.plan.configs)):
                for pdl in (False, True):
                    op.launch_config(config, pdl, *launch_args(inputs))
                    calls += 1
    torch.cuda.synchronize()
    print(f"sanitize: {calls} launches over {len(variants)} variants done")
    return 0


def groups(specs: set[str], names: set[str], tokens: list[int], candidates: bool = False) -> int:
    """Every shipped launch group (of the specs named, and with the names given; default all), every configuration
    of its tuned dispatch, or (candidates) every launch the tuner may choose for it."""
    from kernelgen.measure.inputs import group_inputs
    from kernelgen.runtime.group_op import load_group_kernel
    from kernelgen.spec.parse import shipped_specs
    from kernelgen.tune.runner import tuning_plan
    from kernelgen.tune.space import group_candidates, group_space

    chosen = [(g, spec.tune_overrides()) for spec in shipped_specs() if not specs or spec.name in specs
              for g in spec.groups if not names or g.name in names]
    if not chosen:
        print(f"sanitize: no shipped launch group in {', '.join(sorted(specs)) or 'the shipped specs'}"
              + (f" named {', '.join(sorted(names))}" if names else ""))
        return 2
    calls = 0
    for g, overrides in chosen:  # candidates: the tuner's own space and plan for the group
        plan = tuning_plan(g, group_candidates(g, group_space(g, overrides))[0]) if candidates else None
        op = load_group_kernel(g, plan=plan)
        for n in tokens:
            args = op.tensors({k: t for k, t in group_inputs(op.variant_for(n), n, 4, "cuda", seed=n).items() if k != "qkv"})
            for config in range(len(op.plan.configs)):
                for pdl in (False, True):
                    op.launch_config(config, pdl, args, 1e-6)
                    calls += 1
    torch.cuda.synchronize()
    print(f"sanitize: {calls} launches over {len(chosen)} launch groups done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
