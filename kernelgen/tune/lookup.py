"""Which launch dispatch a variant gets: the first usable tuning record for one of the given GPU models
(the user's records, then the shipped ones) whose chosen kernels still build to the device code it timed,
else the variant's default launch. One rule, the same for the JIT path (kernelgen.load: the local GPU) and
for export (the GPU models recorded for an arch): `build_tuned` builds with the record's dispatch, compares
the library's device code with the record's, and where they differ says so in one line and builds the
default launch instead (never a stale choice)."""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from .. import knobs
from ..build.lifecycle import Progress, build
from ..build.store import Artifact
from ..build.toolchain import Toolchain
from ..codegen.launch import LaunchPlan, default_plan, plan_routes, resolve
from ..spec.group import Group
from ..spec.variant import Variant
from . import records
from .gpu import GpuInfo
from .search import select_for
from .space import admits

log = logging.getLogger("kernelgen")


@dataclass(frozen=True)
class Tuned:
    plan: LaunchPlan
    source: str  # the record file the dispatch came from, or "defaults"
    gpu: GpuInfo | None  # the GPU model the record was tuned on (None: defaults)
    record: records.Record | None = None


def for_kernel(v: Variant | Group, record: records.Record) -> records.Record:
    """The record as it applies to v: where its choice runs a launch v does not admit (a promise v's spec did not
    make, e.g. early_reads chosen while another spec of the same content key was tuned), chosen again from its
    timings among the launches v admits; nothing is re-timed, and the device code of those was keyed too."""
    if all(admits(v.promises, launch) for _, launch in record.routes()):
        return record
    return replace(record, choice=tuple(select_for(v, record.timings, record.buckets)))


def plan_from_record(v: Variant | Group, record: records.Record) -> LaunchPlan:
    """The dispatch of a record as it applies to v (for_kernel), without PDL where KERNELGEN_PDL=0 (for the JIT
    path and for export)."""
    routes = record.routes()
    if not knobs.pdl_allowed():
        routes = [(bound, replace(launch, pdl=False)) for bound, launch in routes]
    return plan_routes(v, routes)


_said_default: set[str] = set()  # variants whose default launch was already reported (once per process)


def tuned(v: Variant | Group, gpus: Sequence[GpuInfo], directories: Sequence[Path] | None = None) -> Tuned:
    """The dispatch for v from the first usable record for one of `gpus` (each in order through
    `directories`, default: the user's tuning directory, then the shipped records), else the defaults.
    A record applies where `gpu.matches` its file's GPU and the template is this one; an invalid record
    is reported once, naming its file and entry, and passed over (records.find)."""
    if knobs.use_tuned():
        where = list(directories) if directories is not None else records.search_dirs()
        for gpu in gpus:
            found = records.lookup(where, gpu, v)
            if found is not None:
                record, path = for_kernel(v, found[0]), found[1]
                return Tuned(plan_from_record(v, record), str(path), record.gpu, record)
    if v.name not in _said_default:
        _said_default.add(v.name)
        on = " or ".join(f"{g.name} (sm_{g.capability.replace('.', '')})" for g in gpus)
        log.debug("%s: no tuning record %s; using the default launch %s (tune with `kernelgen tune %s`)",
                  v.name, f"for {on}" if on else "(no GPU)", resolve(v).launch.id, v.spec_name or "SPEC")
    return Tuned(default_plan(v), "defaults", None)


def stale_line(v: Variant | Group, found: Tuned, artifact: Artifact) -> str | None:
    """Why found's record does not hold for the library it was built into (None: it holds): the chosen
    instances whose device code on the record's arch is not the code the record timed."""
    if found.record is None or found.gpu is None:
        return None
    arch = records.arch_of(found.gpu)
    stale = found.record.stale(artifact.device_code().get(arch, {}))
    if not stale:
        return None
    return (f"{v.name}: the tuning record in {found.source} timed other device code than this kernelgen builds "
            f"for {', '.join(stale)} on {arch} (a kernel or its launch changed); using the default launch "
            f"({default_plan(v).describe()}); re-tune with `kernelgen tune {v.spec_name or 'SPEC'}`")


def build_tuned(variants: Sequence[Variant | Group], gpus: Sequence[GpuInfo], toolchain: Toolchain,
                archs: tuple[str, ...], cache_dir: Path | None = None, jobs: int | None = None,
                progress: Progress | None = None, portable: bool = False,
                directories: Sequence[Path] | None = None) -> list[tuple[Artifact, Tuned]]:
    """Build (or find) each variant or group with its tuned dispatch for the first of `gpus` that has a usable
    record (one ninja graph), checked against the device code the record timed; where that changed, a
    warning line, and the default launch built in a second graph. `directories`: where records are looked up
    (default: the user's tuning directory, then the shipped records)."""
    found = [tuned(v, gpus, directories) for v in variants]
    built = build(list(variants), toolchain, archs, cache_dir, jobs, [f.plan for f in found], progress, portable)
    stale = []
    for i, (v, f, artifact) in enumerate(zip(variants, found, built)):
        why = stale_line(v, f, artifact)
        if why is not None:
            log.warning("%s", why)
            found[i] = Tuned(default_plan(v), "defaults (record stale)", None)
            stale.append(i)
    if stale:
        again = build([variants[i] for i in stale], toolchain, archs, cache_dir, jobs,
                      [found[i].plan for i in stale], progress, portable)
        for i, artifact in zip(stale, again):
            built[i] = artifact
    return list(zip(built, found))


def record_gpus(capability: str | None, directories: Sequence[Path] | None = None) -> list[GpuInfo]:
    """The GPU models with a readable record file for this compute capability (e.g. '9.0'; None: any), each once,
    in lookup order: what an export for that arch passes to `tuned`, and what the release check verifies."""
    out: list[GpuInfo] = []
    for directory in directories if directories is not None else records.search_dirs():
        for path in records.record_files(directory):
            found = records.read(path)
            gpu = found.gpu if found is not None else None
            if gpu is not None and capability in (None, gpu.capability) and not any(g.matches(gpu) for g in out):
                out.append(gpu)
    return out
