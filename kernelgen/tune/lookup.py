"""Which launch dispatch a variant gets: the first usable tuning record for one of the given GPU models
(the user's records, then the shipped ones), else the variant's default launch. One rule, the same for
the JIT path (kernelgen.load: the local GPU) and for export (the GPU models recorded for an arch)."""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from .. import knobs
from ..codegen.launch import LaunchPlan, default_plan, plan_routes, resolve
from ..spec.variant import Variant
from . import records
from .gpu import GpuInfo

log = logging.getLogger("kernelgen")


@dataclass(frozen=True)
class Tuned:
    plan: LaunchPlan
    source: str  # the record file the dispatch came from, or "defaults"
    gpu: GpuInfo | None  # the GPU model the record was tuned on (None: defaults)


def plan_from_record(v: Variant, record: records.Record) -> LaunchPlan:
    """The record's dispatch for v, without PDL where KERNELGEN_PDL=0 (for the JIT path and for export)."""
    routes = record.routes()
    if not knobs.pdl_allowed():
        routes = [(bound, replace(launch, pdl=False)) for bound, launch in routes]
    return plan_routes(v, routes)


_said_default: set[str] = set()  # variants whose default launch was already reported (once per process)


def tuned(v: Variant, gpus: Sequence[GpuInfo], directories: Sequence[Path] | None = None) -> Tuned:
    """The dispatch for v from the first usable record for one of `gpus` (each in order through
    `directories`, default: the user's tuning directory, then the shipped records), else the defaults.
    A record applies where `gpu.matches` its file's GPU and the template is this one; an invalid record
    is reported once, naming its file and entry, and passed over (records.find)."""
    if knobs.use_tuned():
        where = list(directories) if directories is not None else records.search_dirs()
        for gpu in gpus:
            found = records.lookup(where, gpu, v)
            if found is not None:
                record, path = found
                return Tuned(plan_from_record(v, record), str(path), record.gpu)
    if v.name not in _said_default:
        _said_default.add(v.name)
        on = " or ".join(f"{g.name} (sm_{g.capability.replace('.', '')})" for g in gpus)
        log.debug("%s: no tuning record %s; using the default launch %s (tune with `kernelgen tune %s`)",
                  v.name, f"for {on}" if on else "(no GPU)", resolve(v).launch.id, v.spec_name or "SPEC")
    return Tuned(default_plan(v), "defaults", None)


def record_gpus(capability: str, directories: Sequence[Path] | None = None) -> list[GpuInfo]:
    """The GPU models with a readable record file for this compute capability (e.g. '9.0'), in lookup
    order: what an export for that arch passes to `tuned`."""
    out: list[GpuInfo] = []
    for directory in directories if directories is not None else records.search_dirs():
        for path in records.record_files(directory):
            found = records.read(path)
            gpu = found.gpu if found is not None else None
            if gpu is not None and gpu.capability == capability and not any(g.matches(gpu) for g in out):
                out.append(gpu)
    return out
