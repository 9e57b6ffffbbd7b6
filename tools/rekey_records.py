"""Carry tuning records over a template change that leaves the device code as it was.

A record holds only for the code it timed, so any change to the templates (even host code: argument
checks, the dispatch) makes kernelgen ignore it. When the kernels themselves did not change, that
costs a re-tune for nothing. This tool proves it instead: it renders each record's chosen
configurations and the default with the templates of git revision REV (the kernelgen that wrote the
records) and with this checkout's, compiles both for the record's arch, and compares the SASS of
every kernel. Records whose kernels are identical instruction for instruction move to this
template, keeping the timings of the proven configurations only; the others are left alone (re-tune).
Identical kernels are not enough when the host code that launches them changed (the grid, the block,
the attributes, the parameters: `resident_blocks` and `run` in the kernel header): then the timings
do not carry over, and the tool moves nothing. A new Params field (and the run() parameter that only
fills it) is not such a change: REV's kernels never read it, and their SASS is compared anyway.

    python tools/rekey_records.py cache/nvidia-h200-sm90-132sms.json --from 578cbc9 [--dry-run] [--jobs 2]

Needs git, nvcc and cuobjdump (CUDA's, or KERNELGEN_CUOBJDUMP=path: e.g. the one in Triton's wheel)."""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from sass_count import kernels  # tools/ is on sys.path when this script runs

from kernelgen import knobs
from kernelgen.codegen.launch import ALL_TOKENS, plan_routes, resolve
from kernelgen.codegen.render import render_variant
from kernelgen.resources import include_dir
from kernelgen.spec.group import Group
from kernelgen.spec.parse import shipped_specs
from kernelgen.spec.variant import Launch, Variant
from kernelgen.tune import records

REPO = Path(__file__).resolve().parents[1]

# Rendered by the old kernelgen (PYTHONPATH = the old tree): the same plans, its own templates.
OLD_RENDER = r"""
import json, sys
from kernelgen.codegen.launch import ALL_TOKENS, plan_routes, resolve
from kernelgen.codegen.render import render_variant
from kernelgen.spec.parse import shipped_specs
from kernelgen.spec.variant import Launch
by_name = {v.name: v for s in shipped_specs() for v in getattr(s, "kernels", s.variants)}
for job in json.load(open(sys.argv[1])):
    if job["variant"] not in by_name:  # a variant REV did not ship: nothing to compare
        continue
    v = by_name[job["variant"]]
    plan = plan_routes(v, [(ALL_TOKENS, resolve(v).launch)], tuple(Launch.from_id(i) for i in job["instances"]))
    open(job["out"], "w").write(render_variant(v, plan=plan))
"""


HEADER = Path("kernelgen") / "fused_norm_rope_store.cuh"  # under a templates directory
LAUNCH_FUNCTIONS = ("int64_t resident_blocks(", "void run(")  # the host code that shapes a launch
# ... and a launch group's (a header before launch groups has none: its records are all variants')
GROUP_LAUNCH_FUNCTIONS = ("int64_t resident_blocks_of(", "Params make_params(", "void launch_kernel(",
                          "void run_group(")


def launch_code(header: str, functions: tuple[str, ...] = LAUNCH_FUNCTIONS) -> str:
    """The launch functions of a kernel header (LAUNCH_FUNCTIONS, whole definitions), comments and
    whitespace dropped: two headers launch alike where these are equal."""
    text = re.sub(r"//[^\n]*", "", header)
    parts = []
    for signature in functions:
        start = text.find(signature)
        body = text.find("{", start)
        if start < 0 or body < 0:
            raise ValueError(f"no `{signature}...)` definition in the kernel header: the launch code moved; "
                             "update LAUNCH_FUNCTIONS in tools/rekey_records.py")
        depth, end = 0, body
        for end in range(body, len(text)):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            if depth == 0:
                break
        parts.append(" ".join(text[start:end + 1].split()))
    return "\n".join(parts)


def params_fields(header: str) -> set[str]:
    """The member names of the kernel's Params struct."""
    match = re.search(r"struct Params \{(.*?)\};", re.sub(r"//[^\n]*", "", header), re.S)
    if match is None:
        raise ValueError("no `struct Params {...};` in the kernel header: update params_fields in tools/rekey_records.py")
    return {m.group(1) for m in re.finditer(r"(\w+)\s*(?:\[[^\]]*\])?\s*;", match.group(1))}


