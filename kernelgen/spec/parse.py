"""Parse a YAML spec into frozen Variants; every error names file:line:col and a fix."""
from __future__ import annotations

import difflib
import itertools
import math
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .. import resources
from ..errors import SpecError
from .variant import (
    AXES,
    FAMILY,
    LAUNCH_FLAGS,
    LAUNCH_KEYS,
    Launch,
    Variant,
    short_name,
)
from .yamlsrc import MAX_SPEC_BYTES, Located, load_yaml, quote, where_in_text

TOP_KEYS = ("family", "name", "description", "defaults", "matrix", "overrides", "variants", "tune")
# The tuner's parameters a `tune:` section may set (kernelgen.tune.space declares them), and buckets.
TUNE_KEYS = ("threads_per_token", "vec", "block_threads", "prefetch", "pdl", "loop", "buckets")
VARIANT_KEYS = ("name", *AXES, "launch")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RESERVED = re.compile(r"__|_[A-Z]")  # identifiers C++ reserves for the implementation
_CPP_KEYWORDS = frozenset(
    "alignas alignof and asm auto bool break case catch char class const constexpr continue decltype default delete "
    "do double else enum explicit export extern false float for friend goto if inline int long mutable namespace new "
    "noexcept not nullptr operator or private protected public register return short signed sizeof static struct "
    "switch template this throw true try typedef typeid typename union unsigned using virtual void volatile while "
    "xor".split())
# Lower bounds checked at parse time; real limits are guards (they say what to choose instead).
_MINIMUM = {"head_dim": 1, "rope_dim": 0, "page_size": 1}
# Limits on what one spec may ask for, checked before anything is expanded: `list` and `check` stay fast,
# and names stay well inside the 255-byte file-name limit once the build adds its prefixes and hashes.
MAX_VARIANTS = 4096  # per spec: matrix product plus listed variants
MAX_NAME_LENGTH = 100  # characters of a spec or variant name


def _kind(value: object) -> str:
    """A value's YAML kind in words, for "must be a mapping, got ..." messages."""
    if value is None:
        return "nothing (an empty value)"
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "true/false", int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


def _identifier_problem(name: object) -> str | None:
    if not isinstance(name, str):
        return f"must be a string, got {quote(name)}"
    if len(name) > MAX_NAME_LENGTH:
        return (f"{quote(name)} is {len(name)} characters, over the limit of {MAX_NAME_LENGTH} "
                "(MAX_NAME_LENGTH); shorten it")
    if not _IDENT.match(name):
        return f"{quote(name)} must be a C identifier (letters, digits, _; not starting with a digit)"
    if name in _CPP_KEYWORDS or _RESERVED.match(name) or "__" in name:
        return f"{quote(name)} is a C++ keyword or reserved identifier; choose another"
    return None


@dataclass(frozen=True)
class Spec:
    name: str
    path: str
    description: str
    variants: tuple[Variant, ...]
    tune: tuple[tuple[str, tuple[object, ...]], ...] = ()  # the `tune:` section: parameter -> candidate values

    def tune_overrides(self) -> dict[str, tuple[object, ...]]:
        return {k: v for k, v in self.tune if k != "buckets"}

    def tune_buckets(self) -> tuple[int, ...] | None:
        return next((tuple(int(b) for b in v) for k, v in self.tune if k == "buckets"), None)  # type: ignore[call-overload]

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        hint = _did_you_mean(name, [v.name for v in self.variants])
        raise SpecError(f"{self.path}: no variant named {quote(name)}{hint}; `kernelgen list {self.path}` shows them")


def _did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    """A suggestion for a typo; also matches the leading part of a name ('fp6' -> fp8_e4m3)."""
    def score(choice: str) -> tuple[float, int]:
        whole = difflib.SequenceMatcher(None, str(word), choice).ratio()
        head = difflib.SequenceMatcher(None, str(word), choice.split("_")[0]).ratio()
        prefix = len(os.path.commonprefix([str(word), choice]))  # ties: the longer shared start ('_p65' -> '_p64')
        return max(whole, head), prefix

    if len(str(word)) > MAX_NAME_LENGTH:  # no name is that long, and difflib's time grows with the length
        return ""
    best = max((str(c) for c in choices), key=score, default=None)
    return f" (did you mean {best}?)" if best is not None and score(best)[0] >= 0.6 else ""


