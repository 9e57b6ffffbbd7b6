"""Pure tier: the GPU tier's sample of launch configurations (tests/launch_sample.py) and the sweep's opt-in."""
from __future__ import annotations

import pytest

from kernelgen.codegen.launch import launch_variant, resolve
from kernelgen.spec.launchparams import COMPILED
from kernelgen.spec.parse import shipped_specs, shipped_variants
from kernelgen.tune.space import candidates, default_space, group_candidates, group_space
from launch_sample import every, representative

pytestmark = pytest.mark.pure

SPECS = {s.name: s for s in shipped_specs()}


def tuner_candidates(k: object) -> list:
    overrides = SPECS[k.spec_name].tune_overrides()  # type: ignore[attr-defined]
    if hasattr(k, "members"):
        return group_candidates(k, group_space(k, overrides))[0]  # type: ignore[attr-defined]
    return candidates(k, default_space(k, overrides))[0]  # type: ignore[attr-defined]


@pytest.mark.parametrize("kernel", [*shipped_variants(), *(g for s in shipped_specs() for g in s.groups)],
                         ids=lambda k: k.name)
def test_the_sample_starts_at_the_default_and_takes_every_value_of_every_launch_parameter(kernel: object) -> None:
    cands = tuner_candidates(kernel)
    sample = representative(cands)
    assert sample[0] == resolve(launch_variant(kernel)).launch.instance  # the default launch comes first
    assert len(set(sample)) == len(sample) and set(sample) <= set(every(cands))
    for p in COMPILED:
        assert {getattr(c, p.name) for c in sample} == {getattr(c, p.name) for c in cands}, p.name
    assert representative(cands) == sample  # deterministic
    assert len(sample) <= max(len({getattr(c, p.name) for c in cands}) for p in COMPILED) + 1


class _Item:
    def __init__(self, *marks: str) -> None:
        self.marks, self.keywords, self.added = set(marks), {m: True for m in marks}, []

    def get_closest_marker(self, name: str) -> object:
        return name if name in self.marks else None

    def add_marker(self, mark: object) -> None:
        self.added.append(mark)


class _Config:
    def __init__(self, markexpr: str) -> None:
        self.markexpr, self.deselected = markexpr, []
        self.hook = self

    def getoption(self, name: str, default: object = None) -> object:
        return self.markexpr if name == "markexpr" else default

    def pytest_deselected(self, items: list) -> None:
        self.deselected += items


@pytest.mark.parametrize("markexpr, knob, runs_sweep", [
    ("gpu", None, False), ("", None, False), ("gpu", "0", False), ("sweep", None, True), ("gpu and sweep", None, True),
    ("gpu", "1", True), ("", "1", True),
])
def test_the_sweep_is_deselected_unless_asked_for(markexpr: str, knob: str | None, runs_sweep: bool) -> None:
    """tests/conftest.py deselects (not skips) the sweep's items unless -m names it or KERNELGEN_SWEEP=1."""
    import conftest

    from kernelgen import knobs

    items = [_Item("gpu"), _Item("gpu", "sweep"), _Item("pure")]
    config = _Config(markexpr)
    kept = list(items)
    with knobs.scope(SWEEP=knob):
        conftest.pytest_collection_modifyitems(config, kept)  # type: ignore[arg-type]
    assert kept == (items if runs_sweep else [items[0], items[2]])
    assert config.deselected == ([] if runs_sweep else [items[1]])
