"""Whether the tuning records still describe the kernels this kernelgen builds: the release check.

For each kernel and each GPU model with a record file, the record a load would use (tune/lookup.py's rule)
is compiled (device code only: no GPU, no cache) for that GPU's arch, and each chosen instance's device-code
key is compared with the key the record timed. A kernel without a record for that GPU model is reported as
missing. `kernelgen tune --verify` prints the verdicts; a CPU machine with nvcc runs it."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence

from ..build.lifecycle import Progress, device_code
from ..build.toolchain import Toolchain
from ..spec.group import Group
from ..spec.variant import Variant
from . import lookup, records

Status = Literal["holds", "stale", "missing"]


@dataclass(frozen=True)
class Verdict:
    kernel: str
    gpu: str  # the record file's GPU model (slug)
    status: Status
    detail: str  # the stale instances, the record file, or what is missing


def verify(kernels: Sequence[Variant | Group], toolchain: Toolchain, directories: Sequence[Path] | None = None,
           jobs: int | None = None, progress: Progress | None = None) -> list[Verdict]:
    """A verdict per (kernel, GPU model with records), in that order."""
    where = list(directories) if directories is not None else records.search_dirs()
    verdicts: list[Verdict] = []
    for gpu in lookup.record_gpus(None, where):
        arch = records.arch_of(gpu)
        found = [lookup.tuned(k, [gpu], where) for k in kernels]
        held = [(k, f) for k, f in zip(kernels, found) if f.record is not None]
        codes = device_code([(k, f.plan) for k, f in held], toolchain, (arch,), jobs, progress=progress)
        by_name = {k.name: (f, code[arch]) for (k, f), code in zip(held, codes)}
        for k in kernels:
            if k.name not in by_name:
                verdicts.append(Verdict(k.name, gpu.slug, "missing", f"no record for {gpu.name} (tune it there)"))
                continue
            f, code = by_name[k.name]
            assert f.record is not None
            stale = f.record.stale(code)
            verdicts.append(Verdict(k.name, gpu.slug, "stale" if stale else "holds",
                                    f"{f.source}: {', '.join(stale)} changed on {arch} (re-tune)" if stale
                                    else f.source))
    return verdicts
