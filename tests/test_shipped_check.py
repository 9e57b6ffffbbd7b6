"""Build tier: every shipped layout compiles for Hopper and both Blackwell targets (compile-only, no GPU)."""
from __future__ import annotations

import pytest

from kernelgen.build import toolchain
from kernelgen.build.lifecycle import compile_only, one_per_layout
from kernelgen.spec.parse import shipped_specs, shipped_variants

pytestmark = pytest.mark.build

TARGETS = ("sm_90a", "sm_100a", "sm_120a")


def test_shipped_variants_compile_for_all_targets() -> None:
    """Every shipped layout; a launch group's members compile inside their group's kernel
    (tests/test_groups.py::test_shipped_groups_compile_for_every_target), which keeps this tier's time."""
    members = {v.name for spec in shipped_specs() for g in spec.groups for _, v in g.members}
    kept, _ = one_per_layout([v for v in shipped_variants() if v.name not in members])
    results = compile_only(kept, toolchain.detect(), TARGETS)
    failed = [(r.variant, r.arch, r.message) for r in results if not r.ok]
    assert not failed, failed
    assert len(results) == len(kept) * len(TARGETS)