def _fail(src: Located, path: tuple[Any, ...], msg: str, at_key: bool = False) -> SpecError:
    where = src.key_at(path) if at_key else src.at(path)
    return SpecError(f"{where}: {msg}")


def _check_keys(src: Located, path: tuple[Any, ...], table: dict[str, Any], allowed: tuple[str, ...], what: str) -> None:
    for key in table:
        if key not in allowed:
            hint = _did_you_mean(str(key), allowed)
            raise _fail(src, path + (key,), f"unknown {what} key {quote(key)}{hint}; allowed: {', '.join(allowed)}", True)


def _mapping(src: Located, path: tuple[Any, ...], value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(src, path, f"{what} must be a mapping (key: value lines), got {_kind(value)}")
    return value


def _axis_value(src: Located, path: tuple[Any, ...], axis: str, value: Any) -> Any:
    kind, choices = AXES[axis]
    type_ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not type_ok:
        expected = {int: "an integer", bool: "true or false", str: "a name"}[kind]
        raise _fail(src, path, f"{axis} must be {expected}, got {quote(value)}")
    if axis in _MINIMUM and value < _MINIMUM[axis]:
        raise _fail(src, path, f"{axis} must be at least {_MINIMUM[axis]}, got {value}")
    if choices is not None and value not in choices:
        hint = _did_you_mean(value, choices)  # type: ignore[arg-type]
        allowed = ", ".join(map(str, choices))
        raise _fail(src, path, f"{axis} {quote(value)} is not one of {allowed}{hint}")
    return value


def _launch(src: Located, path: tuple[Any, ...], raw: Any) -> dict[str, int | bool]:
    """A (possibly partial) launch table; layers merge key by key, see _layer."""
    table = _mapping(src, path, raw, "launch")
    _check_keys(src, path, table, LAUNCH_KEYS, "launch")
    for key, value in table.items():
        if key in LAUNCH_FLAGS:
            if not isinstance(value, bool):
                raise _fail(src, path + (key,), f"launch.{key} must be true or false, got {quote(value)}")
        elif not isinstance(value, int) or isinstance(value, bool) or value <= 0 or value > 4096:
            raise _fail(src, path + (key,), f"launch.{key} must be a positive integer up to 4096, got {quote(value)}")
    return dict(table)


def _layer(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """Settings of `top` over `base`; a partial launch table overrides only the keys it names."""
    merged = {**base, **top}
    if "launch" in base and "launch" in top:
        merged["launch"] = {**base["launch"], **top["launch"]}
    return merged


def _origins(src: Located, path: tuple[Any, ...], table: dict[str, Any]) -> dict[str, str]:
    """Where each setting of one layer is written: axis (or launch) -> file:line:col of its value."""
    return {key: str(src.at(path + (key,))) for key in table if key != "name"}


def _axes(src: Located, path: tuple[Any, ...], table: dict[str, Any]) -> dict[str, Any]:
    """Validate one layer of axis settings (defaults, a matrix point, overrides)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key == "launch":
            out[key] = _launch(src, path + (key,), value)
        elif key != "name":
            out[key] = _axis_value(src, path + (key,), key, value)
    return out


def _matrix_size(src: Located, matrix: dict[str, Any]) -> int:
    """How many variants the matrix multiplies out to, from the list lengths alone (nothing expanded)."""
    _check_keys(src, ("matrix",), matrix, tuple(AXES), "matrix")
    if not matrix:
        raise _fail(src, ("matrix",), "matrix is empty: list at least one axis, e.g. store: [fp8_e4m3, bf16]")
    for axis, values in matrix.items():
        if not isinstance(values, list) or not values:
            raise _fail(src, ("matrix", axis),
                        f"matrix.{axis} must be a non-empty list of values, e.g. [{axis_example(axis)}]")
    size = math.prod(len(values) for values in matrix.values())
    if size > MAX_VARIANTS:
        shape = " x ".join(f"{len(values)} {axis}" for axis, values in matrix.items())
        raise _fail(src, ("matrix",), f"matrix expands to {size} variants ({shape}), over the limit of "
                                      f"{MAX_VARIANTS} (MAX_VARIANTS); shorten its lists or split the spec")
    return size


def _matrix_points(src: Located, matrix: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """The matrix's points with where each value is written; call _matrix_size first, which bounds how
    many there are."""
    axes: list[tuple[str, list[Any]]] = []
    where: dict[tuple[str, Any], str] = {}
    for axis, values in matrix.items():
        path = ("matrix", axis)
        first: dict[Any, int] = {}  # value -> index: a list of thousands stays linear to check
        for i, value in enumerate(values):
            value = _axis_value(src, path + (i,), axis, value)
            if value in first:
                raise _fail(src, path + (i,), f"matrix.{axis} lists {quote(value)} twice")
            first[value] = i
            where[(axis, value)] = str(src.at(path + (i,)))
        axes.append((axis, list(first)))
    points = []
    for combo in itertools.product(*(vals for _, vals in axes)):
        point = dict(zip((a for a, _ in axes), combo))
        points.append((point, {a: where[(a, value)] for a, value in point.items()}))
    return points


def axis_example(axis: str) -> str:
    kind, choices = AXES[axis]
    if choices:
        return ", ".join(map(str, choices[:2]))
    return {int: "64, 128", bool: "true, false"}[kind]


def _make(src: Located, spec_name: str, name: Any, settings: dict[str, Any], path: tuple[Any, ...],
          name_path: tuple[Any, ...] | None = None, origins: dict[str, str] | None = None) -> Variant:
    problem = _identifier_problem(name)
    if problem:
        raise _fail(src, name_path or path, f"variant name {problem}")
    settings = {**settings, "launch": Launch(**settings.get("launch", {}))}
    return Variant(name=name, spec_name=spec_name, origin=str(src.at(path)),
                   origins=tuple(sorted((origins or {}).items())), **settings)


def parse_spec(text: str, file: str) -> Spec:
    src = load_yaml(text, file)
    top = _mapping(src, (), src.data, "a spec")
    _check_keys(src, (), top, TOP_KEYS, "top-level")
    family = top.get("family")
    if family != FAMILY:
        raise _fail(src, ("family",), f"family must be '{FAMILY}', got {quote(family)}")
    spec_name = top.get("name")
    problem = _identifier_problem(spec_name)
    if problem:
        raise _fail(src, ("name",), f"name {problem}; it prefixes generated variant names")
    defaults_raw = _mapping(src, ("defaults",), top.get("defaults", {}), "defaults")
    _check_keys(src, ("defaults",), defaults_raw, VARIANT_KEYS[1:], "defaults")
    defaults = _axes(src, ("defaults",), defaults_raw)
    default_origins = _origins(src, ("defaults",), defaults_raw)
    variants: list[Variant] = []
    matrix = _mapping(src, ("matrix",), top["matrix"], "matrix") if "matrix" in top else {}
    _check_count(src, top, _matrix_size(src, matrix) if "matrix" in top else 0)
    if matrix:
        for point, where in _matrix_points(src, matrix):
            name = "_".join([spec_name, *(short_name(a, v) for a, v in point.items())])
            variants.append(_make(src, spec_name, name, _layer(defaults, point), ("matrix",),
                                  origins={**default_origins, **where}))
    variants = _apply_overrides(src, top, variants, spec_name, tuple(matrix))
    variants += _listed(src, top, defaults, spec_name, default_origins)
    if not variants:
        raise _fail(src, (), "spec defines no variants: add a 'matrix:' or a 'variants:' list")
    _check_unique(src, variants)
    return Spec(spec_name, file, str(top.get("description", "")), tuple(variants), _tune_section(src, top))


def _check_count(src: Located, top: dict[str, Any], matrix_size: int) -> None:
    """Matrix plus listed variants stay within MAX_VARIANTS; counted before any variant is made."""
    listed = top.get("variants")
    count = matrix_size + (len(listed) if isinstance(listed, list) else 0)
    if count > MAX_VARIANTS:
        where = ("variants",) if listed else ("matrix",)
        raise _fail(src, where, f"spec defines {count} variants ({matrix_size} from the matrix), over the limit of "
                                f"{MAX_VARIANTS} (MAX_VARIANTS); split it into several specs")


def _tune_section(src: Located, top: dict[str, Any]) -> tuple[tuple[str, tuple[object, ...]], ...]:
    """`tune:` narrows or extends the search space: each key a non-empty list of candidate values."""
    raw = _mapping(src, ("tune",), top.get("tune", {}), "tune")
    _check_keys(src, ("tune",), raw, TUNE_KEYS, "tune")
    out = []
    for key, values in raw.items():
        path = ("tune", key)
        if not isinstance(values, list) or not values:
            raise _fail(src, path, f"tune.{key} must be a non-empty list of values")
        want_bool = key in LAUNCH_FLAGS
        for i, value in enumerate(values):
            ok = isinstance(value, bool) if want_bool else (isinstance(value, int) and not isinstance(value, bool)
                                                            and 0 < value <= (1 << 24))
            if not ok:
                kind = "true or false" if want_bool else "a positive integer up to 16777216"
                raise _fail(src, path + (i,), f"tune.{key} values must be {kind}, got {quote(value)}")
        if key == "buckets" and values != sorted(set(values)):
            raise _fail(src, path, "tune.buckets must be increasing token counts without repeats, e.g. [1, 16, 256, 4096]")
        out.append((key, tuple(values)))
    return tuple(out)


def _apply_overrides(src: Located, top: dict[str, Any], variants: list[Variant], spec_name: str,
                     naming_axes: tuple[str, ...] = ()) -> list[Variant]:
    raw = _mapping(src, ("overrides",), top.get("overrides", {}), "overrides")
    by_name = {v.name: v for v in variants}
    for name, table in raw.items():
        path = ("overrides", name)
        if name not in by_name:
            hint = _did_you_mean(str(name), list(by_name))
            raise _fail(src, path, f"override for unknown matrix variant {quote(name)}{hint}", True)
        table = _mapping(src, path, table, f"overrides.{name}")
        _check_keys(src, path, table, VARIANT_KEYS[1:], "override")
        old = by_name[name]
        layer = _axes(src, path, table)
        for axis in naming_axes:  # the generated name spells these values: an override would make it lie
            if axis in layer and layer[axis] != getattr(old, axis):
                raise _fail(src, path + (axis,), f"overrides.{name} changes {axis} to {quote(layer[axis])}, but {axis} "
                            f"is a matrix axis that names this variant ({short_name(axis, getattr(old, axis))}); "
                            "change the matrix, or list the variant under variants: with its own name", True)
        inherited = {a: getattr(old, a) for a in AXES} | {"launch": {k: n for k, n in asdict(old.launch).items() if n}}
        by_name[name] = _make(src, spec_name, name, _layer(inherited, layer), path,
                              origins={**dict(old.origins), **_origins(src, path, table)})
    return list(by_name.values())


def _listed(src: Located, top: dict[str, Any], defaults: dict[str, Any], spec_name: str,
            default_origins: dict[str, str] | None = None) -> list[Variant]:
    raw = top.get("variants", [])
    if not isinstance(raw, list):
        raise _fail(src, ("variants",), "variants must be a list of mappings, each with a name")
    out = []
    for i, item in enumerate(raw):
        path = ("variants", i)
        table = _mapping(src, path, item, f"variants[{i}]")
        _check_keys(src, path, table, VARIANT_KEYS, "variant")
        if "name" not in table:
            raise _fail(src, path, "each listed variant needs a 'name:'")
        out.append(_make(src, spec_name, table["name"], _layer(defaults, _axes(src, path, table)), path,
                         path + ("name",), {**(default_origins or {}), **_origins(src, path, table)}))
    return out


def _check_unique(src: Located, variants: list[Variant]) -> None:
    seen: dict[str, Variant] = {}
    for v in variants:
        if v.name in seen:
            raise SpecError(f"{v.origin}: duplicate variant name {quote(v.name)} (first defined at {seen[v.name].origin})")
        seen[v.name] = v


def shipped_specs() -> list[Spec]:
    return [load_spec(p) for p in resources.shipped_specs()]


def shipped_variants() -> list[Variant]:
    """Every variant of every spec that ships with kernelgen."""
    return [v for spec in shipped_specs() for v in spec.variants]


def load_spec(path: str | Path) -> Spec:
    """Read a spec by path, or by the name of a shipped spec (e.g. 'dsv4_indexer')."""
    resolved = resources.find_spec(str(path))
    return parse_spec(_read_spec(resolved, str(path)), str(path))


def _read_spec(resolved: Path, shown: str) -> str:
    """The text of a spec file, reading at most one byte past MAX_SPEC_BYTES whatever the file's size."""
    try:
        with resolved.open("rb") as stream:
            data = stream.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"{shown}: cannot read spec: {exc.strerror or exc}") from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(f"{shown}:1:1: spec file is over the limit of {MAX_SPEC_BYTES} bytes (1 MiB, "
                        "MAX_SPEC_BYTES); a spec describes variants, not data: split it")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        good = data[:exc.start].decode("utf-8")
        where = where_in_text(good, len(good), shown)
        raise SpecError(f"{where}: spec is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                        "save it as UTF-8") from None
