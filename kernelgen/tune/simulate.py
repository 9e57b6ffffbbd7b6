"""A simulated GPU for testing the tuner without one: replays recorded timings (and failures).

`ReplayTimer` answers from a table {launch id: {tokens: us}} or {launch id: "kind: message"}, the
shape a record's timings and failures have; `replay_execute` runs a whole search task with it, the
way a Ray task runs one on a GPU node."""
from __future__ import annotations

from typing import Any

from ..spec.variant import Launch
from .search import Failed, search


class ReplayTimer:
    def __init__(self, timings: dict[str, dict[int, float]], failures: dict[str, str] | None = None) -> None:
        self.timings, self.failures = timings, failures or {}
        self.calls: list[tuple[str, int]] = []

    def __call__(self, launch: Launch, num_tokens: int) -> float:
        self.calls.append((launch.id, num_tokens))
        if launch.id in self.failures:
            kind, _, message = self.failures[launch.id].partition(": ")
            raise Failed(kind, message)
        try:
            return self.timings[launch.id][num_tokens]
        except KeyError:
            raise Failed("launch", f"no recorded timing for {launch.id} at {num_tokens} tokens") from None


def replay_execute(task: Any) -> dict[str, Any]:
    """Run a SearchTask against the timings in task.known["replay"] on the GPU task.known["gpu"]."""
    from .runner import outcome_to_json

    replay = task.known["replay"]
    timer = ReplayTimer({lid: {int(n): float(us) for n, us in t.items()} for lid, t in replay["timings"].items()},
                        replay.get("failures", {}))
    from .distributed import offered
    from .gpu import GpuInfo

    gpu = GpuInfo.from_dict(task.known["gpu"])
    outcome = search([Launch.from_id(c) for c in offered(task, gpu.capability)], task.buckets, timer,
                     Launch.from_id(task.default))
    return {"gpu": task.known["gpu"], "outcome": outcome_to_json(outcome)}
