"""Count the SASS instructions of a variant's kernel per launch configuration (straight-line code per
token, so the static count is the per-token count a thread executes; a looping `.lp` configuration
also holds its first token's loads outside the loop), by opcode family.

    python tools/sass_count.py dsv4_indexer dsv4_indexer_fp4_p64 t4.b16.v8.pf [t16.b4.v4.pf ...] [--ops] [--dump FILE]
        [--arch sm_100a]   (a .pk id: the packed float32 build)

--ops also lists the opcodes by count; --dump writes the whole SASS to FILE.
--regs adds, per launch, registers per thread, stack (spills land there), local and shared bytes, and the warps an
SM holds at its block size. SPEC VARIANT may name a launch group (its one kernel; --bound takes a variant).
--bound SMS,GHZ,GBS adds, per launch, the instructions per value and the share of the GPU's issue slots (4 warp
instructions per SM and cycle) a kernel of that count needs to move its bytes at GBS (the copy roofline): e.g.
`--bound 132,1.98,4180` for the H200. A kernel that needs most of them cannot reach the roofline: Nsight Compute
saw the issue-bound fp4 indexer at 0.78 issued per scheduler and cycle, so `estimate` is min(100, 78 / share) % of the
roofline. Static counts hold the rare paths too: the count is high and the estimate low.

Needs cuobjdump: the test extra's (NVIDIA's nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels), CUDA's, or
KERNELGEN_CUOBJDUMP=path."""
from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from kernelgen import knobs
from kernelgen.build import toolchain as tc
from kernelgen.build.buildplan import CUDA_FLAGS, gencode_flags
from kernelgen.codegen.launch import ALL_TOKENS, LaunchPlan, plan_routes
from kernelgen.codegen.render import render_variant
from kernelgen.resources import include_dir
from kernelgen.spec.parse import load_spec
from kernelgen.spec.variant import Launch

FAMILIES = {"shuffle": ("SHFL",), "convert": ("F2F", "F2I", "I2F", "F2FP"), "float": ("FADD", "FMUL", "FFMA", "FMNMX",
            "FSETP", "FSEL", "MUFU", "FCHK", "FADD2", "FMUL2", "FFMA2"), "memory": ("LDG", "STG", "LDS", "STS", "LD", "ST"),
            "integer": ("IMAD", "IADD3", "LOP3", "SHF", "ISETP", "LEA", "SEL", "PRMT", "IABS", "IMNMX")}


def family(op: str) -> str:
    base = op.split(".")[0]
    return next((name for name, ops in FAMILIES.items() if base in ops), "other")


def _compile(source: Path, include: Path, arch: str) -> Path:
    toolchain = tc.detect()
    obj = source.with_suffix(".o")
    includes = [f"-I{d}" for d in (str(include), *toolchain.include_dirs)]
    done = subprocess.run([toolchain.nvcc, *CUDA_FLAGS, *includes, *gencode_flags((arch,)), "-c",
                           str(source), "-o", str(obj)], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"nvcc failed on {source}:\n{done.stderr[-4000:]}")
    return obj


def _cuobjdump(cuobjdump: str, *args: str) -> str:
    # cuobjdump runs nvdisasm: look beside it first (NVIDIA's wheels install both into one bin folder)
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(cuobjdump).parent), os.environ.get("PATH", "")]))
    return subprocess.run([cuobjdump, *args], check=True, capture_output=True, text=True, env=env).stdout


def _build(spec: str, name: str, ids: list[str], arch: str, tmp: str) -> tuple[LaunchPlan, Path]:
    """The kernel (a variant or a launch group) with every launch of ids compiled in one nvcc run: its plan and object."""
    k = load_spec(spec).kernel(name)
    launches = [Launch.from_id(i) for i in ids]
    plan = plan_routes(k, [(ALL_TOKENS, launches[0])], tuple(launches))
    src = Path(tmp) / "k.cu"
    src.write_text(render_variant(k, plan=plan))
    return plan, _compile(src, include_dir(), arch)


def _by_launch(plan: LaunchPlan, by_function: dict[str, str]) -> dict[str, str]:
    """Per-function text keyed by the launch its configuration struct names (a group's members share the index)."""
    out = {}
    for fn, text in by_function.items():
        m = re.search(r"_cfg(\d+)", fn)
        if m:
            out[plan.configs[int(m.group(1))].id] = text
    return out


