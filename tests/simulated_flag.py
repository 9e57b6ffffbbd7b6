"""A tuning search run with the simulated timer on two fake GPUs, for a launch flag bound to some GPUs (hw_convert,
packed_f32): with the flag on a candidate is `faster` times the time, so where the space offers the flag it wins
every bucket. Returns, per compute capability, the launch ids the search timed and the launches it chose."""
from __future__ import annotations

from kernelgen.codegen.launch import resolve
from kernelgen.spec.variant import Launch, Variant
from kernelgen.tune.search import search
from kernelgen.tune.space import candidates, default_space


def simulated_search(v: Variant, flag: str, capabilities: tuple[str, ...], faster: float
                     ) -> dict[str, tuple[list[str], list[Launch]]]:
    out = {}
    for cap in capabilities:
        valid, _ = candidates(v, default_space(v, capability=cap))
        calls: list[str] = []

        def timer(launch: Launch, n: int) -> float:
            calls.append(launch.id)
            return (10.0 * faster if getattr(launch, flag) else 10.0) * (1 + launch.threads_per_token / 64) * n ** 0.5

        outcome = search(valid, (1, 64, 4096), timer, resolve(v).launch)
        out[cap] = (calls, [Launch.from_id(lid) for _, lid in outcome.choice])
    return out
