"""The `kernelgen` command: list, render, check, build; errors become one line and exit 1.

The parser and main() are here; each command is in the module of its job (specs, benchcmd, tunecmd,
recordscmd), with what they share in common and progress."""
from __future__ import annotations

import argparse
import sys

from . import common
from .._version import __version__
from ..errors import KernelgenError, storage_error
from .benchcmd import cmd_bench
from .common import CHECK_TARGETS, SPEC_HELP, SPECS_HELP, out
from .specs import cmd_build, cmd_check, cmd_export, cmd_fidelity, cmd_guards, cmd_list, cmd_recall, cmd_render
from .tunecmd import cmd_tune

__all__ = ["main", "out", "parser"]


def parser() -> argparse.ArgumentParser:
    from .. import fidelity, recall

    p = argparse.ArgumentParser(prog="kernelgen", description="fused norm/RoPE/quantize/KV-store CUDA kernels from YAML specs")
    p.add_argument("--version", action="version", version=f"kernelgen {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="the variants specs expand to, with their layouts")
    ls.add_argument("specs", nargs="*", help=SPECS_HELP)
    ls.add_argument("--layouts", action="store_true", help="print each variant's page byte map")
    ls.add_argument("--json", action="store_true", help="machine-readable variants and layouts")
    ls.set_defaults(func=cmd_list)
    rd = sub.add_parser("render", help="print the generated CUDA of one variant")
    rd.add_argument("spec", help=SPEC_HELP)
    rd.add_argument("variant", help="one of the spec's variants (`kernelgen list SPEC` shows them)")
    rd.add_argument("-o", "--output", help="write to a file instead of stdout")
    rd.set_defaults(func=cmd_render)
    ck = sub.add_parser("check", help="guards + device code compiled for each target (nvcc --fatbin; no GPU needed)")
    ck.add_argument("specs", nargs="*", help=SPECS_HELP)
    ck.add_argument("--arch", help=f"targets, comma-separated (default: $KERNELGEN_CUDA_ARCH_LIST or {CHECK_TARGETS})")
    ck.add_argument("--all", action="store_true", help="compile every page size, not one per layout")
    ck.add_argument("--jobs", type=int, help="parallel nvcc jobs")
    ck.set_defaults(func=cmd_check)
    bd = sub.add_parser("build", help="compile every variant of specs into the kernel cache (no GPU with --arch)")
    bd.add_argument("specs", nargs="*", help=SPECS_HELP)
    bd.add_argument("--variants", help="comma-separated variant or launch group names (default: all of the specs)")
    bd.add_argument("--arch", help="targets, comma-separated (default: $KERNELGEN_CUDA_ARCH_LIST or the local GPU)")
    bd.add_argument("--jobs", type=int, help="parallel nvcc jobs")
    bd.add_argument("--cache-dir", help="kernel cache (default: $KERNELGEN_CACHE_DIR or ~/.cache/kernelgen)")
    bd.set_defaults(func=cmd_build)
    bn = sub.add_parser("bench", help="time variants per token count on the GPU (roofline, floor, baselines)")
    bn.add_argument("spec", help=SPEC_HELP)
    bn.add_argument("--variants", help="comma-separated variant names (default: all of the spec)")
    bn.add_argument("--tokens", help="comma-separated token counts (default: 1,32,128,1024,4096,65536,262144,1048576)")
    bn.add_argument("--workload", choices=("prefill", "decode"), default="prefill")
    bn.add_argument("--baselines", default="eager,compile", help="PyTorch reference baselines: eager,compile (or '')")
    bn.add_argument("--json", help="write the results as JSON")
    bn.add_argument("--plot", help="write a PNG plot (needs matplotlib: pip install kernelgen[plot])")
    bn.set_defaults(func=cmd_bench)
    tu = sub.add_parser("tune", help="autotune launch configurations per token-count bucket on the GPU(s)")
    tu.add_argument("spec", nargs="?", help=SPEC_HELP)
    tu.add_argument("--variants", help="comma-separated variant names (default: all of the spec)")
    tu.add_argument("--buckets", help="comma-separated bucket bounds (default: 1,2,4,...,256,1024,...,1048576)")
    tu.add_argument("--budget", type=float, help="seconds; variants not started by then are reported, not tuned")
    tu.add_argument("--gpus", help="GPU indices, e.g. 0,1: one worker per GPU (default: the current GPU)")
    tu.add_argument("--arch", help="targets (default: the local GPU)")
    tu.add_argument("--jobs", type=int, help="parallel nvcc jobs")
    tu.add_argument("--cache-dir", help="kernel cache (default: $KERNELGEN_CACHE_DIR)")
    tu.add_argument("--out", help="record directory (default: the user's tuning cache)")
    tu.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                    help="schedule one task per variant on a Ray cluster (ADDRESS, e.g. auto; none: a local instance); "
                         "needs pip install 'kernelgen[ray]'")
    tu.add_argument("--show", action="store_true", help="list cached and shipped records and whether they apply here")
    tu.add_argument("--rechoose", action="store_true",
                    help="choose the routes of the records in --out (default: the user's) again from their timings")
    tu.add_argument("--verify", action="store_true",
                    help="compile every record's choice (no GPU) and check it is the device code it timed; "
                         "lists stale and missing records (exit 1 if any)")
    tu.set_defaults(func=cmd_tune)
    ex = sub.add_parser("export", help="compile variants for deployment (no nvcc needed to load them)")
    ex.add_argument("spec", help=SPEC_HELP)
    ex.add_argument("--variants", help="comma-separated variant names (default: all of the spec)")
    ex.add_argument("--arch", required=True, help="targets, comma-separated, e.g. sm_90a,sm_100a,sm_120a")
    ex.add_argument("-o", "--output", required=True, help="export directory")
    ex.add_argument("--wheel", metavar="NAME", help="also package the export as a pip-installable wheel NAME (written "
                    "into the export directory; needs only apache-tvm-ffi and torch where it is installed)")
    ex.add_argument("--wheel-version", default=None, help="the wheel's version (default: kernelgen's)")
    ex.add_argument("--jobs", type=int, help="parallel nvcc jobs")
    ex.set_defaults(func=cmd_export)
    rc = sub.add_parser("recall", help="index-key recall of fp8/fp4/bf16 stores vs fp32 (CPU)",
                        description=recall.__doc__)
    recall.add_arguments(rc).set_defaults(func=cmd_recall)
    fd = sub.add_parser("fidelity", help="attention error of K/V stores (bf16, fp8, int8, fp4) vs fp32 (CPU)",
                        description=fidelity.__doc__)
    fidelity.add_arguments(fd).set_defaults(func=cmd_fidelity)
    gd = sub.add_parser("guards", help="the guard table")
    gd.set_defaults(func=cmd_guards)
    p.set_defaults(commands=tuple(sub.choices))
    return p


