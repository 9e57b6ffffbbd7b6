"""One tuning worker process: verify and time one variant's candidates on the visible GPU.

Run as `python -m kernelgen.tune.worker JOB.json`; prints one JSON line per event (start, time,
fail, done). The parent (runner.run_job) restarts it after a crash with what it already knows."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ..build import toolchain as tc
from ..build.lifecycle import load_module
from ..build.store import Artifact
from ..codegen.render import group_args
from ..measure.inputs import group_workload_inputs
from ..measure.timing import estimated_bytes, rotated_graph_us, rotation_sets
from ..measure.verify import verify_group
from ..spec.group import Group
from ..spec.parse import load_spec
from ..spec.variant import Launch, Variant
from . import gpu, records
from .runner import Job, built_artifact, outcome_from_json, outcome_to_json
from .search import Failed, search

DECODE_UP_TO = 256  # token counts up to this are timed as decode steps, larger as prefill
VERIFY_TOKENS = (1, 300)


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


class ConfigCaller:
    """Calls one compiled configuration of a tuning library by index (no checks: inputs are ours), with the symbol's
    tensors in its order (render.group_args: a variant's are the family's, a launch group's q, k_cache, ...; a
    variant is a launch group of one member)."""

    def __init__(self, artifact: Artifact) -> None:
        self.plan = artifact.launch_plan
        self.function = load_module(artifact.library)[f"{artifact.variant.name}_config"]
        self.args = group_args(artifact.variant)

    def tensors(self, inputs: dict[str, Any]) -> tuple[Any, ...]:
        """The symbol's tensors from inputs by name (group_inputs' packed qkv is not one of them)."""
        return tuple(inputs.get(a) for a in self.args)

    def launch_config(self, config: int, pdl: bool, tensors: tuple[Any, ...], eps: float) -> None:
        self.function(*tensors, float(eps), int(config), bool(pdl))


class GpuTimer:
    """Times one compiled configuration at a token count: graph replay, inputs rotated past the L2
    from 4096 tokens on; verifies each configuration against the reference before its first timing. One path for
    a variant and a launch group (a variant is a launch group of one member)."""

    def __init__(self, v: Variant | Group, op: ConfigCaller, reps: int = 15) -> None:
        import torch

        self.v, self.op, self.reps = v, op, reps
        self.verified: dict[tuple[Launch, bool], str | None] = {}
        self.inputs: tuple[int, list[dict[str, Any]]] | None = None
        self.l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size

    def _index(self, launch: Launch) -> int:
        return self.op.plan.configs.index(launch.instance)

    def _verify(self, launch: Launch) -> None:
        key = (launch.instance, launch.pdl)
        if key not in self.verified:
            idx = self._index(launch)
            # The instance's code at VERIFY_TOKENS once (without PDL where that was verified; an early_reads
            # instance runs only with PDL, so its PDL launch is its check), and a PDL launch at 37 tokens too.
            plain = (launch.instance, False)
            problem = self.verified.get(plain) if launch.pdl else None
            tokens = ((() if launch.pdl and plain in self.verified else VERIFY_TOKENS)
                      + ((37,) if launch.pdl else ()))
            for i, n in enumerate(tokens if problem is None else ()):
                bad = [r for r in self._reports(idx, launch, n, seed=100 + i) if not r.ok]
                if bad:
                    problem = f"wrong at N={n}: {bad[0].as_dict()}"
                    break
            self.verified[key] = problem
        if self.verified[key]:
            raise Failed("wrong", self.verified[key])

    def _reports(self, idx: int, launch: Launch, n: int, seed: int) -> list[Any]:
        """Configuration idx against the reference at n tokens: one report per member."""
        def run(eps: float, **tensors: Any) -> None:
            self.op.launch_config(idx, launch.pdl, self.op.tensors(tensors), eps)
        return verify_group(self.v.with_launch(launch.instance), run, n, 4, "cuda", seed=seed)

    def _sets(self, n: int) -> list[dict[str, Any]]:
        if self.inputs is None or self.inputs[0] != n:
            self.inputs = None
            import torch

            torch.cuda.empty_cache()
            workload = "decode" if n <= DECODE_UP_TO else "prefill"
            count = rotation_sets(estimated_bytes(self.v, n), n, self.l2)
            self.inputs = (n, [group_workload_inputs(self.v, n, workload, seed=s) for s in range(count)])
        return self.inputs[1]

    def __call__(self, launch: Launch, n: int) -> float:
        emit({"event": "start", "id": launch.id, "n": n})
        self._verify(launch)
        idx = self._index(launch)
        calls = [lambda a=self.op.tensors(s): self.op.launch_config(idx, launch.pdl, a, 1e-6)
                 for s in self._sets(n)]
        try:
            us = rotated_graph_us(calls, self.reps)
        except Exception as exc:  # a launch error poisons the context: report it and let the parent restart us
            emit({"event": "fail", "id": launch.id, "kind": "launch", "message": f"launch: {exc}"})
            sys.exit(3)
        emit({"event": "time", "id": launch.id, "n": n, "us": us})
        return us


def timed_code(artifact: Artifact) -> dict[str, str]:
    """The device code this process times: the key of each instance of the library on this GPU's arch."""
    found = gpu.current()
    return artifact.device_code().get(records.arch_of(found), {}) if found is not None else {}


def main(job_file: str) -> int:
    job = Job(**json.loads(Path(job_file).read_text()))
    v = load_spec(job.spec).kernel(job.variant)
    candidates = [Launch.from_id(c) for c in job.candidates]
    known = outcome_from_json(job.known)
    live = [c for c in candidates if c.id not in known.failures]
    default = candidates[0]
    archs = tuple(job.archs) or tc.resolve_archs(None)  # a Ray task builds for the GPU of its node
    artifact = built_artifact(v, candidates, archs, Path(job.cache_dir) if job.cache_dir else None)
    timer = GpuTimer(v, ConfigCaller(artifact))

    def timed(launch: Launch, n: int) -> float:
        try:
            return timer(launch, n)
        except Failed as exc:
            emit({"event": "fail", "id": launch.id, "kind": exc.kind, "message": str(exc)})
            raise

    outcome = search(live, tuple(job.buckets), timed, default, known=known)
    outcome.code = timed_code(artifact)
    emit({"event": "done", "outcome": outcome_to_json(outcome)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
