"""Default vs tuned us per bucket for every shipped variant and launch group, from a record file (Markdown).

    python tools/tuning_summary.py cache/nvidia-h200-sm90-132sms.json
    python tools/tuning_summary.py cache/nvidia-h200-sm90-132sms.json --flag early_reads

--flag NAME: instead, per bucket, the fastest launch with that launch-table flag on (an optional parameter such as
min_blocks: set) against the fastest without it,
both timed in the same tuning run (a same-process A/B), for every record that timed the flag."""
from __future__ import annotations

import sys
from pathlib import Path

from kernelgen.codegen.launch import resolve
from kernelgen.spec.launchparams import BY_NAME
from kernelgen.spec.parse import shipped_specs
from kernelgen.spec.variant import Launch
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


def flag_ab(path: str, flag: str) -> str:
    """Per record and bucket: the fastest launch with `flag` on vs the fastest without (us), and their ratio."""
    param = BY_NAME.get(flag)
    if param is None or not (param.kind is bool or param.optional):
        raise SystemExit(f"tuning_summary: --flag takes a flag of the launch table or an optional parameter "
                         f"(on: set, e.g. min_blocks), not {flag!r}")
    found = records.read_file(Path(path))
    if found is None:
        raise SystemExit(f"tuning_summary: {path} is not a tuning record file")
    names = {k.content_key(): k.name for spec in shipped_specs() for k in spec.kernels}
    out = [f"# Fastest launch with {flag} vs without, us per call (same tuning run; off / on = speed-up)", "",
           "| variant | bucket: off / on = x |", "|---|---|"]
    for key, r in sorted(found[1].items(), key=lambda kv: names.get(kv[0], kv[1].variant)):
        best: dict[bool, dict[int, float]] = {False: {}, True: {}}
        for lid, t in r.timings.items():
            on = getattr(Launch.from_id(lid), flag) != param.default
            for b, us in t.items():
                best[on][b] = min(us, best[on].get(b, us))
        both = sorted(set(best[False]) & set(best[True]))
        if both:
            cells = [f"{b}: {best[False][b]:.2f} / {best[True][b]:.2f} = {best[False][b] / best[True][b]:.2f}x"
                     for b in both]
            out.append(f"| {names.get(key, r.variant)} | " + "; ".join(cells) + " |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--flag" in args:
        sys.stdout.write(flag_ab(args[0], args[args.index("--flag") + 1]))
    else:
        sys.stdout.write(main(args[0]))
