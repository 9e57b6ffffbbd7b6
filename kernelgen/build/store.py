"""The kernel cache on disk: artifact directories, content-hash checks, locks, staging and atomic publish.

An artifact is published when its directory holds manifest.json and a library whose sha256 the
manifest records; anything else (a truncated or flipped library, a missing or unreadable manifest,
a half-renamed directory) is not an artifact and is rebuilt. Staging directories carry their
builder's pid, so leftovers of a killed builder are removed by the next one."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .. import knobs
from ..codegen.launch import LaunchPlan
from ..spec.variant import Variant

CACHE_LAYOUT = "v1"  # bump when the artifact directory format changes
STAGING_PREFIX = ".staging-"
_STAGING = re.compile(re.escape(STAGING_PREFIX) + r"(\d+)-")
log = logging.getLogger("kernelgen.build")


@dataclass(frozen=True)
class Artifact:
    variant: Variant
    key: str
    directory: Path
    launch_plan: LaunchPlan

    @property
    def library(self) -> Path:
        return self.directory / f"{self.variant.name}.so"

    @property
    def source(self) -> Path:
        return self.directory / f"{self.variant.name}.cu"


def kernels_dir(cache_dir: Path | None = None) -> Path:
    return (cache_dir or knobs.cache_dir()) / CACHE_LAYOUT


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def published_problem(a: Artifact) -> str | None:
    """Why a is not a usable artifact (None when it is): missing, no manifest, or a library whose
    content does not match the hash its manifest recorded."""
    manifest = a.directory / "manifest.json"
    if not a.directory.exists():
        return "missing"
    try:
        recorded = json.loads(manifest.read_text()).get("library_sha256")
    except (OSError, ValueError, AttributeError):
        return "manifest missing or unreadable"
    if not a.library.is_file():
        return "library missing"
    if recorded != file_sha256(a.library):
        return "library does not match the sha256 in its manifest (truncated or modified)"
    return None


def is_published(a: Artifact) -> bool:
    problem = published_problem(a)
    if problem not in (None, "missing"):
        log.warning("kernelgen: ignoring cached %s: %s; rebuilding", a.directory, problem)
    return problem is None


@contextlib.contextmanager
def locked(paths: list[Path]) -> Iterator[None]:
    """Exclusive cross-process locks, taken in sorted order so two builders never deadlock."""
    handles = []
    try:
        for path in sorted(paths):
            path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(path, "a+")
            fcntl.flock(handle, fcntl.LOCK_EX)
            handles.append(handle)
        yield
    finally:
        for handle in reversed(handles):
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()


def staging_prefix() -> str:
    return f"{STAGING_PREFIX}{os.getpid()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_dead_staging(root: Path) -> None:
    """Remove staging directories whose builder process is gone (killed mid-build or mid-publish)."""
    for path in root.glob(f"{STAGING_PREFIX}*"):
        m = _STAGING.match(path.name)
        if m and not _alive(int(m.group(1))):
            shutil.rmtree(path, ignore_errors=True)


def publish(sub: Path, a: Artifact, manifest: dict[str, object]) -> None:
    """Move a staged artifact into place: manifest (with the library's sha256) first, then one rename."""
    for leftover in sub.glob("*.o*"):
        leftover.unlink()
    manifest = {**manifest, "library_sha256": file_sha256(sub / a.library.name)}
    (sub / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if a.directory.exists():  # a corrupt or incomplete directory from a crashed builder
        shutil.rmtree(a.directory)
    os.rename(sub, a.directory)
    with open(a.directory.parent / "builds.log", "a") as audit:  # an audit trail: one line per compile
        audit.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {a.directory.name} pid={os.getpid()}\n")