def unit_factors(old_header: str, header: str) -> set[str]:
    """Cfg constants that header's launch code multiplies by (`* Cfg::kX`) and old_header never names: a
    constant added since. Where a variant renders it as 1 (unit_factors_hold), the product is the old one."""
    named = set(re.findall(r"\*\s*Cfg::(k\w+)\b", launch_code(header)))
    return {k for k in named if not re.search(rf"\b{k}\b", old_header)}


def unit_factors_hold(source: str, factors: set[str]) -> bool:
    """Every one of factors is a constant 1 in a rendered source."""
    return all(re.search(rf"\b{k}\s*=\s*1;", source) for k in factors)


def launch_code_as_of(old_header: str, header: str) -> str:
    """header's launch code, less what only feeds Params fields that old_header's kernels do not have: those
    assignments, and the run() parameters nothing else reads. A new field the old kernels never read cannot
    change how they launch (their SASS, compared separately, covers the rest). Products by a new Cfg constant
    (unit_factors) are dropped too: a record moves only where its variant renders that constant as 1."""
    new_fields = params_fields(header) - params_fields(old_header)
    code = launch_code(header)
    for factor in unit_factors(old_header, header):
        code = re.sub(rf"\s*\*\s*Cfg::{factor}\b", "", code)
    for field in new_fields:
        code = re.sub(rf"\s*p\.{field} = [^;]*;", "", code)
    signature = re.search(r"void run\((.*?)\) \{", code)
    if signature is None:
        return code
    params = [p.strip() for p in signature.group(1).split(",")]
    body = code[signature.end():]
    kept = [p for p in params if re.search(rf"\b{p.split()[-1]}\b", body)]
    return code[:signature.start(1)] + ", ".join(kept) + code[signature.end(1):]


