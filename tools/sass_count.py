"""Count the SASS instructions of a variant's kernel per launch configuration (straight-line code per
token, so the static count is the per-token count a thread executes; a looping `.lp` configuration
also holds its first token's loads outside the loop), by opcode family.

    python tools/sass_count.py dsv4_indexer dsv4_indexer_fp4_p64 t4.b16.v8.pf [t16.b4.v4.pf ...] [--ops] [--dump FILE]
        [--arch sm_100a]   (a .pk id: the packed float32 build)

--ops also lists the opcodes by count; --dump writes the whole SASS to FILE.

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
from kernelgen.codegen.launch import ALL_TOKENS, plan_routes
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


def kernels(source: Path, include: Path, arch: str, cuobjdump: str, dump: str | None = None) -> dict[str, str]:
    """SASS of every kernel in the compiled source, by function name (dump: also write the whole SASS there)."""
    toolchain = tc.detect()
    obj = source.with_suffix(".o")
    includes = [f"-I{d}" for d in (str(include), *toolchain.include_dirs)]
    done = subprocess.run([toolchain.nvcc, *CUDA_FLAGS, *includes, *gencode_flags((arch,)), "-c",
                           str(source), "-o", str(obj)], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"nvcc failed on {source}:\n{done.stderr[-4000:]}")
    # cuobjdump runs nvdisasm: look beside it first (NVIDIA's wheels install both into one bin folder)
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(cuobjdump).parent), os.environ.get("PATH", "")]))
    sass = subprocess.run([cuobjdump, "-sass", str(obj)], check=True, capture_output=True, text=True, env=env).stdout
    if dump:
        Path(dump).write_text(sass)
    blocks = re.split(r"\n\s+Function : ", sass)[1:]
    return {b.splitlines()[0].strip(): "\n".join(b.splitlines()[1:]) for b in blocks}


def sequence(spec: str, variant: str, ids: list[str], dump: str | None = None,
             arch: str = "sm_90a") -> dict[str, list[str]]:
    """Each launch's kernel as its opcodes in program order (every launch compiled in one nvcc run)."""
    v = load_spec(spec).variant(variant)
    launches = [Launch.from_id(i) for i in ids]
    plan = plan_routes(v, [(ALL_TOKENS, launches[0])], tuple(launches))
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.cu"
        src.write_text(render_variant(v, plan=plan))
        by_name = kernels(src, include_dir(), arch, knobs.cuobjdump() or "cuobjdump", dump)
    out: dict[str, list[str]] = {}
    for name, body in by_name.items():
        m = re.search(r"_cfg(\d+)", name)
        if m:
            out[plan.configs[int(m.group(1))].id] = re.findall(
                r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", body)
    return out


def count(spec: str, variant: str, ids: list[str], by_opcode: bool = False,
          dump: str | None = None, arch: str = "sm_90a") -> dict[str, collections.Counter[str]]:
    return {lid: collections.Counter(op if by_opcode else family(op) for op in ops if op not in ("NOP", "BRA", "EXIT"))
            for lid, ops in sequence(spec, variant, ids, dump, arch).items()}


if __name__ == "__main__":
    args = sys.argv[1:]
    by_opcode = "--ops" in args
    dump = args[args.index("--dump") + 1] if "--dump" in args else None
    arch = args[args.index("--arch") + 1] if "--arch" in args else "sm_90a"
    [arch] = tc.parse_arch_list(arch)  # sm_100a, 100a or 100 alike
    spec, variant, *ids = [a for i, a in enumerate(args)
                           if a not in ("--ops", "--dump", "--arch") and args[i - 1] not in ("--dump", "--arch")]
    for lid, counter in count(spec, variant, ids, by_opcode, dump, arch).items():
        total = sum(counter.values())
        items = counter.most_common() if by_opcode else sorted(counter.items())
        print(f"{lid:22} total {total:5}  " + "  ".join(f"{k} {n}" for k, n in items))
