"""Launch groups under the names they had before a variant became a launch group of one member: a group's op is
an Op (runtime/op.py), its checker the one InputChecker."""
from __future__ import annotations

from pathlib import Path

from ..spec.parse import load_spec
from .op import InputChecker, Op, as_rows, load_variant

GroupOp = Op
GroupChecker = InputChecker
load_group_kernel = load_variant

__all__ = ["GroupChecker", "GroupOp", "as_rows", "load_group", "load_group_kernel"]


def load_group(spec: str | Path, name: str, *, arch: str | None = None, cache_dir: str | Path | None = None) -> Op:
    """Build (or find in the cache) one launch group of a spec and return it as a callable op."""
    return load_variant(load_spec(spec).group(name), arch=arch, cache_dir=cache_dir)
