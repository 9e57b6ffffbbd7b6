"""Tuning records on disk: one JSON file per GPU, entries per variant; atomic, merging writes.

A record holds for the device code it timed: each timed instance (a launch configuration without its
launch options) carries the key of what ran (build/devicecode.py: a digest of its kernel's machine code on
the record's arch, names left out, and the launch geometry the host gave it), taken from the library the
tuner timed. A record applies where every configuration it routes to still builds to the key it timed; the
loader checks that against the library it builds (tune/lookup.py) and says so in one line where it does not.
Editing Python, comments, host code or where a function lives keeps every record; an edit that changes a
kernel's code or launch geometry invalidates exactly the records that timed it. Another GPU (name, compute
capability, SM count, or memory bandwidth where known) or another schema invalidates a record too.

Files are read entry by entry (kernelgen/tune/recordcheck.py says what makes an entry unusable): an
unusable entry, or a file that is not JSON of this schema, is reported once and passed over, and the
lookup goes on to the next record. A write keeps every usable entry it does not replace and moves the rest
to `<name>.rejected.json` beside the file, with the reason: nothing a write did not replace is lost."""
from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from .. import knobs, resources
from ..build.arch import arch_of_capability
from ..build.locks import locked
from ..errors import TuningError, writing
from ..spec.variant import Launch, Variant
from . import recordcheck
from .gpu import GpuInfo
from .search import Outcome

SCHEMA = 3  # 3: keys of the device code (2: of the kernels' source text; 1: one hash of every template file)
log = logging.getLogger("kernelgen.tune")


def arch_of(gpu: GpuInfo) -> str:
    """The arch a GPU's builds target: capability '9.0' -> 'sm_90a' (the arch-specific form kernelgen builds)."""
    return arch_of_capability(gpu.capability)


@dataclass(frozen=True)
class Record:
    variant: str  # the name it was tuned under (for people; the key is the content key)
    content_key: str
    code: dict[str, str]  # instance id (launch id without launch options) -> key of the device code it timed
    gpu: GpuInfo
    buckets: tuple[int, ...]
    timings: dict[str, dict[int, float]]
    failures: dict[str, str]
    choice: tuple[tuple[int, str], ...]  # (max tokens, launch id); the last serves larger counts too
    toolchain: dict[str, str] = field(default_factory=dict)
    method: dict[str, Any] = field(default_factory=dict)

    def routes(self) -> list[tuple[int, Launch]]:
        return [(bound, Launch.from_id(lid)) for bound, lid in self.choice]

    def chosen_instances(self) -> set[str]:
        return {instance_id(lid) for _, lid in self.choice}

    def stale(self, current: dict[str, str]) -> list[str]:
        """The chosen instances whose device code is not what it timed (current: instance id -> key of a
        library built now for the record's arch, Artifact.device_code)."""
        return sorted(i for i in self.chosen_instances() if self.code.get(i) != current.get(i))

    def to_json(self) -> dict[str, Any]:
        return {
            "variant": self.variant, "code": dict(sorted(self.code.items())), "buckets": list(self.buckets),
            "choice": [[b, lid] for b, lid in self.choice],
            "timings_us": {lid: {str(b): round(us, 4) for b, us in sorted(t.items())} for lid, t in sorted(self.timings.items())},
            "failures": dict(sorted(self.failures.items())), "toolchain": self.toolchain, "method": self.method,
        }

    @classmethod
    def from_json(cls, key: str, gpu: GpuInfo, d: dict[str, Any]) -> Record:
        return cls(str(d["variant"]), key, {str(i): str(k) for i, k in d["code"].items()}, gpu,
                   tuple(int(b) for b in d["buckets"]),
                   {lid: {int(b): float(us) for b, us in t.items()} for lid, t in d["timings_us"].items()},
                   {str(k): str(v) for k, v in d.get("failures", {}).items()},
                   tuple((int(b), str(lid)) for b, lid in d["choice"]), dict(d.get("toolchain", {})),
                   dict(d.get("method", {})))

    def outcome(self) -> Outcome:
        return Outcome({k: dict(v) for k, v in self.timings.items()}, dict(self.failures), list(self.choice))


def instance_id(launch_id: str) -> str:
    """The compiled instance a launch id runs (PDL is a launch attribute, not code)."""
    return Launch.from_id(launch_id).instance.id


def record_file(directory: Path, gpu: GpuInfo) -> Path:
    return directory / f"{gpu.slug}.json"


REJECTED_SUFFIX = ".rejected.json"


def rejected_file(path: Path) -> Path:
    """Where writes to the record file `path` move what they cannot keep: `<name>.rejected.json` beside it."""
    return path.with_name(path.name.removesuffix(".json") + REJECTED_SUFFIX)


def record_files(directory: Path, pattern: str = "*.json") -> list[Path]:
    return [p for p in sorted(directory.glob(pattern)) if not p.name.endswith(REJECTED_SUFFIX)]


