"""The checks under every section of a spec: its keys and mappings, axis values (with their other
spellings, for "did you mean"), launch tables, and the variant a checked set of settings makes; every error
names file:line:col and a fix."""
from __future__ import annotations

import difflib
import os
import re
from typing import Any, Iterator

from ..errors import SpecError
from .formats import FORMATS
from .norms import NORMS
from .ropes import ROPE_STYLES, TEMPERATURES
from .launchparams import BY_NAME
from .names import MAX_NAME_LENGTH, _symbol_name_problem
from .variant import AXES, LAUNCH_FLAGS, LAUNCH_KEYS, Launch, Variant
from .yamlsrc import Located, quote

# The range of each integer axis checked at parse time: the generated code holds these as C++ `int` constants,
# so nothing past 2**31 - 1 reaches the guards, which hold the real limits (and say what to choose instead).
INT_MAX = 2 ** 31 - 1
INT_RANGES = {"head_dim": (1, INT_MAX), "heads": (1, INT_MAX), "x_head_stride": (0, INT_MAX), "rope_dim": (0, INT_MAX), "page_size": (1, INT_MAX)}
# Other spellings of axis values (torch, paper and library names), for "did you mean" hints; keys are lower
# case with '_' for '-' and ' '. Each value keeps its one spelling, so names, keys and records have one form.
# None marks a spelling of something the axis does not take (fp16 weights, fp32 stores): no near value is
# suggested for it.
_DTYPE_ALIASES = {"float16": "fp16", "half": "fp16", "f16": "fp16", "float32": "fp32", "float": "fp32",
                  "f32": "fp32", "single": "fp32", "bfloat16": "bf16", "bfloat": "bf16"}
_NOT_STORES = dict.fromkeys(("fp32", "float32", "float", "f32"))
ALIASES: dict[str, dict[str, str | None]] = {
    "input_dtype": dict(_DTYPE_ALIASES),
    "weight_dtype": {k: None if v == "fp16" else v for k, v in {**_DTYPE_ALIASES, "fp16": "fp16"}.items()},
    "store": {**{alias: name for name, fmt in FORMATS.items() for alias in fmt.aliases}, **_NOT_STORES},
    "norm": {alias: name for name, kind in NORMS.items() for alias in kind.aliases},
    "rope_style": {alias: name for name, style in ROPE_STYLES.items() for alias in style.aliases},
    "temperature": {alias: name for name, t in TEMPERATURES.items() for alias in t.aliases},
    "rope_place": {"front": "head", "start": "head", "first": "head", "back": "tail", "end": "tail", "last": "tail"},
}


def _kind(value: object) -> str:
    """A value's YAML kind in words, for "must be a mapping, got ..." messages."""
    if value is None:
        return "nothing (an empty value)"
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "true/false", int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


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


def _axis_value(src: Located, path: tuple[Any, ...], axis: str, value: Any, shown: str = "") -> Any:
    """value checked as a value of axis; messages name it `shown` (a model key such as kv_store), default the axis."""
    kind, choices = AXES[axis]
    key = shown or axis
    type_ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if kind is tuple:  # a list of positive integers (rope_sections: the config's mrope_section, e.g. [16, 24, 24])
        items = value if isinstance(value, (list, tuple)) else None
        if items is None or not items or any(not isinstance(i, int) or isinstance(i, bool) or not 1 <= i <= INT_MAX
                                             for i in items):
            raise _fail(src, path, f"{key} must be a list of positive integers (e.g. [16, 24, 24]), got {quote(value)}")
        return tuple(items)
    if kind is int:
        lo, hi = INT_RANGES[axis]
        if not (type_ok and lo <= value <= hi):
            raise _fail(src, path, f"{key} must be an integer from {lo} to {hi}, got {quote(value)}")
    elif choices is not None and not type_ok:
        hint = " (YAML reads an unquoted no, off or false as false: did you mean none?)" \
            if (value is None or value is False) and "none" in choices else ""
        raise _fail(src, path, f"{key} must be one of {', '.join(map(str, choices))}, got {quote(value)}{hint}")
    elif not type_ok:
        raise _fail(src, path, f"{key} must be true or false, got {quote(value)}")
    if choices is not None and value not in choices:
        allowed = ", ".join(map(str, choices))
        raise _fail(src, path, f"{key} {quote(value)} is not one of {allowed}{_value_hint(axis, value)}")
    return value


