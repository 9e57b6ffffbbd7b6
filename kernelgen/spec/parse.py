"""Parse a YAML spec into frozen Variants; every error names file:line:col and a fix.

The spec's sections are read here; what they share (keys, axis values, launch tables, making a variant) is in
settings.py, the rules for names in names.py, and the `models:` section in models.py."""
from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from .. import resources
from ..errors import SpecError
from .group import ROLES, Group
from .launchparams import IN_SPACE_ORDER
from .models import MODEL_DEFAULTS, MODEL_KEYS, _models
from .names import MAX_NAME_LENGTH, _generated_by, _identifier_problem
from .settings import (
    ALIASES,
    INT_MAX,
    INT_RANGES,
    _axis_value,
    _check_keys,
    _did_you_mean,
    _entries,
    _fail,
    _kind,
    _launch,
    _make,
    _mapping,
)
from .variant import AXES, FAMILY, Launch, Variant, short_name
from .yamlsrc import MAX_SPEC_BYTES, Located, load_yaml, quote, where_in_text

__all__ = ["ALIASES", "GROUP_KEYS", "INT_MAX", "INT_RANGES", "MAX_NAME_LENGTH", "MAX_VARIANTS", "MODEL_DEFAULTS",
           "MODEL_KEYS", "TOP_KEYS", "TUNE_KEYS", "VARIANT_KEYS", "Spec", "axis_example", "load_spec", "parse_spec",
           "shipped_specs", "shipped_variants"]

TOP_KEYS = ("family", "name", "description", "defaults", "matrix", "overrides", "variants", "groups", "models", "tune")
# The tuner's parameters a `tune:` section may set (the launch table's space names), and buckets.
TUNE_KEYS = (*(p.tune for p in IN_SPACE_ORDER), "buckets")
_TUNE_FLAGS = frozenset(p.tune for p in IN_SPACE_ORDER if p.kind is bool)
# Launch fields the space sets through another name, and how a `tune:` section says it instead (the launch table's).
_SEARCHED_AS = {p.name: f"{p.tune} {p.searched_as}" for p in IN_SPACE_ORDER if p.tune != p.name}
_TUNE_ZERO_OK = frozenset(p.tune for p in IN_SPACE_ORDER if p.optional)  # 0 is a value of its own (resident_threads: no bound)
VARIANT_KEYS = ("name", *AXES, "launch")
# Limits on what one spec may ask for, checked before anything is expanded: `list` and `check` stay fast.
MAX_VARIANTS = 4096  # per spec: matrix product plus listed variants


@dataclass(frozen=True)
class Spec:
    name: str
    path: str
    description: str
    variants: tuple[Variant, ...]
    tune: tuple[tuple[str, tuple[object, ...]], ...] = ()  # the `tune:` section: parameter -> candidate values
    groups: tuple[Group, ...] = ()  # launch groups: members of `variants` run by one launch

    @property
    def kernels(self) -> tuple[Variant | Group, ...]:
        """What the spec builds: every variant, then every launch group."""
        return self.variants + self.groups

    def group(self, name: str) -> Group:
        return self._named(self.groups, name, "launch group")

    def kernel(self, name: str) -> Variant | Group:
        """A variant or a launch group by name."""
        return self._named(self.kernels, name, "variant or launch group")

    def tune_overrides(self) -> dict[str, tuple[object, ...]]:
        return {k: v for k, v in self.tune if k != "buckets"}

    def tune_buckets(self) -> tuple[int, ...] | None:
        return next((tuple(int(b) for b in v) for k, v in self.tune if k == "buckets"), None)  # type: ignore[call-overload]

    def variant(self, name: str) -> Variant:
        return self._named(self.variants, name, "variant")

    def _named(self, kernels: tuple[Any, ...], name: str, what: str) -> Any:
        """The one of kernels called name, or a SpecError naming the nearest one and where to see them all."""
        for k in kernels:
            if k.name == name:
                return k
        hint = _did_you_mean(name, [k.name for k in kernels])
        raise SpecError(f"{self.path}: no {what} named {quote(name)}{hint}; `kernelgen list {self.path}` shows them")


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
    return {int: "64, 128", bool: "true, false", tuple: "[16, 24, 24], [24, 20, 20]"}[kind]