@dataclass(frozen=True)
class Rejected:
    """What a record file holds that cannot be used: one entry (key: its content key) or the whole file
    (key ""), with the reason and the content as found, so that moving it aside loses nothing."""

    key: str
    variant: str
    reason: str
    content: dict[str, Any]  # {"entry": the raw entry} or the file's bytes as {"text": ...} / {"base64": ...}


@dataclass(frozen=True)
class RecordFile:
    """A record file read entry by entry: the usable records and what was rejected (gpu is None when the
    whole file is unusable; then `rejected` holds it as its one item)."""

    path: Path
    gpu: GpuInfo | None
    records: dict[str, Record]
    rejected: tuple[Rejected, ...]


def _as_content(data: bytes) -> dict[str, Any]:
    try:
        return {"text": data.decode()}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def _entry_name(entry: Any) -> str:
    name = entry.get("variant") if isinstance(entry, dict) else None
    return name if isinstance(name, str) else "?"


def parse_file(path: Path, data: bytes) -> RecordFile:
    """A record file from its bytes, each entry validated on its own (kernelgen/tune/recordcheck.py)."""
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError) as exc:
        return RecordFile(path, None, {}, (Rejected("", "?", f"not JSON ({exc})", _as_content(data)),))
    why = recordcheck.file_problem(raw, SCHEMA)
    if why:
        return RecordFile(path, None, {}, (Rejected("", "?", why, _as_content(data)),))
    gpu = GpuInfo.from_dict(raw["gpu"])
    usable, rejected = {}, []
    for key, entry in raw["variants"].items():
        why = recordcheck.entry_problem(entry)
        if why:
            rejected.append(Rejected(key, _entry_name(entry), why, {"entry": entry}))
        else:
            usable[key] = Record.from_json(key, gpu, entry)
    return RecordFile(path, gpu, usable, tuple(rejected))


def scan(path: Path) -> RecordFile | None:
    """The record file at path (None: there is none). Quiet: readers report through `read`."""
    try:
        return parse_file(path, path.read_bytes())
    except FileNotFoundError:
        return None


_reported: set[tuple[str, str, str]] = set()  # (file, entry, reason): each fault is said once per process


def report(path: Path, key: str, variant: str, reason: str) -> None:
    if (str(path), key, reason) in _reported:
        return
    _reported.add((str(path), key, reason))
    if key:
        log.warning("%s: tuning record %s (%s) skipped: %s; using the next record or the default launch "
                    "(re-tune to replace it)", path, recordcheck.shown(variant), recordcheck.shown(key), reason)
    else:
        log.warning("ignoring %s tuning record file %s: %s (the next write there moves it to %s)",
                    "foreign" if reason.startswith("schema") else "corrupt", path, reason, rejected_file(path).name)


def read(path: Path) -> RecordFile | None:
    """`scan`, saying once per process what was rejected and why. An unreadable file counts as corrupt."""
    try:
        found = scan(path)
    except OSError as exc:
        report(path, "", "?", f"cannot be read ({exc.strerror or exc})")
        return None
    for r in found.rejected if found else ():
        report(path, r.key, r.variant, r.reason)
    return found


def read_file(path: Path) -> tuple[GpuInfo, dict[str, Record]] | None:
    """(gpu, usable records by content key), or None for a missing, corrupt or foreign-schema file."""
    found = read(path)
    return None if found is None or found.gpu is None else (found.gpu, found.records)


def search_dirs() -> list[Path]:
    """Where records are looked up, in order: the user's tuning directory, then the shipped records."""
    return [knobs.tuning_dir(), resources.tuned_dir()]


def find(directories: list[Path], v: Variant, accept: Callable[[GpuInfo], bool],
         pattern: str = "*.json") -> tuple[Record, Path] | None:
    """The first usable record for v whose GPU `accept`s, searching directories in order (record files matching
    `pattern`). A record whose routes break one of v's launch guards is reported (as the record's fault, not
    the spec's) and passed over. Whether its chosen instances still build to the code it timed is known once
    they are built: tune/lookup.py checks it."""
    key = v.content_key()
    for directory in directories:
        for path in record_files(directory, pattern):
            found = read(path)
            record = found.records.get(key) if found is not None and found.gpu is not None else None
            if record is None or not accept(record.gpu):
                continue
            why = recordcheck.routes_problem(v, record.choice)
            if why:
                report(path, key, record.variant, why)
                continue
            return record, path
    return None


def lookup(directories: list[Path], gpu: GpuInfo, v: Variant) -> tuple[Record, Path] | None:
    """The first usable record for v on this GPU model, searching directories in order.
    Only this model's file is read: `write` files a record under the slug of the GPU it was tuned on,
    and `gpu.matches` accepts exactly the GPUs with that slug."""
    return find(directories, v, gpu.matches, pattern=record_file(Path(), gpu).name)


