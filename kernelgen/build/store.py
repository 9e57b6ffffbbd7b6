"""The kernel cache on disk: artifact directories, content-hash checks, staging and atomic publish (locks: locks.py).

An artifact is published when its directory holds manifest.json naming the artifact's build key and
archs, and a library whose sha256 the manifest records; anything else (a truncated or flipped library,
a missing or unreadable manifest, a half-renamed directory, an artifact copied in from another key)
is not an artifact and is rebuilt. Staging directories record their owner (the builder's pid and
start time, and its ninja's session), so leftovers of a killed builder are removed, and whatever it
left running killed, by the next one. Every write names its path when it fails."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import knobs
from ..codegen.launch import LaunchPlan
from ..errors import writing
from ..spec.variant import Variant
from . import devicecode, processes

CACHE_LAYOUT = "v1"  # bump when the artifact directory format changes
STAGING_PREFIX = ".staging-"
_STAGING = re.compile(re.escape(STAGING_PREFIX) + r"(\d+)-")
OWNER = "owner.json"
# the fix a full, read-only or forbidden cache ends on (errors.os_error_message)
CACHE_ELSEWHERE = f"set {knobs.CACHE_DIR.name} to another folder"
log = logging.getLogger("kernelgen.build")


@dataclass(frozen=True)
class Artifact:
    variant: Variant
    key: str
    directory: Path
    launch_plan: LaunchPlan
    archs: tuple[str, ...] | None = None  # the targets it is built for (None: not checked against the manifest)

    @property
    def library(self) -> Path:
        return self.directory / f"{self.variant.name}.so"

    @property
    def source(self) -> Path:
        return self.directory / f"{self.variant.name}.cu"

    def device_code(self) -> dict[str, dict[str, str]]:
        """{arch: {instance id: key}} of the kernels in its library (build/devicecode.py), as its manifest keeps
        them (read from the library where the manifest has none); {} where they cannot be read."""
        try:
            kept = json.loads((self.directory / "manifest.json").read_text()).get("device_code")
            if isinstance(kept, dict):
                return kept
            return devicecode.instance_keys(self.library.read_bytes(), self.launch_plan.configs, self.archs or ())
        except (OSError, ValueError, AttributeError, devicecode.DeviceCodeError) as exc:
            log.warning("kernelgen: cannot read the device code of %s (%s)", self.library, exc)
            return {}


def kernels_dir(cache_dir: Path | None = None) -> Path:
    return (cache_dir or knobs.cache_dir()) / CACHE_LAYOUT


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _named(key: object, archs: object) -> str:
    shown_key = key[:12] if isinstance(key, str) else repr(key)
    shown_archs = ", ".join(map(str, archs)) if isinstance(archs, list) else repr(archs)
    return f"build key {shown_key} ({shown_archs})"


def manifest_problem(manifest: Any, key: str, archs: tuple[str, ...] | None) -> str | None:
    """Why a manifest does not describe the artifact of build key `key` for `archs` (None when it does;
    archs None: the key alone is checked). The key hashes the archs, so either differing means the
    directory holds another build, copied or moved here."""
    if not isinstance(manifest, dict):
        return "manifest is not a JSON object"
    got_key, got_archs = manifest.get("key"), manifest.get("archs")
    if got_key == key and (archs is None or got_archs == list(archs)):
        return None
    wanted = _named(key, list(archs) if archs is not None else got_archs)
    return f"its manifest is for {_named(got_key, got_archs)}, not {wanted}: another build's files"


def published_problem(a: Artifact) -> str | None:
    """Why a is not a usable artifact (None when it is): missing, no manifest, a manifest of another key
    or arch, or a library whose content does not match the hash its manifest recorded."""
    manifest = a.directory / "manifest.json"
    if not a.directory.exists():
        return "missing"
    try:
        recorded = json.loads(manifest.read_text())
        sha = recorded.get("library_sha256")
    except (OSError, ValueError, AttributeError):
        return "manifest missing or unreadable"
    problem = manifest_problem(recorded, a.key, a.archs)
    if problem is not None:
        return problem
    if not a.library.is_file():
        return "library missing"
    if sha != file_sha256(a.library):
        return "library does not match the sha256 in its manifest (truncated or modified)"
    return None


def is_published(a: Artifact) -> bool:
    problem = published_problem(a)
    if problem not in (None, "missing"):
        log.warning("kernelgen: ignoring cached %s: %s; rebuilding", a.directory, problem)
    return problem is None


def staging_prefix() -> str:
    return f"{STAGING_PREFIX}{os.getpid()}-"


@dataclass(frozen=True)
class Owner:
    """Who owns a staging directory: the builder (its start time tells it from a later process that got
    its pid; None where unknown) and, once started, its ninja, whose pid is the id of its session."""

    pid: int
    start: int | None
    ninja: int | None = None


def owner_json(owner: Owner) -> str:
    return json.dumps({"pid": owner.pid, "start": owner.start, "ninja": owner.ninja}) + "\n"


def parse_owner(text: str) -> Owner | None:
    try:
        d = json.loads(text)
        pid, start, ninja = d["pid"], d.get("start"), d.get("ninja")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if not _is_int(pid) or not all(x is None or _is_int(x) for x in (start, ninja)):
        return None
    return Owner(pid, start, ninja)


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def staging_is_stale(owner: Owner, builder: processes.ProcStat | None) -> bool:
    """Whether the builder that owns a staging directory is gone: no such process, a zombie, or a process
    that started at another time (its pid reused)."""
    return not processes.is_running(builder, owner.start)


def _owner_of(path: Path) -> Owner | None:
    """The owner record, else the pid in the directory's name (a builder killed before writing it)."""
    try:
        recorded = parse_owner((path / OWNER).read_text())
    except OSError:
        recorded = None
    m = _STAGING.match(path.name)
    return recorded or (Owner(int(m.group(1)), None) if m else None)


