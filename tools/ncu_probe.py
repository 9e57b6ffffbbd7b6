"""Launch chosen variants a few times each, eagerly, for Nsight Compute (occupancy, stall reasons,
memory throughput of the tuned dispatch's configuration at one token count, in the prefill workload
or, named last, the decode one):

    ncu --clock-control none --kernel-name regex:fused_norm_rope_store --launch-skip-before-match 0 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats \
        python tools/ncu_probe.py SPEC N VARIANT [VARIANT ...] [prefill|decode]

Each variant runs 3 times (the first warms caches and the loader); profile with a --launch-skip
or filter as needed. Prints which configuration the tuned dispatch routes N tokens to."""
from __future__ import annotations

import sys

import torch

from kernelgen import load
from kernelgen.measure.inputs import workload_inputs
from kernelgen.measure.timing import launch_args


def main() -> int:
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    spec, n, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    workload = names.pop() if names[-1] in ("prefill", "decode") else "prefill"
    if not names:
        print(f"ncu_probe: name at least one variant (the workload, if given, comes last)\n{__doc__}")
        return 2
    for name in names:
        op = load(spec, name)
        args = launch_args(workload_inputs(op.variant, n, workload))
        config, pdl = op.plan.pick(n)
        print(f"{name} N={n} {workload}: config {config.id} pdl={pdl}", flush=True)
        for _ in range(3):
            op.launch(*args)
        torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