def merge(old: Record | None, new: Record) -> Record:
    """Timings of both (the newer measurement wins per config and bucket); failures likewise. Old
    timings and failures of an instance whose code key differs from the new record's (the tuner keys every
    instance it built) are dropped: they timed other code. The caller recomputes the choice."""
    if old is None:
        return new
    code = {**old.code, **new.code}

    def same_code(lid: str) -> bool:
        i = instance_id(lid)
        return old.code.get(i) == code.get(i)

    old = replace(old, timings={lid: t for lid, t in old.timings.items() if same_code(lid)},
                  failures={lid: f for lid, f in old.failures.items() if same_code(lid)})
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
    code = {i: k for i, k in code.items() if any(instance_id(lid) == i for lid in [*timings, *failures])}
    return Record(new.variant, new.content_key, code, new.gpu, buckets, timings, failures, new.choice,
                  new.toolchain, new.method)


def carried(found: RecordFile | None, gpu: GpuInfo) -> tuple[dict[str, Record], list[Rejected]]:
    """What a write for `gpu` keeps of the file as found, and what it moves aside: the rejected entries,
    an unusable file whole, and the records of another board that shares the file name."""
    if found is None:
        return {}, []
    if found.gpu is None or found.gpu.matches(gpu):
        return dict(found.records), list(found.rejected)
    other = (f"tuned on another GPU ({found.gpu.name}, {found.gpu.bandwidth_gbs} GB/s) than the one writing "
             f"({gpu.name}, {gpu.bandwidth_gbs} GB/s)")
    moved = [Rejected(k, r.variant, other, {"entry": r.to_json()}) for k, r in found.records.items()]
    return {}, [*found.rejected, *moved]


def _write_text(path: Path, text: str) -> None:
    knobs.write_atomic(path, text)


def _json_text(body: dict[str, Any]) -> str:
    return json.dumps(body, indent=1, sort_keys=True) + "\n"


def set_aside(path: Path, items: list[Rejected], gpu: GpuInfo | None) -> Path:
    """Append items to path's `.rejected.json` (kept, never read by kernelgen: a person may restore them).
    An earlier rejected file that cannot be read is itself kept there as text."""
    target = rejected_file(path)
    try:
        earlier = json.loads(target.read_bytes())["rejected"]
        if not isinstance(earlier, list):
            raise TypeError("'rejected' is not a list")
    except FileNotFoundError:
        earlier = []
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        earlier = [{"reason": f"an earlier {target.name} that could not be read ({exc})",
                    **_as_content(target.read_bytes())}]
    where = {"gpu": gpu.as_dict()} if gpu is not None else {}
    added = [{"from": path.name, "key": r.key, "variant": r.variant, "reason": r.reason, **(where if r.key else {}),
              **r.content} for r in items]
    _write_text(target, _json_text({"about": f"entries moved out of {path.name} by kernelgen, each with the reason; "
                                             "nothing reads this file", "rejected": earlier + added}))
    return target


def write(directory: Path, record: Record, rechoose: Any = None) -> Path:
    """Merge record into its GPU's file under a lock: re-read, merge, write a temp file, rename.
    `rechoose(merged) -> choice` recomputes the choice from the merged timings. Every other usable entry
    is kept; unusable ones (and an unusable file) go to `<name>.rejected.json` first, so nothing is lost
    even when the writer dies between the two renames. A record that would not be usable is refused."""
    return write_merged(directory, record, rechoose)[0]


def write_merged(directory: Path, record: Record, rechoose: Any = None) -> tuple[Path, Record]:
    """`write`, also returning the record as written (merged with the file's, its choice recomputed)."""
    path = record_file(directory, record.gpu)
    elsewhere = "set KERNELGEN_CACHE_DIR (or --out) to another folder"
    with writing(path, elsewhere), locked([path.with_suffix(".lock")], elsewhere):
        for leftover in [*path.parent.glob(f".{path.name}.*"), *path.parent.glob(f".{rejected_file(path).name}.*")]:
            leftover.unlink(missing_ok=True)  # temp files of writers killed mid-write (safe: they held this lock)
        found = scan(path)
        records, aside = carried(found, record.gpu)
        merged = merge(records.get(record.content_key), record)
        if rechoose is not None:
            merged = replace(merged, choice=tuple(rechoose(merged)))
        why = recordcheck.entry_problem(merged.to_json())
        if why:
            raise TuningError(f"{path}: {record.variant}: record not written: {why}")
        records[record.content_key] = merged
        if aside:
            set_aside(path, aside, found.gpu if found is not None else None)
        _write_text(path, _json_text({"schema": SCHEMA, "gpu": record.gpu.as_dict(),
                                      "variants": {k: r.to_json() for k, r in sorted(records.items())}}))
    return path, merged


def all_records(directory: Path, pattern: str = "*.json") -> list[tuple[Path, GpuInfo, Record]]:
    """Every usable record in directory (what is not usable is reported once)."""
    out = []
    for path in record_files(directory, pattern):
        found = read(path)
        if found is not None and found.gpu is not None:
            out += [(path, found.gpu, r) for r in found.records.values()]
    return out
