"""Where a small-N kernel's time goes: one variant and launch configuration built again with named parts of its
device code cut out (text edits to a copy of the kernel headers), every build timed beside the intact one and the
empty-kernel floor in one process, rounds in rotating order, CUDA-graph replay (the bench's timing).

    python tools/ablate.py SPEC VARIANT LAUNCH [--cuts nan_vote,exact_root,...] [--tokens 1,32] [--rounds 4]
        [--json out.json]

    python tools/ablate.py dsv4_mainkv dsv4_mainkv_v41_p64 t128.b1.v4.pf.pdl.er.lm --cuts all

A cut changes what the kernel writes: its numbers say what a part costs in time, nothing about bytes. Each cut is a
list of (header, text, replacement) edits, and the tool refuses a cut whose text is no longer in the headers (so a
stale cut fails rather than timing the intact kernel twice). The builds compile in parallel processes, each with its
own headers (a different build key), into KERNELGEN_CACHE_DIR; the timing process then loads them from there.
The "all cuts" build cuts the named parts together and keeps the stores; after_norm (leave at the norm) and stores
(run the math, write nothing) are timed alone, so `stores` minus `after_norm` is the math after the norm and the warp's write vote.
The PDL cuts (no wait, no trigger, the trigger after the norm) change the handshake between one launch and the next,
and are timed alone too.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# name: (what it removes, edits). Edits apply to templates/kernelgen/<header>; `text` must occur exactly once.
CUTS: dict[str, tuple[str, list[tuple[str, str, str]]]] = {
    "nan_vote": ("the row's NaN vote (a barrier or ballot before the stores; finite inputs only: a NaN would hang it)", [
        ("store.cuh", "  const bool bad = !(m <= 3.402823466e38f);\n",
         "  const bool bad = !(m <= 3.402823466e38f);\n  if (m == m) return false;\n"),
    ]),
    "exact_root": ("the correctly rounded 1/sqrt (rsqrt.approx instead)", [
        ("numeric.cuh", "  if (eps >= kSqrtInRangeMin && eps <= kFastEpsMax) return rcp_rn_in_range(sqrt_rn_in_range(a));\n",
         "  return rsqrtf(a);\n"),
    ]),
    "exchange": ("every exchange between a token's warps: the norm's sums and the amaxes (a no-op for a token of one warp)", [
        ("warps.cuh", "  if constexpr (kW == 1) {\n    return v;", "  if constexpr (true) {\n    return v;"),
    ]),
    "rope": ("the rotation", [
        ("rope.cuh", "  if constexpr (Cfg::kRopeDim > 0) {\n    if constexpr (!Cfg::kPrefetch",
         "  if constexpr (false) {\n    if constexpr (!Cfg::kPrefetch"),
    ]),
    "bf16_rounds": ("the roundings to bf16 between the stages", [
        ("store.cuh", "  if constexpr (kRound && Cfg::kLeanMath) {", "  if constexpr (false) {"),
        ("store.cuh", "  } else if constexpr (kRound) {\n#pragma unroll\n    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)\n"
                      "#pragma unroll\n      for (int k = 0; k < Cfg::kVec; ++k) r.v[c][k] = bf16_round(",
         "  } else if constexpr (false) {\n#pragma unroll\n    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)\n"
         "#pragma unroll\n      for (int k = 0; k < Cfg::kVec; ++k) r.v[c][k] = bf16_round("),
    ]),
    "after_norm": ("everything after the norm (no row is written: each warp leaves at its early exit; norm_then_rope)", [
        ("kernel.cuh", "  const bool write = f.in_range && f.loc >= 0 && f.loc < p.num_slots && pos_ok;",
         "  const bool write = f.in_range && f.loc >= 0 && f.loc < p.num_slots && pos_ok && p.eps < 0.f;"),
    ]),
    "write_vote": ("the warp's vote before the early exit (every warp goes on; norm_then_rope)", [
        ("kernel.cuh", "    normalize(r, o, p);\n    if (!__any_sync(kWarp, write || dry)) return;",
         "    normalize(r, o, p);"),
    ]),
}
CUTS["stores"] = ("every store: the math after the norm runs, no row is written (after_norm's and write_vote's edits)",
                  CUTS["after_norm"][1] + CUTS["write_vote"][1])
# The operands read after the wait besides x: each one's load gone, its value a constant.
CUTS["weights"] = ("the norm weight's loads (every weight 1)", [
    ("norm.cuh", "      load_wide<W, Cfg::kVec, kPlain>(w + r.first(c), o.w[c]);\n",
     "      for (int k = 0; k < Cfg::kVec; ++k) o.w[c][k] = 1.f;\n"),
])
CUTS["global_scale"] = ("the per-tensor scale's load (scale 1; a no-op for a variant without one)", [
    ("kernel.cuh", "    if (!dry) global_scale = Cfg::kWarmPass ? *p.global_scale : __ldg(p.global_scale);\n", "    ;\n"),
])
# The PDL handshake (timing only; ablate times a launch after a launch of itself on the same inputs).
_TRIGGER = '  asm volatile("griddepcontrol.launch_dependents;" :::);\n'
CUTS["pdl_wait"] = ("griddepcontrol.wait: the reads no longer wait for the launch before (a time, never a kernel)", [
    ("kernel.cuh", '  asm volatile("griddepcontrol.wait;" ::: "memory");\n', ""),
])
CUTS["pdl_trigger"] = ("griddepcontrol.launch_dependents: the next launch starts when this one has exited", [
    ("kernel.cuh", _TRIGGER, ""),
])
CUTS["trigger_after_norm"] = ("the trigger moved from the wait to after the norm (SGLang's place; norm_then_rope)", [
    ("kernel.cuh", _TRIGGER, ""),
    ("kernel.cuh", "    normalize(r, o, p);\n    if (!__any_sync(kWarp, write || dry)) return;",
     "    normalize(r, o, p);\n" + _TRIGGER + "    if (!__any_sync(kWarp, write || dry)) return;"),
])
# Probes add what no kernel has: code in the hot path's address range that never runs (a branch no input takes
# jumps over it), placed after the wait and before the norm. If a build with one is slower than without, the time
# goes to fetching instructions by address (the code after the wait reaching further), not to executing them.
_SKIP_AT = "  if constexpr (Cfg::kRopeFirst) {  // norm_order: rope_then_norm"


def _skipped(stores: int, kib: str) -> tuple[str, list[tuple[str, str, str]]]:
    body = "".join(f"st.volatile.shared.u32 [%0+{4 * i}], %1;\\n" for i in range(stores))  # each kept: its own address
    code = f'  if (p.eps < -1.f) asm volatile("{body}" :: "r"(0), "r"(0) : "memory");  // probe: never runs\n'
    return (f"{stores} shared stores after the wait that never run ({kib} of sm_90a code: a probe of instruction fetch)",
            [("kernel.cuh", _SKIP_AT, code + _SKIP_AT)])


CUTS["skip_64"] = _skipped(64, "about 2 KiB")
CUTS["skip_128"] = _skipped(128, "about 3 KiB")
# Cuts timed alone, never in the "all cuts" build (which cuts the named parts together and keeps the stores):
# after_norm and stores subsume write_vote's edit or the parts after the norm; the PDL cuts change the handshake
# between launches, not a part of one, and trigger_after_norm edits write_vote's text.
ALONE = ("after_norm", "stores", "pdl_wait", "pdl_trigger", "trigger_after_norm", "skip_64", "skip_128")


def headers_with(cuts: list[str], into: Path) -> Path:
    """A copy of the kernel headers with the cuts' edits applied; returns the directory to pass as -I."""
    from kernelgen import resources

    src = resources.template_dir() / "kernelgen"
    dst = into / "kernelgen"
    shutil.copytree(src, dst)
    for cut in cuts:
        for header, text, new in CUTS[cut][1]:
            path = dst / header
            body = path.read_text()
            if body.count(text) != 1:
                sys.exit(f"ablate: cut {cut!r}: its text occurs {body.count(text)} times in {header}, not once; "
                         "update CUTS to the current headers")
            path.write_text(body.replace(text, new))
    return into