def old_entries(path: Path) -> tuple[records.GpuInfo, dict[str, tuple[records.Record, dict]]]:
    """A record file of schema 1 (one template hash) or 2 (code keys), as records and their raw entries."""
    raw = json.loads(path.read_text())
    gpu = records.GpuInfo.from_dict(raw["gpu"])
    out = {}
    for key, d in raw["variants"].items():
        record = records.Record.from_json(key, gpu, {**d, "code": d.get("code", {})})
        out[key] = (record, d)
    return gpu, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("record_file", type=Path)
    ap.add_argument("--from", dest="rev", required=True, help="git revision whose templates the records were timed with")
    ap.add_argument("--archive", type=Path, help="a `git archive REV kernelgen templates specs` tarball to read REV "
                    "from (a machine without the repository's history)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--dry-run", action="store_true", help="report only; write nothing")
    args = ap.parse_args()
    cuobjdump = knobs.cuobjdump()
    if not cuobjdump:
        print("rekey: no cuobjdump (install CUDA's or set KERNELGEN_CUOBJDUMP=path)", file=sys.stderr)
        return 2
    try:
        gpu, by_key = old_entries(args.record_file)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"rekey: {args.record_file} is not a tuning record file ({exc})", file=sys.stderr)
        return 2
    # a fixed commit in the proof, not a moving name like HEAD (also with --archive, where git knows the name)
    named = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.rev], capture_output=True, text=True)
    if named.returncode != 0 and not args.archive:
        print(f"rekey: git does not know {args.rev!r}: {named.stderr.strip()}", file=sys.stderr)
        return 2
    rev = named.stdout.strip() if named.returncode == 0 else args.rev
    arch = records.arch_of(gpu)
    moved_records: list[records.Record] = []
    left: list[records.Rejected] = []  # records not moved: kept beside the file, never dropped
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        old_tree = tmp / "old"
        old_tree.mkdir()
        archive = args.archive.read_bytes() if args.archive else subprocess.run(
            ["git", "-C", str(REPO), "archive", rev, "kernelgen", "templates", "specs"], check=True,
            capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old_tree)], input=archive, check=True)
        old_header = (old_tree / "templates" / HEADER).read_text()
        factors = unit_factors(old_header, (include_dir() / HEADER).read_text())
        if launch_code(old_header) != launch_code_as_of(old_header, (include_dir() / HEADER).read_text()):
            names = " and ".join(sig.split()[-1].rstrip("(") for sig in LAUNCH_FUNCTIONS)
            print(f"rekey: the launch code ({names} in {HEADER}: grid, block, attributes, parameters) differs "
                  f"between {rev} and this checkout, so timings do not carry over: re-tune "
                  "(kernelgen tune SPEC --out cache); nothing moved", file=sys.stderr)
            return 3
        variants = {v.content_key(): resolve(v) for spec in shipped_specs() for v in spec.kernels}
        header = (include_dir() / HEADER).read_text()
        groups_launch_alike = GROUP_LAUNCH_FUNCTIONS[-1] in old_header and \
            launch_code(old_header, GROUP_LAUNCH_FUNCTIONS) == launch_code(header, GROUP_LAUNCH_FUNCTIONS)
        todo: list[tuple[records.Record, Variant, list[str]]] = []
        for key, (record, _) in sorted(by_key.items(), key=lambda kv: kv[1][0].variant):
            if key not in variants:
                print(f"{record.variant}: not a shipped variant of this checkout: skipped")
                continue
            v = variants[key]
            if isinstance(v, Group) and not groups_launch_alike:
                print(f"{record.variant}: a launch group, and the group launch code differs from {rev}'s (or {rev} "
                      "has none): left for a re-tune")
                left.append(records.Rejected(record.content_key, record.variant, f"group launch code differs from "
                                             f"{rev}'s: re-tune", {"entry": by_key[record.content_key][1]}))
                continue
            ids = sorted(record.chosen_instances() | {v.launch.instance.id})
            if record.code and not record.stale(records.current_code(v, gpu, ids)):
                print(f"{record.variant}: already keyed to this code")
                moved_records.append(record)
                continue
            todo.append((record, v, ids))
        jobs = [{"variant": v.name, "instances": ids, "out": str(tmp / f"old_{v.name}.cu")} for _, v, ids in todo]
        (tmp / "jobs.json").write_text(json.dumps(jobs))
        (tmp / "old_render.py").write_text(OLD_RENDER)
        subprocess.run([sys.executable, str(tmp / "old_render.py"), str(tmp / "jobs.json")], check=True,
                       env={**os.environ, "PYTHONPATH": str(old_tree)})
        for _, v, ids in todo:
            plan = plan_routes(v, [(ALL_TOKENS, v.launch)], tuple(Launch.from_id(i) for i in ids))
            (tmp / f"new_{v.name}.cu").write_text(render_variant(v, plan=plan))
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            old = {v.name: pool.submit(kernels, tmp / f"old_{v.name}.cu", old_tree / "templates", arch, cuobjdump)
                   for _, v, _ in todo if (tmp / f"old_{v.name}.cu").exists()}
            new = {v.name: pool.submit(kernels, tmp / f"new_{v.name}.cu", include_dir(), arch, cuobjdump)
                   for _, v, _ in todo if (tmp / f"old_{v.name}.cu").exists()}
            for record, v, ids in todo:
                if not (tmp / f"old_{v.name}.cu").exists():
                    print(f"{v.name}: not a variant of {rev}: kept as it is")
                    moved_records.append(record)
                    continue
                a, b = old[v.name].result(), new[v.name].result()
                if not unit_factors_hold((tmp / f"new_{v.name}.cu").read_text(), factors):
                    print(f"{v.name}: launches scale by {sorted(factors)}, not 1 for it: left for a re-tune")
                    left.append(records.Rejected(record.content_key, record.variant,
                                                 f"{sorted(factors)} not 1: the launch differs from {rev}'s",
                                                 {"entry": by_key[record.content_key][1]}))
                elif a and a == b:
                    was = by_key[record.content_key][1].get("template")  # a schema-1 record's one hash
                    proof = (f"{arch} SASS of {len(a)} kernels identical between {rev}"
                             + (f" (template {was})" if was else "") + f" and this checkout for "
                             f"{', '.join(ids)} (tools/rekey_records.py)")
                    print(f"{v.name}: {len(a)} kernels identical for {', '.join(ids)}: moved")
                    moved_records.append(records.rekeyed(record, records.current_code(v, gpu, ids), proof))
                else:
                    differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
                    print(f"{v.name}: kernels differ ({len(differ)}: {differ[:2]}...): left for a re-tune")
                    left.append(records.Rejected(record.content_key, record.variant,
                                                 f"its kernels differ from {rev}'s in this checkout: re-tune",
                                                 {"entry": by_key[record.content_key][1]}))
    if moved_records and not args.dry_run:  # a fresh file of this schema: the moved records only
        with tempfile.TemporaryDirectory(dir=args.record_file.parent) as staging:
            for record in moved_records:
                records.write(Path(staging), record)
            os.replace(records.record_file(Path(staging), gpu), args.record_file)
        if left:
            print(f"rekey: {len(left)} records not moved are kept in {records.set_aside(args.record_file, left, gpu)}")
    print(f"rekey: {len(moved_records)} of {len(by_key)} records keyed to this checkout's code"
          + (" (dry run)" if args.dry_run else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