def _not_a_command(argv: list[str], commands: tuple[str, ...]) -> str | None:
    """The one line for a first word that names no command (with the nearest command), else None."""
    import difflib

    word = next((a for a in argv if not a.startswith("-")), None)
    if word is None or word in commands:
        return None
    near = difflib.get_close_matches(word[:100], commands, n=1)
    hint = f" (did you mean {near[0]}?)" if near else ""
    return f"'{word}' is not a kernelgen command{hint}; commands: {', '.join(commands)}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = parser()
    unknown = _not_a_command(argv, p.get_default("commands"))
    if unknown is not None:
        common.err.print(f"error: {unknown}", markup=False, soft_wrap=True)
        return 2  # argparse's status for a usage error
    args = p.parse_args(argv)
    args.command_line = " ".join(["kernelgen", *argv])  # what recall's table says generated it
    try:
        return int(args.func(args))
    except OSError as exc:  # an unwritable -o or cache dir, a full disk: say which file and why
        common.err.print(f"error: {storage_error(exc, exc.filename or '(a file kernelgen could not name)')}",
                         markup=False)
        return 1
    except KernelgenError as exc:
        lines = str(exc).splitlines() or [type(exc).__name__]
        common.err.print(f"error: {lines[0]}", markup=False, soft_wrap=True)
        for line in lines[1:]:
            common.err.print(f"  {line}", markup=False)
        return 1
    except KeyboardInterrupt:
        return 130