def load(spec: str, variant: str, launch: str, include: Path | None):
    """The variant built with one launch configuration (an explicit plan) against the given headers."""
    from kernelgen import resources
    from kernelgen.runtime.op import load_variant
    from kernelgen.spec.parse import load_spec

    if include is not None:
        resources.include_dir = lambda: include  # the build reads the headers through this (lifecycle.py)
    v = load_spec(resources.find_spec(spec)).kernel(variant)
    return load_variant(v, plan=plan_for(v, launch))


def plan_for(v, launch: str):  # noqa: ANN001, ANN201 (a Variant or Group; a LaunchPlan)
    """The plan an ablation build holds: the named launch (with its PDL) serving every token count, so that op.launch
    runs it (a tuning plan would route every count to the variant's default launch)."""
    from kernelgen.codegen.launch import ALL_TOKENS, plan_routes
    from kernelgen.spec.variant import Launch

    return plan_routes(v, [(ALL_TOKENS, Launch.from_id(launch))])


def builds_for(cuts: list[str]) -> dict[str, list[str]]:
    """The builds to time: intact, each cut alone (an item `a+b` is one build with both), and (of two or more single
    cuts) the named parts cut together, stores kept."""
    together = [c for c in cuts if c not in ALONE and "+" not in c]
    return ({"intact": []} | {c: c.split("+") for c in cuts}
            | ({"all cuts": together} if len(together) > 1 else {}))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec")
    ap.add_argument("variant")
    ap.add_argument("launch")
    ap.add_argument("--cuts", default="all", help=f"comma-separated, or all: {', '.join(CUTS)}")
    ap.add_argument("--tokens", default="1,32")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--json")
    ap.add_argument("--build-one", help=argparse.SUPPRESS)  # internal: build one cut's headers (a directory)
    a = ap.parse_args(argv)
    if a.build_one is not None:
        load(a.spec, a.variant, a.launch, Path(a.build_one) if a.build_one else None)
        return
    cuts = list(CUTS) if a.cuts == "all" else [c for c in a.cuts.split(",") if c]
    unknown = [part for c in cuts for part in c.split("+") if part not in CUTS]
    if unknown:
        sys.exit(f"ablate: unknown cut(s) {', '.join(unknown)}; known: {', '.join(CUTS)}")
    builds = builds_for(cuts)
    work = Path(tempfile.mkdtemp(prefix="kernelgen-ablate-"))
    dirs = {name: (headers_with(cs, work / f"b{i}") if cs else None) for i, (name, cs) in enumerate(builds.items())}
    # the builds share the CPUs: each runs nvcc on its share of them
    env = {**os.environ, "KERNELGEN_JOBS": str(max(1, (os.cpu_count() or 1) // len(dirs)))}
    procs = {name: subprocess.Popen([sys.executable, __file__, a.spec, a.variant, a.launch,
                                     "--build-one", str(d) if d else ""], env=env)
             for name, d in dirs.items()}
    failed = [name for name, p in procs.items() if p.wait() != 0]
    if failed:
        shutil.rmtree(work, ignore_errors=True)
        sys.exit(f"ablate: the build(s) {', '.join(failed)} failed")

    import torch
    from kernelgen.bench import empty_kernel_floor_us
    from kernelgen.measure.inputs import call_inputs, group_workload_inputs
    from kernelgen.measure.timing import rotated_graph_us

    ops = {name: load(a.spec, a.variant, a.launch, d) for name, d in dirs.items()}
    tokens = [int(t) for t in a.tokens.split(",")]
    times: dict[str, dict[int, list[float]]] = {name: {n: [] for n in tokens} for name in [*ops, "floor"]}
    for n in tokens:
        inputs = group_workload_inputs(ops["intact"].variant, n, "decode", seed=1)
        names = list(ops)
        for r in range(a.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            times["floor"][n].append(empty_kernel_floor_us())
            for name in order:
                op = ops[name]
                args = op.tensors(call_inputs(inputs))
                times[name][n].append(rotated_graph_us([lambda op=op, args=args: op.launch(args, 1e-6)]))
        torch.cuda.synchronize()
    rows = {name: {n: statistics.median(ts) for n, ts in per.items()} for name, per in times.items()}
    print(f"{a.variant} {a.launch} on {torch.cuda.get_device_name()}: us per call (median of {a.rounds} rounds)")
    print(f"{'build':14s} " + " ".join(f"N={n:<7d}" for n in tokens) + "  vs intact")
    for name, per in rows.items():
        delta = " ".join(f"{per[n] - rows['intact'][n]:+.3f}" for n in tokens)
        what = "" if name == "all cuts" else "; ".join(CUTS[c][0] for c in builds.get(name, []))
        print(f"{name:14s} " + " ".join(f"{per[n]:<9.3f}" for n in tokens) + f"  {delta}  {what}")
    if a.json:
        Path(a.json).write_text(json.dumps({"variant": a.variant, "launch": a.launch, "gpu": torch.cuda.get_device_name(),
                                            "rounds": a.rounds, "us": rows, "samples": times}, indent=1))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
