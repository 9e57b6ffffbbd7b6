"""Tuning records on disk: one JSON file per GPU, entries per variant; atomic, merging writes.

What invalidates a record (never used, and replaced on the next write): another GPU (name,
compute capability, SM count, or memory bandwidth where known), another template (the hash of
the kernel template and headers, which define what a launch configuration means; on sm_100 and
sm_103 also whether KERNELGEN_PACKED_F32 was set, which changes the code there), another schema.
A toolchain upgrade (nvcc, driver, tvm-ffi, kernelgen) does not: the record is still used,
`kernelgen tune --show` marks it, and re-tuning refreshes it. A corrupt file is reported once and
ignored."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from .. import knobs, resources
from ..spec.variant import Launch, Variant
from .gpu import GpuInfo
from .search import Outcome

SCHEMA = 1
log = logging.getLogger("kernelgen.tune")


# The GPUs whose code KERNELGEN_PACKED_F32=1 changes (templates/kernelgen/numeric.cuh, KERNELGEN_PAIRS).
PACKED_CAPABILITIES = ("10.0", "10.3")


def template_hash(folder: Path | None = None, packed: bool = False) -> str:
    """Hash of the kernel template and its headers (default: this kernelgen's), and of whether the build
    packs float32 pairs: a record is only valid for the code it timed."""
    h = hashlib.sha256()
    folder = folder or resources.template_dir()
    for path in sorted([*folder.glob("*.j2"), *(folder / "kernelgen").glob("*.cuh")]):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    if packed:
        h.update(b"KERNELGEN_PACKED_F32\0")
    return h.hexdigest()[:16]


def packs(gpu: GpuInfo) -> bool:
    """Whether this process's builds for gpu pack float32 pairs (KERNELGEN_PACKED_F32=1 on sm_100/sm_103)."""
    return knobs.packed_f32() and gpu.capability in PACKED_CAPABILITIES


def record_template(gpu: GpuInfo) -> str:
    """The template key of records for gpu from this process: what its builds for that GPU run."""
    return template_hash(packed=packs(gpu))


@dataclass(frozen=True)
class Record:
    variant: str  # the name it was tuned under (for people; the key is the content key)
    content_key: str
    template: str
    gpu: GpuInfo
    buckets: tuple[int, ...]
    timings: dict[str, dict[int, float]]
    failures: dict[str, str]
    choice: tuple[tuple[int, str], ...]  # (max tokens, launch id); the last serves larger counts too
    toolchain: dict[str, str] = field(default_factory=dict)
    method: dict[str, Any] = field(default_factory=dict)

    def routes(self) -> list[tuple[int, Launch]]:
        return [(bound, Launch.from_id(lid)) for bound, lid in self.choice]

    def to_json(self) -> dict[str, Any]:
        return {
            "variant": self.variant, "template": self.template, "buckets": list(self.buckets),
            "choice": [[b, lid] for b, lid in self.choice],
            "timings_us": {lid: {str(b): round(us, 4) for b, us in sorted(t.items())} for lid, t in sorted(self.timings.items())},
            "failures": dict(sorted(self.failures.items())), "toolchain": self.toolchain, "method": self.method,
        }

    @classmethod
    def from_json(cls, key: str, gpu: GpuInfo, d: dict[str, Any]) -> Record:
        return cls(str(d["variant"]), key, str(d["template"]), gpu, tuple(int(b) for b in d["buckets"]),
                   {lid: {int(b): float(us) for b, us in t.items()} for lid, t in d["timings_us"].items()},
                   {str(k): str(v) for k, v in d.get("failures", {}).items()},
                   tuple((int(b), str(lid)) for b, lid in d["choice"]), dict(d.get("toolchain", {})),
                   dict(d.get("method", {})))

    def outcome(self) -> Outcome:
        return Outcome({k: dict(v) for k, v in self.timings.items()}, dict(self.failures), list(self.choice))


def instance_id(launch_id: str) -> str:
    """The compiled instance a launch id runs (PDL is a launch attribute, not code)."""
    return replace(Launch.from_id(launch_id), pdl=False).id


def rekeyed(record: Record, template: str, proven: set[str], proof: str) -> Record:
    """The record moved to another template whose compiled code was shown identical for the `proven`
    instances (launch ids without PDL): timings kept only for those, failures dropped (they were about
    the old code and are retried at the next tune). Every chosen route must be proven."""
    unproven = [lid for _, lid in record.choice if instance_id(lid) not in proven]
    if unproven:
        raise ValueError(f"{record.variant}: chosen configurations {unproven} are not among the proven instances")
    timings = {lid: dict(t) for lid, t in record.timings.items() if instance_id(lid) in proven}
    steps = [*record.method.get("rekeyed", []), {"from_template": record.template, "proof": proof}]  # oldest first
    return replace(record, template=template, timings=timings, failures={},
                   method={**record.method, "rekeyed": steps})


def record_file(directory: Path, gpu: GpuInfo) -> Path:
    return directory / f"{gpu.slug}.json"


def read_file(path: Path) -> tuple[GpuInfo, dict[str, Record]] | None:
    """(gpu, records by content key), or None for a missing, corrupt or foreign-schema file."""
    try:
        raw = json.loads(path.read_text())
        if raw.get("schema") != SCHEMA:
            log.warning("ignoring %s: schema %s, this kernelgen reads %s", path, raw.get("schema"), SCHEMA)
            return None
        gpu = GpuInfo.from_dict(raw["gpu"])
        return gpu, {k: Record.from_json(k, gpu, d) for k, d in raw["variants"].items()}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("ignoring corrupt tuning record file %s: %s", path, exc)
        return None


def search_dirs() -> list[Path]:
    """Where records are looked up, in order: the user's tuning directory, then the shipped records."""
    return [knobs.tuning_dir(), resources.tuned_dir()]


def find(directories: list[Path], v: Variant, accept: Callable[[GpuInfo], bool],
         pattern: str = "*.json") -> tuple[Record, Path] | None:
    """The first record for v and this template whose GPU `accept`s, searching directories in order
    (record files matching `pattern`)."""
    key, templates = v.content_key(), {False: template_hash()}
    for directory in directories:
        for path, gpu, record in all_records(directory, pattern):
            if record.content_key != key or not accept(gpu):
                continue
            packed = packs(gpu)
            if packed not in templates:
                templates[packed] = template_hash(packed=True)
            if record.template == templates[packed]:
                return record, path
    return None


def lookup(directories: list[Path], gpu: GpuInfo, v: Variant) -> tuple[Record, Path] | None:
    """The first valid record for v on this GPU model and this template, searching directories in order.
    Only this model's file is read: `write` files a record under the slug of the GPU it was tuned on,
    and `gpu.matches` accepts exactly the GPUs with that slug."""
    return find(directories, v, gpu.matches, pattern=record_file(Path(), gpu).name)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def merge(old: Record | None, new: Record) -> Record:
    """Timings of both (the newer measurement wins per config and bucket); failures likewise. A record
    for another template is replaced, not merged. The caller recomputes the choice."""
    if old is None or old.template != new.template:
        return new
    timings = {lid: dict(t) for lid, t in old.timings.items()}
    for lid, t in new.timings.items():
        timings.setdefault(lid, {}).update(t)
    failures = {**old.failures, **new.failures}
    for lid in new.timings:
        if lid not in new.failures:
            failures.pop(lid, None)
    for lid in failures:
        timings.pop(lid, None)
    buckets = tuple(sorted(set(old.buckets) | set(new.buckets)))
    return Record(new.variant, new.content_key, new.template, new.gpu, buckets, timings, failures, new.choice,
                  new.toolchain, new.method)


def write(directory: Path, record: Record, rechoose: Any = None) -> Path:
    """Merge record into its GPU's file under a lock: re-read, merge, write a temp file, rename.
    `rechoose(merged) -> choice` recomputes the choice from the merged timings."""
    path = record_file(directory, record.gpu)
    with _locked(path):
        for leftover in path.parent.glob(f".{path.name}.*"):  # temp files of writers killed mid-write
            leftover.unlink(missing_ok=True)  # (safe: every writer holds this lock while its temp file exists)
        found = read_file(path)
        records = found[1] if found is not None and found[0].matches(record.gpu) else {}
        merged = merge(records.get(record.content_key), record)
        if rechoose is not None:
            merged = Record(**{**merged.__dict__, "choice": tuple(rechoose(merged))})
        records[record.content_key] = merged
        body = {"schema": SCHEMA, "gpu": record.gpu.as_dict(),
                "variants": {k: r.to_json() for k, r in sorted(records.items())}}
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "w") as out:
            json.dump(body, out, indent=1, sort_keys=True)
            out.write("\n")
        os.replace(tmp, path)
    return path


def all_records(directory: Path, pattern: str = "*.json") -> list[tuple[Path, GpuInfo, Record]]:
    out = []
    for path in sorted(directory.glob(pattern)):
        found = read_file(path)
        if found is not None:
            out += [(path, found[0], r) for r in found[1].values()]
    return out
