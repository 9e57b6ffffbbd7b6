"""Validation of tuning record files as read from disk: pure functions from raw JSON values to the reason a
file or an entry cannot be used (None: it can). Reasons are one line and name the field, e.g.
"choice[1]: 't8.b8' is not a launch id like t8.b8.v8[.pf][.lp][.pdl][.hw][.mb2]"."""
from __future__ import annotations

import math
from typing import Any

from ..codegen.guards import violations
from ..codegen.launch import ALL_TOKENS
from ..spec.group import Group
from ..spec.launchparams import ID_EXAMPLE
from ..spec.variant import Launch, Variant

# Keys every entry has, and the optional ones (written by every kernelgen, but absent from hand-made files).
REQUIRED = ("variant", "code", "buckets", "timings_us", "choice")
OPTIONAL_OBJECTS = ("failures", "toolchain", "method")
GPU_FIELDS = (("name", str, True), ("capability", str, True), ("sms", int, True), ("memory_gb", int, False),
              ("bandwidth_gbs", int, False))


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def shown(value: Any, limit: int = 60) -> str:
    """A value from the file as it may appear in a one-line message: printable text as it is, anything
    else (or anything long) as a shortened repr."""
    if isinstance(value, str) and value.isprintable() and len(value) <= limit:
        return value
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _quoted(text: str, limit: int = 60) -> str:
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_int(value: Any) -> bool:
    """A token count a route or bucket may name: 1 .. ALL_TOKENS (the int64 the dispatch compares against)."""
    return _is_int(value) and 1 <= value <= ALL_TOKENS


def file_problem(raw: Any, schema: int) -> str | None:
    """Why a parsed record file cannot be read at all (its entries are checked one by one elsewhere)."""
    if not isinstance(raw, dict):
        return f"the file must hold a JSON object, got {_kind(raw)}"
    if not (_is_int(raw.get("schema")) and raw["schema"] == schema):
        return f"schema {shown(raw.get('schema'))}, this kernelgen reads {schema}"
    for key in ("gpu", "variants"):
        if not isinstance(raw.get(key), dict):
            return f"'{key}' must be an object, got {_kind(raw.get(key))}" if key in raw else f"missing '{key}'"
    return gpu_problem(raw["gpu"])


def gpu_problem(raw: dict[str, Any]) -> str | None:
    for name, kind, required in GPU_FIELDS:
        if name not in raw:
            if required:
                return f"gpu: missing '{name}'"
            continue
        value = raw[name]
        ok = _is_int(value) and 0 <= value < 1 << 31 if kind is int else isinstance(value, str)
        if not ok:
            return f"gpu.{name} must be {'a non-negative integer' if kind is int else 'a string'}, got {shown(value)}"
    return None


def launch_id_problem(lid: Any) -> str | None:
    if not isinstance(lid, str):
        return f"launch id must be a string, got {_kind(lid)}"
    try:
        Launch.from_id(lid)
    except ValueError:
        return f"{_quoted(lid)} is not a launch id like {ID_EXAMPLE}"
    return None


def _bounds_problem(bounds: list[Any], field: str, what: str) -> str | None:
    """Positive integers in strictly increasing order (`what` each one is: 'bucket' or 'bound')."""
    for i, b in enumerate(bounds):
        if not _positive_int(b):
            return f"{field}[{i}]: {what} {shown(b)} must be a positive integer (at most 2^62)"
    for a, b in zip(bounds, bounds[1:]):
        if b <= a:
            return f"{field}: {what}s must increase, got {a} then {b}"
    return None


def _microseconds(value: Any) -> bool:
    return (isinstance(value, float) and 0 <= value < math.inf) or (_is_int(value) and 0 <= value < 1 << 53)


def _buckets_problem(buckets: Any) -> str | None:
    if not isinstance(buckets, list):
        return f"buckets must be a list of integers, got {_kind(buckets)}"
    if not buckets:
        return "buckets is empty"
    return _bounds_problem(buckets, "buckets", "bucket")