def _read(spec: str, name: str, ids: list[str], arch: str, *flags: str) -> tuple[LaunchPlan, list[str]]:
    """The kernel built once (every launch of ids in one nvcc run) and cuobjdump's output for each of flags."""
    cuobjdump = knobs.cuobjdump() or "cuobjdump"
    with tempfile.TemporaryDirectory() as tmp:
        plan, obj = _build(spec, name, ids, arch, tmp)
        return plan, [_cuobjdump(cuobjdump, flag, str(obj)) for flag in flags]


def inspect(spec: str, name: str, ids: list[str], arch: str = "sm_90a", dump: str | None = None,
            regs: bool = False) -> tuple[dict[str, list[str]], dict[str, dict[str, int]]]:
    """From one build: each launch's opcodes in program order, and with regs its resources (else {})."""
    if regs:
        _regs_arch(arch)
    plan, texts = _read(spec, name, ids, arch, "-sass", *(("-res-usage",) if regs else ()))
    if dump:
        Path(dump).write_text(texts[0])
    return _opcodes(plan, texts[0]), (_usage(plan, texts[1]) if regs else {})


def sequence(spec: str, variant: str, ids: list[str], dump: str | None = None,
             arch: str = "sm_90a") -> dict[str, list[str]]:
    """Each launch's kernel as its opcodes in program order (every launch compiled in one nvcc run); a launch group's
    name gives its one kernel."""
    return inspect(spec, variant, ids, arch, dump)[0]


def _opcodes(plan: LaunchPlan, sass: str) -> dict[str, list[str]]:
    blocks = re.split(r"\n\s+Function : ", sass)[1:]
    bodies = _by_launch(plan, {b.splitlines()[0].strip(): "\n".join(b.splitlines()[1:]) for b in blocks})
    return {lid: re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", body)
            for lid, body in bodies.items()}


# An sm_90 SM (H100, H200): registers (in four sub-partitions, allocated per warp in units of 256), threads, blocks
# and shared memory it holds, and the shared memory the system reserves per block (CUDA's cuda_occupancy.h rules).
SM_REGISTERS, SUB_PARTITIONS, REG_UNIT = 65536, 4, 256
SM_THREADS, SM_BLOCKS, SM_SHARED, BLOCK_RESERVED = 2048, 32, 233472, 1024
REGS_ARCHS = ("sm_90a", "sm_90")


