"""Opcode counts of kernels' SASS for the build tier's instruction checks (tools/sass_count.py does the work)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernelgen import knobs

# The build tier's tests that read machine code skip, saying why, where no cuobjdump is found.
SASS = pytest.mark.skipif(knobs.cuobjdump() is None, reason="needs cuobjdump to read the SASS (the test extra's "
                          "nvidia-cuda-cuobjdump, CUDA's, or KERNELGEN_CUOBJDUMP=path)")


def sass_ops(spec: str, name: str, lids: list[str], arch: str) -> dict[str, dict[str, int]]:
    """Opcode counts of each launch's kernel, every launch compiled in one nvcc run (tools/sass_count.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from sass_count import count

    return {lid: dict(ops) for lid, ops in count(spec, name, lids, by_opcode=True, arch=arch).items()}


def sass_sequence(spec: str, name: str, lids: list[str], arch: str) -> dict[str, list[str]]:
    """Each launch's kernel as its opcodes in program order (tools/sass_count.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from sass_count import sequence

    return sequence(spec, name, lids, arch=arch)