def parse_spec(text: str, file: str) -> Spec:
    src = load_yaml(text, file)
    if src.data is None:  # nothing but blanks and comments
        raise SpecError(f"{file}:1:1: the spec file is empty: a spec needs family: {FAMILY}, a name and its variants "
                        "(a 'matrix:', 'variants:' or 'models:' list); specs/example.yaml shows every key")
    top = _mapping(src, (), src.data, "a spec")
    _check_keys(src, (), top, TOP_KEYS, "top-level")
    family = top.get("family")
    if family != FAMILY:
        raise _fail(src, ("family",), f"family must be '{FAMILY}', got {quote(family)}")
    spec_name = top.get("name")
    problem = _identifier_problem(spec_name, "rename the spec (its name prefixes generated variant names)")
    if problem:
        raise _fail(src, ("name",), f"name {problem}")
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
    model_variants, model_groups = _models(src, top, spec_name)
    variants += model_variants
    if not variants:
        empty = next((s for s in ("models", "variants", "matrix") if s in top), None)
        raise _fail(src, (empty,) if empty else (), "spec defines no variants: add a 'matrix:', a 'variants:' or a 'models:' list")
    _check_unique(src, variants)
    groups = _groups(src, top, variants, spec_name) + model_groups
    _check_group_names(groups, variants)
    _check_symbols(src, variants, groups, top)
    tune = _tune_section(src, top)
    promised = _promised(tune)
    if promised:
        variants = [replace(v, promises=promised) for v in variants]
        groups = tuple(replace(g, promises=promised, members=tuple((role, replace(m, promises=promised))
                                                                   for role, m in g.members)) for g in groups)
    return Spec(spec_name, file, _description(src, top), tuple(variants), tune, groups)


def _promised(tune: tuple[tuple[str, tuple[object, ...]], ...]) -> tuple[str, ...]:
    """The launch fields whose other values rest on a promise (LaunchParam.promise) that a `tune:` section makes by
    offering one of them: what its variants and groups carry as `promises`."""
    offered = dict(tune)
    return tuple(p.name for p in IN_SPACE_ORDER
                 if p.promise and any(x != p.default for x in offered.get(p.tune, ())))


GROUP_KEYS = ("name", *ROLES, "launch")


def _check_group_names(groups: tuple[Group, ...], variants: list[Variant]) -> None:
    """A group's name is taken by no variant and no other group (its symbol lives beside theirs)."""
    seen = {v.name: v.origin for v in variants}
    for g in groups:
        if g.name in seen:
            raise SpecError(f"{g.origin}: group name {quote(g.name)} is already taken ({seen[g.name]}): a group's "
                            "symbol lives beside its members'; rename it")
        seen[g.name] = g.origin


def _groups(src: Located, top: dict[str, Any], variants: list[Variant], spec_name: str) -> tuple[Group, ...]:
    """`groups:`: each a name, members by role (q, k, v: names of this spec's variants) and an optional launch."""
    by_name = {v.name: v for v in variants}
    out = []
    for path, table, name in _entries(src, top, "groups", GROUP_KEYS, "group", "each with a name and members q, k, v"):
        members = []
        for role in ROLES:
            if role not in table:
                continue
            member = table[role]
            if not isinstance(member, str):
                raise _fail(src, path + (role,), f"group member {role} must be the name of one of this spec's "
                                                 f"variants, got {_kind(member)}; a group has one member per role "
                                                 f"({', '.join(ROLES)})")
            if member not in by_name:
                hint = _did_you_mean(str(member), list(by_name))
                raise _fail(src, path + (role,), f"group member {role}: no variant named {quote(member)} in this "
                                                 f"spec{hint}; a member is one of the spec's variants")
            members.append((role, by_name[member]))
        if not members:
            raise _fail(src, path, f"group {quote(name)} has no members: name at least one of {', '.join(ROLES)} "
                                   "(each a variant of this spec)")
        launch = Launch(**_launch(src, path + ("launch",), table["launch"])) if "launch" in table else Launch()
        out.append(Group(name, tuple(members), launch, spec_name, str(src.at(path))))
    return tuple(out)