def resident_warps(regs: int, shared: int, block_threads: int) -> int:
    """Warps an sm_90 SM holds of a kernel using `regs` registers per thread and `shared` bytes per block."""
    warps = -(-block_threads // 32)
    limits = [SM_THREADS // (warps * 32), SM_BLOCKS, SM_SHARED // (shared + BLOCK_RESERVED)]
    if regs:
        per_warp = -(-regs * 32 // REG_UNIT) * REG_UNIT
        limits.append(SM_REGISTERS // SUB_PARTITIONS // per_warp * SUB_PARTITIONS // warps)
    return min(limits) * warps


def _regs_arch(arch: str) -> None:
    if arch not in REGS_ARCHS:
        raise SystemExit(f"--regs knows an sm_90 SM's limits (H100, H200), not {arch}'s: use --arch sm_90a")


def resources(spec: str, name: str, ids: list[str], arch: str = "sm_90a") -> dict[str, dict[str, int]]:
    """Per launch: registers per thread, stack, local and shared bytes (cuobjdump -res-usage), and the warps an sm_90
    SM holds at the launch's block size."""
    _regs_arch(arch)
    plan, [usage] = _read(spec, name, ids, arch, "-res-usage")
    return _usage(plan, usage)


def _usage(plan: LaunchPlan, usage: str) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for lid, line in _by_launch(plan, dict(re.findall(r"Function (\S+):\s*\n\s*(REG:.*)", usage))).items():
        launch = Launch.from_id(lid)
        got = {key.lower(): int(v) for key, v in re.findall(r"(REG|SHARED|LOCAL|STACK):(\d+)", line)}
        out[lid] = {**got, "warps": resident_warps(got["reg"], got["shared"],
                                                   launch.threads_per_token * launch.tokens_per_block)}
    return out


def count(spec: str, variant: str, ids: list[str], by_opcode: bool = False,
          dump: str | None = None, arch: str = "sm_90a") -> dict[str, collections.Counter[str]]:
    return _counters(sequence(spec, variant, ids, dump, arch), by_opcode)


def _counters(sequences: dict[str, list[str]], by_opcode: bool) -> dict[str, collections.Counter[str]]:
    return {lid: collections.Counter(op if by_opcode else family(op) for op in ops if op not in ("NOP", "BRA", "EXIT"))
            for lid, ops in sequences.items()}


ISSUE_PER_SM_CYCLE = 4 * 32  # thread instructions: four schedulers, one warp instruction each per cycle
ISSUED_WHEN_BOUND = 0.78  # issued per scheduler and cycle of an issue-bound kernel (the fp4 indexer, Nsight Compute)


def issue_share(thread_instructions_per_token: float, bytes_per_token: float, sms: int, ghz: float,
                gbs: float) -> float:
    """The share of the GPU's issue slots a kernel needs to move bytes_per_token per token at gbs GB/s."""
    tokens_per_s = gbs * 1e9 / bytes_per_token
    return thread_instructions_per_token * tokens_per_s / (sms * ISSUE_PER_SM_CYCLE * ghz * 1e9)


def bound(spec: str, variant: str, counts: dict[str, int], sms: int, ghz: float, gbs: float) -> dict[str, dict]:
    """Per launch: instructions per value, the issue share at the roofline and the % of it an issue-bound kernel of
    that count reaches (static counts: an estimate from below)."""
    from kernelgen.measure.timing import estimated_bytes
    from kernelgen.spec.group import Group
    v = load_spec(spec).kernel(variant)
    if isinstance(v, Group):
        raise SystemExit(f"--bound takes a variant, not the launch group {variant}: name a member (its rows, its "
                         "bytes)")
    rows, per_token = v.heads, estimated_bytes(v, 1)
    out = {}
    for lid, total in counts.items():
        tpt = Launch.from_id(lid).threads_per_token
        share = issue_share(rows * tpt * total, per_token, sms, ghz, gbs)
        out[lid] = {"per_value": total * tpt / v.head_dim, "bytes_per_token": per_token, "share": share,
                    "estimate_pct": min(100.0, 100 * ISSUED_WHEN_BOUND / share)}
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    by_opcode, regs = "--ops" in args, "--regs" in args
    dump = args[args.index("--dump") + 1] if "--dump" in args else None
    arch = args[args.index("--arch") + 1] if "--arch" in args else "sm_90a"
    gpu = None
    if "--bound" in args:
        try:
            gpu = [float(x) for x in args[args.index("--bound") + 1].split(",")]
        except (IndexError, ValueError):
            gpu = []
        if len(gpu) != 3:
            raise SystemExit("--bound takes SMS,GHZ,GBS, e.g. --bound 132,1.98,4180 (H200: SMs, SM clock, copy GB/s)")
    [arch] = tc.parse_arch_list(arch)  # sm_100a, 100a or 100 alike
    valued = ("--dump", "--arch", "--bound")
    spec, variant, *listed = [a for i, a in enumerate(args)
                              if a not in ("--ops", "--regs", *valued) and args[i - 1] not in valued]
    ids = [i for a in listed for i in a.split(",") if i]  # t4.b16.v8 t8.b8.v8 or t4.b16.v8,t8.b8.v8
    for lid in ids:
        try:
            Launch.from_id(lid)
        except ValueError as exc:
            raise SystemExit(f"sass_count: {exc}") from None
    if gpu:
        bound(spec, variant, {}, int(gpu[0]), gpu[1], gpu[2])  # a launch group is refused before anything compiles
    sequences, usage = inspect(spec, variant, ids, arch, dump, regs)  # the SASS and the resource usage of one build
    counters = _counters(sequences, by_opcode)
    limits = bound(spec, variant, {k: sum(c.values()) for k, c in counters.items()}, int(gpu[0]), gpu[1], gpu[2]) \
        if gpu else {}
    for lid, counter in counters.items():
        total = sum(counter.values())
        items = counter.most_common() if by_opcode else sorted(counter.items())
        extra = ""
        if lid in limits:
            b = limits[lid]
            extra = (f"  per value {b['per_value']:.1f}  B/token {b['bytes_per_token']}  issue share at roofline "
                     f"{100 * b['share']:.0f}%  estimate {b['estimate_pct']:.0f}%")
        if lid in usage:
            u = usage[lid]
            extra += (f"  regs {u['reg']}  stack {u['stack']} B  local {u['local']} B  shared {u['shared']} B  "
                      f"warps/SM {u['warps']}")
        print(f"{lid:22} total {total:5}{extra}  " + "  ".join(f"{k} {n}" for k, n in items))