def _timing_problem(lid: str, per_bucket: Any) -> str | None:
    where = f"timings_us[{_quoted(lid)}]"
    if not isinstance(per_bucket, dict):
        return f"{where} must be an object of bucket -> microseconds, got {_kind(per_bucket)}"
    for b, us in per_bucket.items():
        try:
            bucket = int(b)
        except ValueError:
            return f"{where}: bucket {_quoted(b)} is not an integer"
        if bucket < 1:
            return f"{where}: bucket {_quoted(b)} must be positive"
        if not _microseconds(us):
            return f"{where}[{_quoted(b)}]: {shown(us)} must be a non-negative number of microseconds"
    return None


def _timings_problem(timings: Any) -> str | None:
    if not isinstance(timings, dict):
        return f"timings_us must be an object, got {_kind(timings)}"
    for lid, per_bucket in timings.items():
        why = launch_id_problem(lid)
        if why:
            return f"timings_us: {why}"
        why = _timing_problem(lid, per_bucket)
        if why:
            return why
    return None


def _choice_problem(choice: Any, buckets: list[int], failures: dict[str, Any]) -> str | None:
    """Non-empty [bound, launch id] pairs, bounds increasing, each a bucket of the record (the last may lie
    above them all: it serves every larger count), no route to a configuration recorded as failed."""
    if not isinstance(choice, list):
        return f"choice must be a list of [bound, launch id] pairs, got {_kind(choice)}"
    if not choice:
        return "choice is empty (no route: re-tune the variant)"
    for i, pair in enumerate(choice):
        if not (isinstance(pair, list) and len(pair) == 2):
            return f"choice[{i}] must be a [bound, launch id] pair, got {shown(pair)}"
        why = launch_id_problem(pair[1])
        if why:
            return f"choice[{i}]: {why}"
    bounds = [b for b, _ in choice]
    why = _bounds_problem(bounds, "choice", "bound")
    if why:
        return why
    known = set(buckets)
    for i, (b, lid) in enumerate(choice):
        if b not in known and not (i == len(choice) - 1 and b > buckets[-1]):
            return f"choice[{i}]: bound {b} is not one of the record's buckets {tuple(buckets)}"
        if lid in failures:
            return f"choice[{i}]: {lid} is recorded as failed ({shown(failures[lid], 80)})"
    return None


def _code_problem(code: Any) -> str | None:
    """code: instance id -> the key of the code it timed (strings; ids that parse, without launch options)."""
    if not isinstance(code, dict):
        return f"code must be an object, got {_kind(code)}"
    for iid, key in code.items():
        if not isinstance(key, str):
            return f"code[{shown(iid)}] must be a string, got {_kind(key)}"
        why = launch_id_problem(iid)
        if why:
            return f"code: {why}"
    return None


def entry_problem(raw: Any) -> str | None:
    """Why one entry of a record file's `variants` cannot be used, whatever the variant (None: it can)."""
    if not isinstance(raw, dict):
        return f"entry must be an object, got {_kind(raw)}"
    for key in REQUIRED:
        if key not in raw:
            return f"missing '{key}'"
    if not isinstance(raw["variant"], str):
        return f"variant must be a string, got {_kind(raw['variant'])}"
    why = _code_problem(raw["code"])
    if why:
        return why
    for key in OPTIONAL_OBJECTS:
        if not isinstance(raw.get(key, {}), dict):
            return f"{key} must be an object, got {_kind(raw[key])}"
    failures = raw.get("failures", {})
    if not all(isinstance(v, str) for v in failures.values()):
        return "failures must map launch ids to messages (strings)"
    return (_buckets_problem(raw["buckets"]) or _timings_problem(raw["timings_us"])
            or _choice_problem(raw["choice"], raw["buckets"], failures))


def routes_problem(v: Variant, choice: tuple[tuple[int, str], ...]) -> str | None:
    """Why the chosen launch ids cannot run variant v: the first launch guard a route breaks (the variant's
    own guards are the spec's business, reported where the spec sets them)."""
    members = [m for _, m in v.members] if isinstance(v, Group) else [v]
    for i, (bound, lid) in enumerate(choice):
        broken = [g for m in members for g in violations(m.with_launch(Launch.from_id(lid))) if g.launch]
        if broken:
            return f"choice[{i}]: {lid} (N <= {bound}) cannot run {v.name}: {broken[0].message} [guard {broken[0].id}]"
    return None
