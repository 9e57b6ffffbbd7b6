"""Tuning jobs on a Ray cluster (the optional extra: pip install kernelgen[ray]).

Ray schedules one task per variant on any node with a free GPU (num_gpus=1 per task, so Ray sets
CUDA_VISIBLE_DEVICES); each task runs the same worker process as a local `kernelgen tune` and
returns its outcome with the identity of the GPU it ran on. The driver merges every result into
one record file per GPU model, through the same locked merge as local tuning."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import TuningError
from . import records
from .gpu import GpuInfo
from .runner import outcome_from_json
from .search import Outcome

log = logging.getLogger("kernelgen.tune")


@dataclass(frozen=True)
class SearchTask:
    """Everything a remote task needs to tune one variant (plain data: it crosses the network)."""

    spec: str
    variant: str
    content_key: str
    candidates: tuple[str, ...]
    default: str
    buckets: tuple[int, ...]
    archs: tuple[str, ...] = ()
    known: dict[str, Any] = field(default_factory=dict)
    promises: tuple[str, ...] = ()  # the variant's (Variant.promises): which launches its record may choose


@dataclass(frozen=True)
class TaskResult:
    task: SearchTask
    gpu: GpuInfo | None
    outcome: Outcome | None
    error: str = ""


Execute = Callable[[SearchTask], dict[str, Any]]  # -> {"gpu": GpuInfo dict, "outcome": outcome json}


def offered(task: SearchTask, capability: str) -> list[str]:
    """The task's candidates this GPU may time: the submitter did not know the GPU (space.ANY_GPU), so a launch
    bound to other GPUs (hw_convert off Blackwell) is dropped here."""
    from ..spec.variant import Launch
    from .space import offered_on

    return [c for c in task.candidates if offered_on(Launch.from_id(c), capability)]


def gpu_execute(task: SearchTask) -> dict[str, Any]:
    """Run on a cluster node: the local worker process on the GPU Ray gave this task."""
    from .gpu import current
    from .runner import Job, outcome_to_json, run_job

    gpu = current()
    if gpu is None:
        raise TuningError(f"{task.variant}: the Ray task got no GPU")
    job = Job(task.spec, task.variant, offered(task, gpu.capability), list(task.buckets), list(task.archs), None,
              task.known)
    return {"gpu": gpu.as_dict(), "outcome": outcome_to_json(run_job(job, None, lambda _: None))}


def run_tasks(tasks: list[SearchTask], execute: Execute, gpus_per_task: float = 1.0,
              address: str | None = None, requeue: int = 1) -> list[TaskResult]:
    """Run every task as a Ray task (starting or joining a cluster as `address` says); a failed task
    is a result with its error, not an exception. A task whose worker process dies mid-task (killed, out of
    memory, a device fault) is queued again up to `requeue` times (Ray's max_retries, which retries lost
    workers, never a task's own exception); after that it is left untuned with a line that says so."""
    try:
        import ray
    except ImportError:
        raise TuningError("Ray is not installed: pip install 'kernelgen[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(num_gpus=gpus_per_task, max_retries=requeue)(execute)
    refs = [remote.remote(t) for t in tasks]
    results = []
    for task, ref in zip(tasks, refs):
        try:
            got = ray.get(ref)
            results.append(TaskResult(task, GpuInfo.from_dict(got["gpu"]), outcome_from_json(got["outcome"])))
        except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError) as exc:
            where = "its node died" if isinstance(exc, ray.exceptions.NodeDiedError) else "its worker process died"
            results.append(TaskResult(task, None, None, dead_worker_line(task, where, requeue)))
        except Exception as exc:  # a task that failed remotely is reported, the others still land
            results.append(TaskResult(task, None, None, str(exc).strip().splitlines()[-1][:300]))
    return results


def dead_worker_line(task: SearchTask, where: str, requeue: int) -> str:
    """The one line for a task whose worker was lost on every try (pure)."""
    tries = f"{requeue + 1} times" if requeue else "once (not queued again)"
    return (f"{where} mid-task, {tries} (killed, out of memory or a device fault: see the Ray worker logs); "
            f"left untuned, the other records are kept: tune it again with --variants {task.variant}")


def write_results(results: list[TaskResult], out_dir: Path, toolchain: dict[str, str],
                  method: dict[str, Any]) -> list[Path]:
    """Merge every successful result into the record file of the GPU it ran on."""
    from ..spec.variant import Launch
    from .search import select_admitted

    paths = []
    for r in results:
        if r.outcome is None or r.gpu is None:
            continue
        default = Launch.from_id(r.task.default)
        record = records.Record(r.task.variant, r.task.content_key, r.outcome.code, r.gpu, r.task.buckets,
                                r.outcome.timings, r.outcome.failures, tuple(r.outcome.choice), toolchain, method)
        try:
            rechoose = lambda rec, d=default, t=r.task: select_admitted(t.promises, rec.timings, rec.buckets, d)  # noqa: E731
            paths.append(records.write(out_dir, record, rechoose))
        except TuningError as exc:  # one result that cannot be written does not stop the others
            log.warning("%s", exc)
    return sorted(set(paths))