def _value_hint(axis: str, value: str) -> str:
    """'did you mean' for a value of a closed axis: another spelling of it (float16 -> fp16), else a near miss
    of a value or of another spelling (fp6 -> fp8_e4m3, flaot16 -> fp16)."""
    choices = [str(c) for c in AXES[axis][1] or ()]
    word = re.sub(r"[-\s]", "_", value.strip().lower()).removeprefix("torch.")
    aliases = ALIASES.get(axis, {})
    if word in choices:
        return f" (did you mean {word}?)"
    if word in aliases:
        return f" (did you mean {aliases[word]}?)" if aliases[word] else ""
    hint = _did_you_mean(value, choices)
    if hint or len(word) > MAX_NAME_LENGTH:
        return hint
    near = difflib.get_close_matches(word, list(aliases), n=1, cutoff=0.8)
    return f" (did you mean {aliases[near[0]]}?)" if near and aliases[near[0]] else ""


def _launch(src: Located, path: tuple[Any, ...], raw: Any) -> dict[str, int | bool]:
    """A (possibly partial) launch table; layers merge key by key, see _layer."""
    table = _mapping(src, path, raw, "launch")
    _check_keys(src, path, table, LAUNCH_KEYS, "launch")
    for key, value in table.items():
        if key in LAUNCH_FLAGS:
            if not isinstance(value, bool):
                raise _fail(src, path + (key,), f"launch.{key} must be true or false, got {quote(value)}")
        elif not isinstance(value, int) or isinstance(value, bool) or value <= 0 or value > BY_NAME[key].limit:
            raise _fail(src, path + (key,),
                        f"launch.{key} must be a positive integer up to {BY_NAME[key].limit}, got {quote(value)}")
    return dict(table)


def _make(src: Located, spec_name: str, name: Any, settings: dict[str, Any], path: tuple[Any, ...],
          name_path: tuple[Any, ...] | None = None, origins: dict[str, str] | None = None) -> Variant:
    # A matrix variant's name is the spec's name and its values: renaming the spec is the fix there.
    fix = "rename the variant" if name_path else "rename the spec (its name starts each matrix variant's name)"
    problem = _symbol_name_problem(name, fix)
    if problem:
        raise _fail(src, name_path or path, f"variant name {problem}")
    settings = {**settings, "launch": Launch(**settings.get("launch", {}))}
    return Variant(name=name, spec_name=spec_name, origin=str(src.at(path)),
                   origins=tuple(sorted((origins or {}).items())), **settings)


def _entries(src: Located, top: dict[str, Any], section: str, keys: tuple[str, ...], what: str,
             each: str) -> Iterator[tuple[tuple[Any, ...], dict[str, Any], str]]:
    """(path, table, name) of each entry of a `groups:` or `models:` list (what: group or model), its keys and
    its name checked."""
    raw = top.get(section, [])
    if not isinstance(raw, list):
        raise _fail(src, (section,), f"{section} must be a list of mappings, {each}")
    for i, item in enumerate(raw):
        path = (section, i)
        table = _mapping(src, path, item, f"{section}[{i}]")
        _check_keys(src, path, table, keys, what)
        yield path, table, _entry_name(src, path, table, what)


def _entry_name(src: Located, path: tuple[Any, ...], table: dict[str, Any], what: str) -> str:
    """The name of a `groups:` or `models:` entry (what: group or model): present, and fit to name C++ symbols."""
    if "name" not in table:
        raise _fail(src, path, f"each {'launch group' if what == 'group' else what} needs a 'name:'")
    name = table["name"]
    problem = _symbol_name_problem(name, f"rename the {what}")
    if problem:
        raise _fail(src, path + ("name",), f"{what} name {problem}")
    return name