def _description(src: Located, top: dict[str, Any]) -> str:
    text = top.get("description", "")
    if not isinstance(text, str):  # `description: {a: 1}` or `description: a: b` is YAML for a mapping
        raise _fail(src, ("description",), f"description must be a string, got {_kind(text)}; write it as text, "
                                           "in quotes if it holds ': ' or starts with { or [")
    return text


def _check_symbols(src: Located, variants: list[Variant], groups: tuple[Group, ...], top: dict[str, Any]) -> None:
    """Every exported symbol is unique: no variant's or group's name is a name generated for another kernel (x_config
    is kernel x's config symbol: one library or process holding both would see two definitions of it), whether
    the kernels come from the matrix, a list, a model or a group. Blame the longer name, at its `name:` where it
    has one (a listed variant), else where the kernel is defined."""
    kernels: list[Any] = [*variants, *groups]
    where = {k.name: k.origin for k in kernels}
    listed = top.get("variants", [])
    where |= {item["name"]: str(src.at(("variants", i, "name"))) for i, item in enumerate(listed)}
    kind = {k.name: "group" if isinstance(k, Group) else "variant" for k in kernels}
    for k in kernels:
        base, what = _generated_by(k.name) or ("", "")
        if base in where:
            fix = "rename the group (or the model it comes from)" if kind[k.name] == "group" else "rename the variant"
            raise SpecError(f"{where[k.name]}: {kind[k.name]} name {quote(k.name)} clashes with {k.name}, {what} for "
                            f"{kind[base]} {quote(base)} ({where[base]}); {fix}")


def _check_count(src: Located, top: dict[str, Any], matrix_size: int) -> None:
    """Matrix, listed variants, models (three variants and a group each) and groups stay within MAX_VARIANTS
    kernels; counted before any variant is made."""
    def length(section: str) -> int:
        entries = top.get(section)
        return len(entries) if isinstance(entries, list) else 0

    listed, models, groups = length("variants"), length("models"), length("groups")
    count = matrix_size + listed + 4 * models + groups
    if count > MAX_VARIANTS:
        if not models and not groups:  # variants alone: said as it always was
            raise _fail(src, ("variants",) if listed else ("matrix",), f"spec defines {count} variants ({matrix_size} from the matrix), over the limit "
                                    f"of {MAX_VARIANTS} (MAX_VARIANTS); split it into several specs")
        where = max((("models",), 4 * models), (("groups",), groups), (("variants",), listed),
                    (("matrix",), matrix_size), key=lambda w: w[1])[0]
        parts = ", ".join(f"{n} {what}" for n, what in ((matrix_size, "from the matrix"), (listed, "listed"),
                                                         (4 * models, f"from {models} models"), (groups, "groups"))
                          if n)
        raise _fail(src, where, f"spec defines {count} kernels ({parts}), over the limit of {MAX_VARIANTS} "
                                "(MAX_VARIANTS); split it into several specs")


def _tune_section(src: Located, top: dict[str, Any]) -> tuple[tuple[str, tuple[object, ...]], ...]:
    """`tune:` narrows or extends the search space: each key a non-empty list of candidate values."""
    raw = _mapping(src, ("tune",), top.get("tune", {}), "tune")
    for key in raw:
        if key in _SEARCHED_AS:
            raise _fail(src, ("tune", key), f"tune: {key} is searched as {_SEARCHED_AS[key]}")
    _check_keys(src, ("tune",), raw, TUNE_KEYS, "tune")
    out = []
    for key, values in raw.items():
        path = ("tune", key)
        if not isinstance(values, list) or not values:
            raise _fail(src, path, f"tune.{key} must be a non-empty list of values")
        want_bool, least = key in _TUNE_FLAGS, 0 if key in _TUNE_ZERO_OK else 1
        for i, value in enumerate(values):
            ok = isinstance(value, bool) if want_bool else (isinstance(value, int) and not isinstance(value, bool)
                                                            and least <= value <= (1 << 24))
            if not ok:
                kind = "true or false" if want_bool else \
                    f"a{' non-negative' if least == 0 else ' positive'} integer up to 16777216"
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
