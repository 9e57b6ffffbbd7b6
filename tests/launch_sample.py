"""Which launch configurations the GPU tier runs. By default (the fast tier) a deterministic sample of the
configurations the tuner may choose: the default launch, then the fewest further candidates that together take
every value each compiled launch parameter takes among the candidates. The sweep (marker `sweep`, deselected
unless `-m sweep` or KERNELGEN_SWEEP=1: tests/conftest.py) runs every candidate. Both are parametrised by
(kernel, configuration), so `pytest --collect-only` counts the configurations each tier runs."""
from __future__ import annotations

from typing import Any, Callable

import pytest

from kernelgen.codegen.launch import LaunchPlan, launch_variant, resolve
from kernelgen.spec.launchparams import COMPILED
from kernelgen.spec.variant import Launch


def local_capability() -> str | None:
    """The compute capability of the GPU here (None without one): the tuner's space on it holds the launch flags bound
    to some GPUs (hw_convert on Blackwell, packed_f32 on sm_100/sm_103), so the GPU tier on such a GPU checks them
    too; elsewhere it is the space of every other GPU."""
    from kernelgen.tune.gpu import current

    found = current()
    return found.capability if found is not None else None


def _values(launch: Launch) -> set[tuple[str, object]]:
    return {(p.name, getattr(launch, p.name)) for p in COMPILED}


def sample_compile_failures(kernel: Any, candidates: list[Launch],
                            archs: tuple[str, ...] = ("sm_90a", "sm_100a", "sm_120a")) -> list[str]:
    """Compile the representative sample of candidates (at least three) of a variant or group for every target; the
    failures' messages (empty: all compiled). For the build tier's checks that a launch flag's candidates build
    everywhere."""
    from kernelgen.build import toolchain
    from kernelgen.build.lifecycle import compile_only
    from kernelgen.tune.runner import tuning_plan

    rows = representative(candidates)
    assert len(rows) >= 3, [c.id for c in rows]
    results = compile_only([kernel], toolchain.detect(), archs, plan=tuning_plan(kernel, rows))
    assert results
    return [r.message for r in results if not r.ok]


def representative(candidates: list[Launch]) -> list[Launch]:
    """The default (candidates[0], as tune.space.candidates orders them) and, greedily, the candidate that adds
    the most (parameter, value) pairs not yet covered (the first such in candidate order), until every value of
    every compiled parameter (threads_per_token, tokens_per_block, vec, prefetch, loop) that the candidates take
    is taken by a configuration of the sample. Compiled instances: PDL is a launch option, and every check runs
    each configuration with and without it."""
    instances = list(dict.fromkeys(c.instance for c in candidates))
    sample = instances[:1]
    uncovered = set().union(*map(_values, instances)) - set().union(*map(_values, sample))
    while uncovered:
        best = max(instances, key=lambda c: len(_values(c) & uncovered))  # max keeps the first of the best
        sample.append(best)
        uncovered -= _values(best)
    return sample


def every(candidates: list[Launch]) -> list[Launch]:
    """Every compiled instance among the candidates, in candidate order (the sweep)."""
    return list(dict.fromkeys(c.instance for c in candidates))


def cases(kernels: list[Any], candidates_of: Callable[[Any], list[Launch]],
          pick: Callable[[list[Launch]], list[Launch]]) -> list[Any]:
    """pytest params (kernel, configuration), id 'kernel-launch id', of pick(candidates) for each kernel."""
    return [pytest.param(k, c, id=f"{k.name}-{c.id}") for k in kernels for c in pick(candidates_of(k))]


def config_index(plan: LaunchPlan, kernel: Any, config: Launch) -> int:
    """The index of config among plan.configs (the compiled instances of the kernel's library)."""
    return plan.configs.index(resolve(launch_variant(kernel).with_launch(config)).launch.instance)
