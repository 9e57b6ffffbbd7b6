"""The thin layer of tuning that touches the compiler, processes and the GPU.

The parent compiles every variant's candidates in one parallel build (the same lifecycle and lock
as `kernelgen build`), then runs one worker process per variant on each GPU it was given. A worker
verifies each candidate against the reference before timing it, and streams every measurement
back as a JSON line, so a crash (an illegal address poisons the CUDA context) costs only the
candidate in flight: the parent records it as crashed and restarts the worker with the rest."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from ..build import toolchain as tc
from ..build.lifecycle import Planned, Progress, artifact_for, build
from ..build.lifecycle import plan as plan_builds
from ..build.store import Artifact, is_published, kernels_dir, published_problem
from ..codegen.launch import ALL_TOKENS, LaunchPlan, launch_variant, plan_routes, resolve
from ..errors import BuildError, TuningError
from ..spec.group import Group
from ..spec.variant import Launch, Variant
from ..measure.timing import workload_peak_bytes
from .gpu import GpuInfo
from .search import Failed, Outcome
from .space import instances

MAX_RESTARTS = 8
STEPS_PER_LIBRARY = 2  # ninja compiles a variant's source (every arch in one nvcc), then links its .so


def require_gpu(command: str = "tune", spec: str | None = None) -> GpuInfo:
    """The local GPU, or the one-line TuningError that says what works without one. Asked before any work:
    --arch cannot stand in for a GPU here, so the error points at the commands that need none."""
    from . import gpu

    found = gpu.current()
    if found is not None:
        return found
    name = spec or "SPEC"
    raise TuningError(f"kernelgen {command} needs a CUDA GPU to time kernels and none is visible here "
                      f"(torch.cuda.is_available() is False); without one, `kernelgen check {name} --arch sm_90a` "
                      f"compiles the kernels (`kernelgen build {name} --arch sm_90a` caches them); run {command} "
                      "where the GPU is")


def unbuilt(variants: list[Variant], toolchain: tc.Toolchain, archs: tuple[str, ...], cache_dir: Path | None,
            launch_plans: list[LaunchPlan | None] | None = None, portable: bool = False) -> list[Planned]:
    """The builds lifecycle.build of the same arguments will compile (those not in the cache, each once),
    asked before it runs so that progress can show its total from the start; each is STEPS_PER_LIBRARY
    ninja steps. Quiet: build itself reports a corrupt artifact when it rebuilds it."""
    root = kernels_dir(cache_dir)
    planned = plan_builds(variants, toolchain, archs, launch_plans, portable, cache_dir)
    distinct = {artifact_for(p, root).directory: p for p in planned}
    return [p for p in distinct.values() if published_problem(artifact_for(p, root)) is not None]


def tuning_plan(v: Variant, candidates: list[Launch]) -> LaunchPlan:
    """Every candidate instance compiled into one library; the default serves the plain entry point."""
    return plan_routes(v, [(ALL_TOKENS, resolve(v).launch)], tuple(candidates))


def compile_candidates(variants: list[Variant], candidates: list[list[Launch]], archs: tuple[str, ...],
                       cache_dir: Path | None, jobs: int | None, progress: Progress | None = None
                       ) -> tuple[list[list[Launch]], dict[str, dict[str, str]]]:
    """Build every variant's tuning library in one ninja graph. Where a library fails, each instance is
    built alone to find the ones that do not compile; those become failures and the rest are rebuilt.
    Every ninja run reports its steps to `progress`. Returns (compiled candidates per variant, failures
    per variant name: launch id -> message)."""
    toolchain = tc.detect()
    plans = [tuning_plan(v, c) for v, c in zip(variants, candidates)]
    failures: dict[str, dict[str, str]] = {v.name: {} for v in variants}
    try:
        build(variants, toolchain, archs, cache_dir, jobs, launch_plans=plans, progress=progress)
        return candidates, failures
    except BuildError:
        pass
    kept: list[list[Launch]] = []
    for v, cands in zip(variants, candidates):
        singles = [plan_routes(v, [(ALL_TOKENS, inst)]) for inst in instances(cands)]
        try:
            build([v] * len(singles), toolchain, archs, cache_dir, jobs, launch_plans=singles, progress=progress)
        except BuildError:
            pass
        planned = plan_builds([v] * len(singles), toolchain, archs, singles, cache_dir=cache_dir)
        bad = {p.launch_plan.configs[0] for p in planned if not is_published(artifact_for(p, kernels_dir(cache_dir)))}
        for c in cands:
            if c.instance in bad:
                failures[v.name][c.id] = "compile: nvcc failed for this configuration"
        kept.append([c for c in cands if c.instance not in bad])
    live = [(v, c) for v, c in zip(variants, kept) if c]
    if live:
        build([v for v, _ in live], toolchain, archs, cache_dir, jobs,
              launch_plans=[tuning_plan(v, c) for v, c in live], progress=progress)
    return kept, failures


@dataclass
class Job:
    spec: str
    variant: str
    candidates: list[str]
    buckets: list[int]
    archs: list[str]
    cache_dir: str | None
    known: dict[str, Any] = field(default_factory=dict)  # {"timings": ..., "failures": ...}

    def to_json(self) -> str:
        return json.dumps(self.__dict__)


def outcome_to_json(o: Outcome) -> dict[str, Any]:
    return {"timings": {k: {str(b): us for b, us in t.items()} for k, t in o.timings.items()},
            "failures": o.failures, "choice": o.choice, "code": o.code}


def outcome_from_json(d: dict[str, Any]) -> Outcome:
    return Outcome({k: {int(b): float(us) for b, us in t.items()} for k, t in d.get("timings", {}).items()},
                   dict(d.get("failures", {})), [tuple(x) for x in d.get("choice", [])],  # type: ignore[misc]
                   {str(i): str(k) for i, k in d.get("code", {}).items()})


def run_job(job: Job, gpu: str | None, on_event: Callable[[dict[str, Any]], None]) -> Outcome:
    """Run a job in worker processes until it finishes; each crash marks the candidate in flight as crashed."""
    known = outcome_from_json(job.known)
    for _ in range(MAX_RESTARTS):
        with tempfile.TemporaryDirectory(prefix="kernelgen-tune-") as tmp:
            job_file = Path(tmp) / "job.json"
            job_file.write_text(replace(job, known=outcome_to_json(known)).to_json())
            env = dict(os.environ)
            if gpu is not None:
                env["CUDA_VISIBLE_DEVICES"] = gpu
            proc = subprocess.Popen([sys.executable, "-m", "kernelgen.tune.worker", str(job_file)], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            in_flight: str | None = None
            final: Outcome | None = None
            assert proc.stdout is not None
            for line in proc.stdout:
                if not line.startswith("{"):
                    continue
                event = json.loads(line)
                on_event(event)
                kind = event["event"]
                if kind == "start":
                    in_flight = event["id"]
                elif kind == "time":
                    known.timings.setdefault(event["id"], {})[int(event["n"])] = float(event["us"])
                    in_flight = None
                elif kind == "fail":
                    known.failures[event["id"]] = event["message"]
                    in_flight = None
                elif kind == "done":
                    final = outcome_from_json(event["outcome"])
            stderr = proc.stderr.read() if proc.stderr else ""
            code = proc.wait()
        if final is not None and code == 0:
            return final
        if in_flight is None:
            tail = stderr.strip().splitlines()[-1:] or [f"exit status {code}"]
            raise TuningError(f"tuning worker for {job.variant} failed outside a measurement: {tail[0]}")
        known.failures[in_flight] = f"crash: worker exited with status {code}: " + \
            (stderr.strip().splitlines() or [""])[-1][:200]
        known.timings.pop(in_flight, None)
    raise TuningError(f"tuning {job.variant}: the worker crashed {MAX_RESTARTS} times; see the failures recorded")


def built_artifact(v: Variant, candidates: list[Launch], archs: tuple[str, ...], cache_dir: Path | None) -> Artifact:
    [artifact] = build([v], tc.detect(), archs, cache_dir, launch_plans=[tuning_plan(v, candidates)])
    return artifact


__all__ = ["Failed", "Job", "compile_candidates", "run_job", "tuning_plan", "built_artifact"]


@dataclass
class VariantResult:
    variant: Variant
    outcome: Outcome | None
    record_path: Path | None
    error: str = ""
    record: Any = None  # records.Record as written (merged with what its file held), where one was


MEMORY_SHARE = 0.85  # of the GPU's memory, what one bucket's timing inputs may take (the rest: CUDA, the module)


def fitting_buckets(v: Variant | Group, buckets: tuple[int, ...], memory_gb: int) -> tuple[int, ...]:
    """The buckets whose timing inputs fit the GPU (measure.timing.workload_peak_bytes); the larger ones are not timed,
    and the record's last route serves them. An absorbed-MLA query of 128 heads x 576 dims needs about 45 GiB at 65536
    tokens and 180 GiB at 262144: tuned past what fits, every candidate's worker ran out of memory at the largest
    bucket and the variant went untuned."""
    if memory_gb <= 0:  # not known (a simulated GPU): every bucket
        return buckets
    limit = MEMORY_SHARE * memory_gb * 2**30
    return tuple(b for b in buckets if workload_peak_bytes(v, b) <= limit)


def tune(variants: list[Variant], spec_path: str, space_overrides: dict[str, tuple[object, ...]],
         buckets: tuple[int, ...], gpus: list[str | None], archs: tuple[str, ...], cache_dir: Path | None,
         out_dir: Path, jobs: int | None, budget_s: float | None,
         on_event: Callable[[str, dict[str, Any]], None], progress: Progress | None = None) -> list[VariantResult]:
    """Tune variants (compile all candidates, then one worker per variant per GPU) and write records.
    The GPU is asked for first: without one the compile would be wasted. The "compile" event says how
    many variants and ninja steps the compile runs (before it starts), and `progress` gets its steps."""
    import concurrent.futures
    import time

    from . import records
    from .search import select_for
    from .space import candidates as space_candidates
    from .space import default_space, group_candidates, group_space

    gpu = require_gpu()
    start = time.monotonic()
    toolchain = tc.detect()
    cands = [group_candidates(v, group_space(v, space_overrides, gpu.capability))[0]
             if isinstance(v, Group) else space_candidates(v, default_space(v, space_overrides, gpu.capability))[0]
             for v in variants]
    plans: list[LaunchPlan | None] = [tuning_plan(v, c) for v, c in zip(variants, cands)]
    todo = unbuilt(variants, toolchain, archs, cache_dir, plans)
    on_event("", {"event": "compile", "variants": len(variants), "instances": sum(len(instances(c)) for c in cands),
                  "to_compile": len({p.variant.name for p in todo}), "steps": STEPS_PER_LIBRARY * len(todo)})
    compiled, compile_failures = compile_candidates(variants, cands, archs, cache_dir, jobs, progress)
    on_event("", {"event": "compiled", "seconds": time.monotonic() - start})
    import torch

    from .._version import __version__

    meta_toolchain = {"nvcc": toolchain.nvcc_version, "tvm_ffi": toolchain.tvm_ffi_version, "kernelgen": __version__,
                      "torch": torch.__version__, "cuda_runtime": str(torch.version.cuda)}
    method = {"timing": "CUDA-graph replay, >=20 calls per graph, median of 15 replays; top 3 per bucket re-timed "
                        "interleaved (median of 3)", "l2": "inputs rotated over >=3x L2 from 4096 tokens",
              "workload": "decode (random positions, scattered slots) up to 256 tokens, prefill above",
              "verify": "every configuration checked against the reference before timing", "tie": "2%"}
    results: list[VariantResult] = []
    pending = list(zip(variants, compiled))
    free = list(gpus)

    def one(v: Variant, cs: list[Launch], gpu_id: str | None) -> VariantResult:
        if not cs:
            return VariantResult(v, None, None, "no candidate compiled")
        timed = fitting_buckets(v, buckets, gpu.memory_gb)
        skipped = [b for b in buckets if b not in timed]
        if skipped:
            on_event(v.name, {"event": "skipped", "buckets": skipped, "gpu_gb": gpu.memory_gb,
                              "need_gb": round(workload_peak_bytes(v, skipped[0]) / 2**30, 1)})
        if not timed:
            return VariantResult(v, None, None, f"not one bucket's inputs fit the GPU's {gpu.memory_gb} GiB")
        failures = compile_failures[v.name]
        job = Job(spec_path, v.name, [c.id for c in cs], list(timed), list(archs),
                  str(cache_dir) if cache_dir else None, {"failures": failures})
        try:
            outcome = run_job(job, gpu_id, lambda e: on_event(v.name, e))
        except TuningError as exc:
            return VariantResult(v, None, None, str(exc))
        outcome.failures.update(failures)
        record = records.Record(v.name, v.content_key(), outcome.code, gpu, timed, outcome.timings,
                                outcome.failures, tuple(outcome.choice), meta_toolchain, method)
        try:
            path, written = records.write_merged(out_dir, record, lambda r: select_for(v, r.timings, r.buckets))
        except TuningError as exc:  # e.g. every candidate failed: nothing to route to
            return VariantResult(v, outcome, None, str(exc))
        return VariantResult(v, outcome, path, record=written)

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(gpus)) as pool:
        running: dict[Any, str | None] = {}
        while pending or running:
            while pending and free:
                if budget_s is not None and time.monotonic() - start > budget_s:
                    results += [VariantResult(v, None, None, "budget spent before it started") for v, _ in pending]
                    pending = []
                    break
                v, cs = pending.pop(0)
                gpu_id = free.pop(0)
                running[pool.submit(one, v, cs, gpu_id)] = gpu_id
            if not running:
                break
            done, _ = concurrent.futures.wait(list(running), return_when=concurrent.futures.FIRST_COMPLETED)
            for fut in done:
                free.append(running.pop(fut))
                try:
                    results.append(fut.result())
                except TuningError as exc:
                    results.append(VariantResult(Variant(name="?"), None, None, str(exc)))
    order = {v.name: i for i, v in enumerate(variants)}
    return sorted(results, key=lambda r: order.get(r.variant.name, 1 << 30))
