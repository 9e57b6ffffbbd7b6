"""Default vs tuned us per bucket for every shipped variant and launch group, from a record file (Markdown).

    python tools/tuning_summary.py cache/nvidia-h200-sm90-132sms.json"""
from __future__ import annotations

import sys
from pathlib import Path

from kernelgen.codegen.launch import resolve
from kernelgen.spec.parse import shipped_specs
from kernelgen.tune import records

BUCKETS = (1, 16, 256, 4096, 65536, 262144, 1048576)


def main(path: str) -> str:
    found = records.read_file(Path(path))
    if found is None:
        raise SystemExit(f"tuning_summary: {path} is not a tuning record file")
    by_key = found[1]
    out = ["# Default vs tuned us per call (CUDA-graph replay; decode workload up to 256 tokens, prefill above)", "",
           "| variant | " + " | ".join(f"N={b}" for b in BUCKETS) + " | routes (N <= bound: configuration) |",
           "|---|" + "---|" * (len(BUCKETS) + 1)]
    for v in (k for spec in shipped_specs() for k in spec.kernels):
        r = by_key.get(v.content_key())
        if r is None:  # say so in the table rather than stop
            out.append(f"| {v.name} | " + " | ".join("-" for _ in BUCKETS) + f" | no record: tune it "
                       f"(kernelgen tune {v.spec_name}) |")
            continue
        default = resolve(v).launch.id
        cells = []
        for b in BUCKETS:
            lid = next((lid for bound, lid in r.choice if b <= bound), r.choice[-1][1])
            d, t = r.timings.get(default, {}).get(b), r.timings.get(lid, {}).get(b)
            cells.append(f"{d:.2f} -> {t:.2f}" if d and t else "-")
        routes = "; ".join(f"{bound}: {lid}" for bound, lid in r.choice)
        out.append(f"| {v.name} | " + " | ".join(cells) + f" | {routes} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(main(sys.argv[1]))