def write_file(path: Path, text: str, elsewhere: str = CACHE_ELSEWHERE) -> None:
    """Write text to path, making its folder first; a refused write is one line naming the path."""
    with writing(path.parent, elsewhere):
        path.parent.mkdir(parents=True, exist_ok=True)
    with writing(path, elsewhere):
        path.write_text(text)


def _write_owner(staging: Path, owner: Owner) -> None:
    write_file(staging / OWNER, owner_json(owner))


def new_staging(root: Path) -> Path:
    """A fresh staging directory under root, owned by this process."""
    with writing(root, CACHE_ELSEWHERE):
        staging = Path(tempfile.mkdtemp(prefix=staging_prefix(), dir=root))
    try:
        _write_owner(staging, Owner(os.getpid(), processes.start_time(os.getpid())))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging


def record_ninja(staging: Path, ninja_pid: int) -> None:
    """Add the ninja now running in `staging` to its owner record (the next build's backstop kills its session)."""
    _write_owner(staging, Owner(os.getpid(), processes.start_time(os.getpid()), ninja_pid))


def clean_dead_staging(root: Path) -> None:
    """Remove staging directories whose builder is gone (killed mid-build or mid-publish, dead or a zombie),
    after killing whatever of its ninja's session still runs in them."""
    for path in root.glob(f"{STAGING_PREFIX}*"):
        owner = _owner_of(path)
        if owner is None or not staging_is_stale(owner, processes.read_stat(owner.pid)):
            continue
        if owner.ninja is not None:
            processes.kill_session(owner.ninja, path)
        shutil.rmtree(path, ignore_errors=True)


def publish(sub: Path, a: Artifact, manifest: dict[str, object]) -> None:
    """Move a staged artifact into place: manifest (with the library's sha256) first, then one rename."""
    with writing(sub, CACHE_ELSEWHERE):
        for leftover in sub.glob("*.o*"):
            leftover.unlink()
    manifest = {**manifest, "library_sha256": file_sha256(sub / a.library.name)}
    write_file(sub / "manifest.json", json.dumps(manifest, indent=2) + "\n")
    with writing(a.directory, CACHE_ELSEWHERE):
        if a.directory.exists():  # a corrupt or incomplete directory from a crashed builder
            shutil.rmtree(a.directory)
        os.rename(sub, a.directory)
    audit = a.directory.parent / "builds.log"
    with writing(audit, CACHE_ELSEWHERE), open(audit, "a") as f:  # an audit trail: one line per compile
        f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {a.directory.name} pid={os.getpid()}\n")
