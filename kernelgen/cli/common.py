"""What every command shares: the consoles, the spec and toolchain it is given, and its argument checks.

`out` and `err` are the only consoles the commands print through. The commands read `err` and `_toolchain`
through this module (`common.err`, imported as `import kernelgen.cli.common as common`: `from . import common`
would read as an import of kernelgen.cli, whose __init__ imports every command), so that one stand-in set
here, a test's, reaches them all."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from .. import knobs
from ..build import toolchain as tc
from ..errors import KernelgenError, SpecError
from ..spec.parse import Spec, load_spec, shipped_specs
from ..spec.settings import _did_you_mean

CHECK_TARGETS = "sm_90a,sm_100a,sm_120a"
SPEC_HELP = "a spec file or a shipped spec name, e.g. dsv4_indexer (`kernelgen list` shows the shipped ones)"
SPECS_HELP = "spec files or shipped spec names (default: all shipped)"
out = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 200)


def _specs(paths: list[str]) -> list[Spec]:
    return [load_spec(p) for p in paths] if paths else shipped_specs()


def _kernels_of(specs: list[Spec], names: str | None) -> list[Any]:
    """The kernels (variants and launch groups) --variants names across specs, in the order named (default: every
    kernel of every spec). A name no spec has is refused before any work, with the nearest name of all of them."""
    every = [k for spec in specs for k in spec.kernels]
    if not names:
        return every
    by_name = {k.name: k for k in every}
    out = []
    for name in (n.strip() for n in names.split(",")):
        if not name:
            continue
        if name not in by_name:
            if len(specs) == 1:
                specs[0].kernel(name)  # raises, naming the spec and the nearest name
            where = ", ".join(s.name for s in specs)
            raise SpecError(f"--variants: no variant or launch group named {name!r} in {where}"
                            f"{_did_you_mean(name, list(by_name))}; `kernelgen list SPEC` shows them")
        out.append(by_name[name])
    return out


def _toolchain() -> tc.Toolchain:
    """The detected toolchain, saying which nvcc compiles."""
    toolchain = tc.detect()
    err.print(f"nvcc: {toolchain.describe()}", markup=False)
    return toolchain


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _cache_dir(flag: str | None, write: bool = False) -> Path | None:
    """--cache-dir, else None (the cache the environment names), refused before any work where it cannot be
    a folder (or with `write`, one kernelgen can write in); an error names the flag or the variable."""
    if flag is None:
        knobs.check_cache_dir(write)
        return None
    return knobs.check_folder("--cache-dir", Path(flag), write)


def _parse_ints(text: str | None, what: str) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        values = tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        raise KernelgenError(f"{what} must be comma-separated integers, e.g. 1,32,4096; got {text!r}") from None
    if not values or any(v < 1 or v > (1 << 24) for v in values):
        raise KernelgenError(f"{what} must be between 1 and 16777216, got {text!r}")
    return values


def _selected(args: argparse.Namespace) -> tuple[Spec, list[Any]]:
    """The spec and the kernels --variants names (default: every variant, then every launch group)."""
    spec = load_spec(args.spec)
    return spec, _kernels_of([spec], args.variants)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
