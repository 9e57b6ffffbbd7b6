"""Tuner tier: the Ray path on a local Ray instance (CPU only) with a simulated timer; results from
several tasks merge into one record file."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kernelgen.codegen.launch import resolve
from kernelgen.spec.parse import load_spec
from kernelgen.tune import records
from kernelgen.tune.distributed import SearchTask, run_tasks, write_results
from kernelgen.tune.gpu import GpuInfo
from kernelgen.tune.simulate import replay_execute
from kernelgen.tune.space import candidates, default_space

pytestmark = pytest.mark.pure
ray = pytest.importorskip("ray", reason="the Ray extra is not installed (pip install 'kernelgen[ray]')")

SIM_GPU = GpuInfo("Simulated GPU", "12.0", 84, 32, 1792)


def replay_table(ids: list[str], buckets: tuple[int, ...]) -> dict[str, Any]:
    """Recorded timings in which one configuration wins up to 64 tokens, another above, and one is wrong."""
    def us(lid: str, n: int) -> float:
        if lid == "t16.b4.v4.pf.pdl":
            return 1.0 if n <= 64 else 40.0 * n
        if lid == "t4.b16.v8.pf":
            return 3.0 if n <= 64 else 20.0 * n
        return 50.0 * max(n, 64)
    return {"timings": {lid: {str(n): us(lid, n) for n in buckets} for lid in ids},
            "failures": {"t32.b2.v4": "wrong: simulated mismatch"}}


@pytest.fixture(scope="module")
def local_ray() -> Any:
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_tasks_tune_and_merge_into_one_record_file(local_ray: Any, tmp_path: Path) -> None:
    spec = load_spec("dsv4_indexer")
    tasks = []
    for v in spec.variants[:3]:
        cands, _ = candidates(v, default_space(v))
        ids = [c.id for c in cands]
        known = {"replay": replay_table(ids, (1, 64, 4096)), "gpu": SIM_GPU.as_dict()}
        tasks.append(SearchTask(spec.path, v.name, v.content_key(), tuple(ids), resolve(v).launch.id, (1, 64, 4096),
                                known=known))
    results = run_tasks(tasks, replay_execute, gpus_per_task=0)
    assert all(r.outcome is not None for r in results), [r.error for r in results]
    [path] = write_results(results, tmp_path, {}, {"timing": "simulated"})
    found = records.read_file(path)
    assert found is not None and found[0] == SIM_GPU
    assert set(found[1]) == {t.content_key for t in tasks}
    for record in found[1].values():
        assert record.choice == ((64, "t16.b4.v4.pf.pdl"), (4096, "t4.b16.v8.pf"))
        assert record.failures == {"t32.b2.v4": "wrong: simulated mismatch"}


def test_a_failing_ray_task_is_reported_not_raised(local_ray: Any) -> None:
    def broken(task: SearchTask) -> dict[str, Any]:
        raise RuntimeError("node lost its GPU")
    [result] = run_tasks([SearchTask("s", "v", "k", ("t8.b8.v8",), "t8.b8.v8", (1,))], broken, gpus_per_task=0)
    assert result.outcome is None and "node lost its GPU" in result.error


def test_a_task_whose_worker_dies_is_queued_again_and_then_left_untuned_by_name(local_ray: Any,
                                                                               tmp_path: Path) -> None:
    """Issue 40 item 2 on a local Ray instance: a worker killed mid-task once has its task queued again and tuned;
    one killed on every try is reported by name in one line and left untuned; the other tasks' records are
    written whole."""
    v = load_spec("dsv4_indexer").variants[0]
    ids = [c.id for c in candidates(v, default_space(v))[0]]
    known = {"replay": replay_table(ids, (1, 64, 4096)), "gpu": SIM_GPU.as_dict()}

    def task(name: str, key: str) -> SearchTask:
        return SearchTask(str(tmp_path), name, key, tuple(ids), resolve(v).launch.id, (1, 64, 4096), known=known)

    def dies(task: SearchTask) -> dict[str, Any]:  # defined here: Ray ships it by value (tests/ is no package)
        """The worker's process exits mid-task (as an OOM kill or a device fault ends it): the task marked `once`
        the first time it runs, the one marked `always` on every try; the others replay."""
        import os

        mark = Path(task.spec) / f"{task.variant}.started"
        if task.variant.endswith("always") or (task.variant.endswith("once") and not mark.exists()):
            mark.touch()
            os._exit(9)
        return replay_execute(task)

    tasks = [task("v_fine", "k1"), task("v_once", "k2"), task("v_always", "k3")]
    results = {r.task.variant: r for r in run_tasks(tasks, dies, gpus_per_task=0)}
    assert results["v_fine"].outcome is not None and results["v_once"].outcome is not None
    assert (tmp_path / "v_once.started").exists()  # it did die once
    dead = results["v_always"]
    assert dead.outcome is None and "\n" not in dead.error
    assert dead.error.startswith("its worker process died mid-task, 2 times")
    assert dead.error.endswith("left untuned, the other records are kept: tune it again with --variants v_always")
    [path] = write_results(list(results.values()), tmp_path / "out", {}, {"timing": "simulated"})
    found = records.read_file(path)
    assert found is not None and set(found[1]) == {"k1", "k2"}
