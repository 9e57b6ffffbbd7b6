"""kernelgen.load: one front door for a spec's variants and launch groups, by name."""
from __future__ import annotations

from pathlib import Path

from ..spec.parse import load_spec
from ..tune.gpu import GpuInfo
from .op import _CURRENT, Op, load_variant


def load(spec: str | Path, name: str, *, arch: str | None = None, cache_dir: str | Path | None = None,
         gpu: GpuInfo | None | object = _CURRENT) -> Op:
    """Build (or find in the cache) one variant or launch group of a spec, tuned for the GPU (`gpu`, default the
    local one), and return it as a callable op (an Op: a variant is a launch group of one member)."""
    return load_variant(load_spec(spec).kernel(name), arch=arch, cache_dir=cache_dir, gpu=gpu)
