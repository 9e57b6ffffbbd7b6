"""Pure tier, property: the `models:` and `groups:` language under hostile edits (issue 35 item 7).

A spec built from a valid model/group spec by mutating keys and values (nulls, wrong types, numbers out of
range, unknown keys, names that clash with each other or with a generated `_config` symbol, group members that
are lists, mappings, numbers or unknown names) must either

  (a) be refused by parse_spec with one SpecError line `t.yaml:<line>:<col>: ...` (no other exception), or
  (b) give a Spec whose every variant has every axis value inside AXES (type, closed set, no None) and whose
      variant and group names plus their `_config` twins are all distinct; and then precheck / group_precheck
      and render_variant(k, check=True) of every kernel either succeed or raise GuardViolation.

And a null for a model key with a default means what leaving the key out means, or is refused.

Hypothesis draws the edits; explicit regression cases pin each class. Example counts are fixed here (about 10 s
on a 2-core machine when the contract holds): kernelgen/knobs.py has no knob for fuzz examples, and this file
reads the environment only through knobs.
"""
from __future__ import annotations

import copy
import re
from datetime import timedelta
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import note as hypothesis_note
from hypothesis import strategies as st

from kernelgen import knobs
from kernelgen import resources
from kernelgen.codegen.guards import group_precheck, precheck
from kernelgen.codegen.render import render_variant
from kernelgen.errors import GuardViolation, SpecError
from kernelgen.spec.group import ROLES, Group
from kernelgen.spec.parse import MODEL_KEYS, Spec, parse_spec
from kernelgen.spec.settings import INT_RANGES
from kernelgen.spec.variant import AXES, FAMILY, Variant

pytestmark = pytest.mark.pure

FILE = "t.yaml"
POSITION = re.compile(r"^t\.yaml:([1-9][0-9]*):([1-9][0-9]*): \S")
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|File \"[^\"]*\", line [0-9]+")
REQUIRED = ("num_q_heads", "num_kv_heads", "head_dim")
# The model keys that have a default (README, models.py): every key but the name and the three required ones.
DEFAULTED = tuple(k for k in MODEL_KEYS if k not in ("name", *REQUIRED))
# What each model key sets (its values are that axis's); keys not listed here take generic values.
KEY_AXIS = {"num_q_heads": "heads", "num_kv_heads": "heads", "head_dim": "head_dim", "v_head_dim": "head_dim",
            "rotary_dim": "rope_dim", "rope_style": "rope_style", "rope_table": "rope_table", "qk_norm": "norm",
            "norm_order": "norm_order", "q_store": "store", "kv_store": "store", "k_store": "store",
            "v_store": "store", "page_size": "page_size", "kv_layout": "kv_layout", "input_dtype": "input_dtype",
            "weight_dtype": "weight_dtype", "kv_pool": "kv_pool"}
LAUNCH_KEYS = ("threads_per_token", "tokens_per_block", "vec", "prefetch", "pdl", "loop")

SHIPPED_MODELS: list[dict[str, Any]] = yaml.safe_load(
    (resources.spec_dir() / "attention_prep.yaml").read_text())["models"]
# A hand-written launch group over listed variants (the attention_prep shape: Q dense, K and V paged).
GROUP_DEFAULTS = {"head_dim": 128, "rope_dim": 128, "rope_place": "head", "rope_style": "neox",
                  "rope_table": "halves", "page_size": 16}
GROUP_VARIANTS = [{"name": "vq", "heads": 8, "slots": "token", "page_size": 1},
                  {"name": "vk", "heads": 2},
                  {"name": "vv", "heads": 2, "rope_dim": 0, "norm": "none"}]
GROUPS = [{"name": "g", "q": "vq", "k": "vk", "v": "vv"}, {"name": "g_kv", "k": "vk", "v": "vv"}]


def note(text: str) -> None:
    """hypothesis.note inside a fuzz example (shown with a failure), nothing in a plain test."""
    try:
        hypothesis_note(text)
    except Exception:  # outside a hypothesis test
        pass


# -- the contract ---------------------------------------------------------------------------------------------------

def _dumper() -> type[yaml.SafeDumper]:
    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(type(None), lambda d, _: d.represent_scalar("tag:yaml.org,2002:null", "~"))
    return Dumper


DUMPER = _dumper()


def dump(data: object, flow: bool | None = False) -> str:
    """Spec data as YAML text (nulls written `~`, as people write them)."""
    return yaml.dump(data, Dumper=DUMPER, sort_keys=False, default_flow_style=flow, allow_unicode=True, width=10 ** 6)


def assert_one_line(message: str, text: str) -> None:
    """A SpecError's message: one line, `t.yaml:<line>:<col>: what`, pointing into the file, nothing else."""
    assert len(message.splitlines()) == 1 and "\n" not in message and "\r" not in message, repr(message)
    found = POSITION.match(message)
    assert found, f"not `{FILE}:<line>:<col>: ...`: {message!r}"
    assert int(found.group(1)) <= max(1, len(text.splitlines()) + 1), f"line past the end of the file: {message!r}"
    assert not TRACEBACK.search(message), f"traceback-like text: {message!r}"


def _axis_problems(v: Variant) -> list[str]:
    out = []
    fields = v.math_fields()
    for axis, (kind, choices) in AXES.items():
        value = fields.get(axis)
        if value is None:
            out.append(f"{v.name}.{axis} is None")
            continue
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            out.append(f"{v.name}.{axis} = {value!r} is not a {kind.__name__}")
        elif choices is not None and value not in choices:
            out.append(f"{v.name}.{axis} = {value!r} is not one of {choices}")
        elif axis in INT_RANGES and not INT_RANGES[axis][0] <= value <= INT_RANGES[axis][1]:
            out.append(f"{v.name}.{axis} = {value!r} is outside {INT_RANGES[axis]}")
    return out


def assert_kernels_checkable(spec: Spec) -> None:
    """Guards and render of every kernel: success or GuardViolation; any other exception propagates."""
    for k in spec.kernels:
        note(f"kernel {k.name}")
        with_guard = group_precheck if isinstance(k, Group) else precheck
        try:
            with_guard(k)  # type: ignore[arg-type]
        except GuardViolation:
            pass
        try:
            render_variant(k, check=True)
        except GuardViolation:
            pass


def check_contract(text: str) -> Spec | str:
    """parse_spec's contract on a model/group spec: the Spec (checked, guarded, rendered) or the one-line message."""
    note(text)
    try:
        spec = parse_spec(text, FILE)
    except SpecError as exc:
        assert_one_line(str(exc), text)
        return str(exc)
    # Any other exception from parse_spec propagates from the line above: the contract allows none.
    assert isinstance(spec, Spec)
    listed = {id(v) for v in spec.variants}
    members = [v for g in spec.groups for _, v in g.members if id(v) not in listed]
    problems = [p for v in (*spec.variants, *members) for p in _axis_problems(v)]
    assert not problems, "axis values outside AXES: " + "; ".join(problems[:5])
    names = [v.name for v in spec.variants] + [g.name for g in spec.groups]
    symbols = names + [f"{n}_config" for n in names]
    clashes = sorted({s for s in symbols if symbols.count(s) > 1})
    assert not clashes, f"names (or their _config twins) taken twice: {clashes}"
    assert_kernels_checkable(spec)
    return spec


def refused(text: str) -> str:
    """check_contract(text), which must be a refusal; the message."""
    out = check_contract(text)
    assert isinstance(out, str), (f"accepted: variants {[v.name for v in out.variants]}, "
                                  f"groups {[g.name for g in out.groups]}")
    return out


def same_meaning(a: Spec, b: Spec) -> None:
    assert a.variants == b.variants, [(x.name, y.name) for x, y in zip(a.variants, b.variants) if x != y]
    assert a.groups == b.groups


# -- the base specs and their edits ---------------------------------------------------------------------------------

def base_data(models: list[int], with_groups: bool) -> dict[str, Any]:
    data: dict[str, Any] = {"family": FAMILY, "name": "t"}
    if with_groups:
        data["defaults"] = dict(GROUP_DEFAULTS)
        data["variants"] = copy.deepcopy(GROUP_VARIANTS)
        data["groups"] = copy.deepcopy(GROUPS)
    if models or not with_groups:
        data["models"] = [copy.deepcopy(SHIPPED_MODELS[i]) for i in (models or [0])]
    return data


GOOD: dict[str, list[object]] = {
    "num_q_heads": [1, 2, 4, 8, 16, 24, 32, 64, 128, 30, 7],
    "num_kv_heads": [1, 2, 4, 8, 32, 3],
    "head_dim": [64, 96, 128, 256, 48, 512],
    "v_head_dim": [64, 96, 128, 256, 48],
    "rotary_dim": [0, 32, 64, 96, 128, 256, 6],
    "page_size": [1, 16, 64, 256, 3, 4096],
}
for _key, _axis in KEY_AXIS.items():
    if AXES[_axis][1]:
        GOOD[_key] = [*AXES[_axis][1], *(["none"] if _key == "q_store" else [])]
AXIS_STRINGS = sorted({str(c) for _, choices in AXES.values() if choices for c in choices})
ODD_NUMBERS = [0, -1, -8, -(2 ** 31), 2 ** 31 - 1, 2 ** 31, 2 ** 63, 10 ** 30, 1.5, 128.0, float("inf"), float("nan")]
scalars = st.one_of(st.none(), st.booleans(), st.sampled_from(ODD_NUMBERS), st.integers(-3, 300),
                    st.text(max_size=8),
                    st.sampled_from([*AXIS_STRINGS, "none", "None", "null", "~", "128", "yes", ""]))
wrong = st.one_of(scalars, st.lists(scalars, max_size=3),
                  st.dictionaries(st.sampled_from(["name", "a", "head_dim", "q", "1"]), scalars, max_size=2))
UNKNOWN_KEYS = ["num_heads", "num_attention_heads", "head_size", "rope", "rope_theta", "lanch", "norm", "store",
                "heads", "rope_dim", "q", "Name", "kv_heads", "1"]
launch_tables = st.dictionaries(st.sampled_from([*LAUNCH_KEYS, "bogus"]),
                                st.one_of(st.sampled_from([1, 2, 4, 8, 16, 32, 4096, 4097, 0, -1]), st.booleans(),
                                          scalars), max_size=3)


def key_values(key: object) -> st.SearchStrategy[object]:
    """Mostly a value the key takes (so later checks are reached), often a wrong one."""
    if key == "launch":
        return st.one_of(launch_tables, launch_tables, wrong)
    if key in GOOD:
        good = st.sampled_from(GOOD[key])
        return st.one_of(good, good, wrong)
    return wrong


def names_in(data: dict[str, Any]) -> list[str]:
    """The names a spec defines or generates: listed variants, groups, models and each model's <name>_<role>."""
    out = []
    for section in ("variants", "groups", "models"):
        entries = data.get(section)
        for entry in entries if isinstance(entries, list) else ():
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                out.append(entry["name"])
                if section == "models":
                    out += [f"{entry['name']}_{role}" for role in ROLES]
    return out or ["a"]


HOSTILE_NAMES = [None, 1, True, [], {}, "", "1a", "a b", "main", "x_", "int", "_a", "a__b", "a_cfg1"]
SUFFIXES = ["", "", "_config", "_config", "_math", "_check", "_cfg0", "_q", "_k", "_v"]


def clashing_names(data: dict[str, Any]) -> st.SearchStrategy[object]:
    """A name built from one the spec already uses (itself, its _config twin, a generated one), else a bad one."""
    built = st.tuples(st.sampled_from(names_in(data)), st.sampled_from(SUFFIXES)).map("".join)
    return st.one_of(built, built, built, st.sampled_from(HOSTILE_NAMES),
                     st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True))


def member_values(data: dict[str, Any]) -> st.SearchStrategy[object]:
    """A group member: a name from the spec (a variant, or wrongly a group or a model), or a list, a mapping, a
    number, a boolean, null or an unknown name."""
    known = st.sampled_from(names_in(data))
    return st.one_of(known, known, st.lists(known, min_size=1, max_size=3), st.dictionaries(known, scalars, max_size=2),
                     scalars, st.sampled_from(["nope", "vq_config", "g", "q", "k"]))


def _entries(data: dict[str, Any], section: str) -> list[Any]:
    entries = data.get(section)
    return entries if isinstance(entries, list) else []


def mutate(draw: st.DrawFn, data: dict[str, Any]) -> None:
    """One edit of the spec data, in place."""
    ops = ["set", "set", "set", "drop", "unknown", "rename", "rename", "duplicate", "entry", "section", "heads"]
    if _entries(data, "groups"):
        ops += ["member", "member", "member"]
    op = draw(st.sampled_from(ops))
    if op == "section":
        data[draw(st.sampled_from(["models", "groups", "variants"]))] = draw(st.one_of(wrong, st.just([])))
        return
    if op == "member":
        group = draw(st.sampled_from(_entries(data, "groups")))
        if isinstance(group, dict):
            role = draw(st.sampled_from([*ROLES, *ROLES, "launch", "o"]))
            group[role] = draw(key_values("launch") if role == "launch" else member_values(data))
        return
    sections = [s for s in ("models", "models", "models", "groups", "variants") if _entries(data, s)]
    if not sections:
        return
    section = draw(st.sampled_from(sections))
    entries = _entries(data, section)
    i = draw(st.integers(0, len(entries) - 1))
    entry = entries[i]
    if op == "duplicate":
        entries.insert(draw(st.integers(0, len(entries))), copy.deepcopy(entry))
        return
    if op == "entry":
        entries[i] = draw(wrong)
        return
    if not isinstance(entry, dict):
        return
    if op == "rename":
        entry["name"] = draw(clashing_names(data))
    elif op == "drop" and entry:
        del entry[draw(st.sampled_from(sorted(entry, key=str)))]
    elif op == "unknown":
        entry[draw(st.sampled_from(UNKNOWN_KEYS))] = draw(key_values("num_q_heads"))
    elif op == "heads" and section == "models":
        pair = draw(st.sampled_from([(30, 8), (8, 32), (7, 2), (1, 2), (32, 8), (8, 8), (64, 4), (6, 4), (0, 8),
                                     (8, 0), (-32, -8)]))
        entry["num_q_heads"], entry["num_kv_heads"] = pair
    elif op in ("set", "heads"):
        keys = {"models": [*MODEL_KEYS, *REQUIRED, "rotary_dim", "q_store"],
                "groups": [*ROLES, "launch"],
                "variants": [*AXES, "launch"]}[section]
        key = draw(st.sampled_from(keys))
        if section == "variants":
            entry[key] = draw(st.one_of(st.sampled_from(list(AXES[key][1] or [1, 8, 64, 128, True])), wrong)
                              if key in AXES else key_values("launch"))
        elif section == "groups" and key in ROLES:
            entry[key] = draw(member_values(data))
        else:
            entry[key] = draw(key_values(key))


@st.composite
def mutated_specs(draw: st.DrawFn) -> str:
    """A valid model/group spec (1-3 shipped models, the hand-written groups, or both) with 1-4 edits, as YAML."""
    models = draw(st.lists(st.integers(0, len(SHIPPED_MODELS) - 1), max_size=3, unique=True))
    data = base_data(models, draw(st.booleans()))
    for _ in range(draw(st.integers(1, 4))):
        mutate(draw, data)
    return dump(data, draw(st.sampled_from([False, None, True])))


@st.composite
def group_specs(draw: st.DrawFn) -> str:
    """The hand-written groups beside one model, every edit aimed at the groups and the names around them."""
    data = base_data([draw(st.integers(0, len(SHIPPED_MODELS) - 1))], True)
    for _ in range(draw(st.integers(1, 3))):
        target = draw(st.sampled_from(["member", "member", "rename", "name"]))
        groups = data["groups"]
        group = groups[draw(st.integers(0, len(groups) - 1))]
        if target == "member":
            group[draw(st.sampled_from(ROLES))] = draw(member_values(data))
        elif target == "rename":
            group["name"] = draw(clashing_names(data))
        else:
            section = draw(st.sampled_from(["variants", "models"]))
            data[section][draw(st.integers(0, len(data[section]) - 1))]["name"] = draw(clashing_names(data))
    return dump(data, draw(st.sampled_from([False, True])))


FUZZ = settings(deadline=timedelta(seconds=2), database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


@settings(FUZZ, max_examples=knobs.fuzz_examples(400))
@given(mutated_specs())
def test_fuzz_mutated_model_and_group_specs(text: str) -> None:
    check_contract(text)


@settings(FUZZ, max_examples=knobs.fuzz_examples(200))
@given(group_specs())
def test_fuzz_group_members_and_name_clashes(text: str) -> None:
    check_contract(text)


@st.composite
def models_with_a_default_key(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """A shipped model with up to two more keys set to values they take, and one key with a default."""
    model = copy.deepcopy(draw(st.sampled_from(SHIPPED_MODELS)))
    for key in draw(st.lists(st.sampled_from([k for k in DEFAULTED if k in GOOD]), max_size=2, unique=True)):
        model[key] = draw(st.sampled_from(GOOD[key]))
    return model, draw(st.sampled_from(DEFAULTED))


def assert_null_means_absent(model: dict[str, Any], key: str, require_valid_base: bool = True) -> None:
    """`key: ~` in the model is refused (one line) or parses to the variants and groups of the model without key."""
    without = {k: v for k, v in model.items() if k != key}
    nulled = {**without, key: None}
    head = {"family": FAMILY, "name": "t"}
    try:
        base = parse_spec(dump({**head, "models": [without]}), FILE)
    except SpecError:
        if require_valid_base:
            raise
        assume(False)
    out = check_contract(dump({**head, "models": [nulled]}))
    if isinstance(out, Spec):
        same_meaning(out, base)


@settings(FUZZ, max_examples=knobs.fuzz_examples(200))
@given(models_with_a_default_key())
def test_fuzz_a_null_model_key_means_what_leaving_it_out_means(case: tuple[dict[str, Any], str]) -> None:
    assert_null_means_absent(*case, require_valid_base=False)


# -- regressions, one class at a time -------------------------------------------------------------------------------

HEAD = f"family: {FAMILY}\nname: t\n"
LLAMA = "num_q_heads: 32, num_kv_heads: 8, head_dim: 128"
LISTED = ("defaults: {head_dim: 128, rope_dim: 128, rope_place: head, rope_style: neox, rope_table: halves, "
          "page_size: 16}\n"
          "variants:\n  - {name: vq, heads: 8, slots: token, page_size: 1}\n  - {name: vk, heads: 2}\n"
          "  - {name: vv, heads: 2, rope_dim: 0, norm: none}\n")


def models(*entries: str) -> str:
    """A models: section, one entry a line (line 4 onwards)."""
    return "models:\n" + "".join(f"  - {{{e}}}\n" for e in entries)


def test_the_bases_are_valid() -> None:
    """Every base the fuzzers edit parses, passes its guards and renders: the edits are what they test."""
    for with_groups in (False, True):
        spec = check_contract(dump(base_data(list(range(len(SHIPPED_MODELS))), with_groups)))
        assert isinstance(spec, Spec)
        for k in spec.kernels:
            (group_precheck if isinstance(k, Group) else precheck)(k)  # type: ignore[operator]


@pytest.mark.parametrize("key", REQUIRED)
def test_null_required_key_is_refused_at_its_model(key: str) -> None:
    entry = "name: m, " + ", ".join(f"{k}: {'~' if k == key else v}"
                                    for k, v in (("num_q_heads", 32), ("num_kv_heads", 8), ("head_dim", 128)))
    message = refused(HEAD + models("name: ok, " + LLAMA, entry))
    assert message.startswith(f"{FILE}:5:"), message
    assert key in message, message


NULL_BASES = {m["name"]: m for m in SHIPPED_MODELS
              if m["name"] in ("llama3_8b_bf16", "qwen3_8b_joint", "glm4_9b", "cake_8_1_fp8")}


@pytest.mark.parametrize("base", list(NULL_BASES))
@pytest.mark.parametrize("key", DEFAULTED)
def test_null_model_key_is_refused_or_means_the_default(key: str, base: str) -> None:
    """rope_style: ~, rope_table: ~, kv_layout: ~, norm_order: ~ ... and every other key with a default."""
    assert_null_means_absent(NULL_BASES[base], key)


WRONG_TYPES = {
    "heads list": "num_q_heads: [32]", "heads mapping": "num_q_heads: {a: 1}", "heads string": "num_q_heads: '32'",
    "heads float": "num_q_heads: 32.0", "heads bool": "num_q_heads: true", "head_dim list": "head_dim: [128]",
    "rope_style bool": "rope_style: true", "rope_style number": "rope_style: 1",
    "rope_table list": "rope_table: [halves]",
    "qk_norm off": "qk_norm: off", "q_store no": "q_store: no", "kv_store number": "kv_store: 8",
    "kv_layout mapping": "kv_layout: {hnd: 1}", "kv_pool bool": "kv_pool: true", "norm_order number": "norm_order: 0",
    "page_size string": "page_size: '16'", "launch list": "launch: [8]", "launch number": "launch: 8",
    "name list": "name: [a]", "name number": "name: 7", "name null": "name: ~",
}
OUT_OF_RANGE = {
    "q heads 0": "num_q_heads: 0", "kv heads 0": "num_kv_heads: 0", "q heads -32": "num_q_heads: -32",
    "q heads 2**31": f"num_q_heads: {2 ** 31}", "kv heads huge": f"num_kv_heads: {10 ** 30}",
    "head_dim 0": "head_dim: 0", "head_dim -128": "head_dim: -128", "head_dim 2**31-1": f"head_dim: {2 ** 31 - 1}",
    "rotary -1": "rotary_dim: -1", "rotary over head_dim": "rotary_dim: 256", "rotary odd": "rotary_dim: 6",
    "v_head_dim 0": "v_head_dim: 0", "page_size 0": "page_size: 0", "page_size huge": f"page_size: {2 ** 40}",
    "launch vec 0": "launch: {vec: 0}", "launch huge": "launch: {threads_per_token: 100000}",
}


def _with(extra: str) -> str:
    """The Llama model with one key set (a later key of the same name replaces the earlier in the entry)."""
    key = extra.split(":")[0]
    base = ", ".join(p for p in f"name: m, {LLAMA}".split(", ") if not p.startswith(key + ":"))
    return HEAD + models(f"{base}, {extra}")


@pytest.mark.parametrize("extra", list(WRONG_TYPES.values()), ids=list(WRONG_TYPES))
def test_wrong_type_is_refused_or_sound(extra: str) -> None:
    check_contract(_with(extra))


@pytest.mark.parametrize("extra", list(OUT_OF_RANGE.values()), ids=list(OUT_OF_RANGE))
def test_out_of_range_is_refused_or_sound(extra: str) -> None:
    check_contract(_with(extra))


@pytest.mark.parametrize("extra", ["num_heads: 32", "rope: neox", "lanch: {vec: 4}", "heads: 8", "rope_dim: 64",
                                   "store: bf16"])
def test_unknown_model_key_is_refused(extra: str) -> None:
    message = refused(HEAD + models(f"name: m, {LLAMA}, {extra}"))
    assert extra.split(":")[0] in message, message


CLASHES = {
    "group X_config beside variant X": HEAD + LISTED + "groups:\n  - {name: vq_config, q: vq, k: vk}\n",
    "group X beside group X_config": HEAD + LISTED + "groups:\n  - {name: g, q: vq}\n  - {name: g_config, k: vk}\n",
    "variant X_config beside group X": HEAD + LISTED.replace("name: vv", "name: g_config")
    + "groups:\n  - {name: g, q: vq, k: vk}\n",
    "models a and a_config": HEAD + models(f"name: a, {LLAMA}", f"name: a_config, {LLAMA}"),
    "models a_config and a": HEAD + models(f"name: a_config, {LLAMA}", f"name: a, {LLAMA}"),
    "two models named a": HEAD + models(f"name: a, {LLAMA}", f"name: a, {LLAMA}, head_dim: 64"),
    "model named as a variant": HEAD + LISTED + models(f"name: vq, {LLAMA}"),
    "model named as a group": HEAD + LISTED + "groups:\n  - {name: g, q: vq}\n" + models(f"name: g, {LLAMA}"),
    "model a beside model a_q": HEAD + models(f"name: a, {LLAMA}", f"name: a_q, {LLAMA}"),
    "variant a_q beside model a": HEAD + LISTED.replace("name: vv", "name: a_q") + models(f"name: a, {LLAMA}"),
    "variant a_config beside model a": HEAD + LISTED.replace("name: vv", "name: a_config")
    + models(f"name: a, {LLAMA}"),
    "variant a_q_config beside model a": HEAD + LISTED.replace("name: vv", "name: a_q_config")
    + models(f"name: a, {LLAMA}"),
}


@pytest.mark.parametrize("text", list(CLASHES.values()), ids=list(CLASHES))
def test_name_clash_is_refused(text: str) -> None:
    refused(text)


MEMBERS = {
    "q: [vq, vk]": "q: [vq, vk]", "q: [vq]": "q: [vq]", "q mapping": "q: {vq: 1}", "q number": "q: 1",
    "q true": "q: true", "q unknown": "q: nope", "q is the group": "q: g", "q is a model's group": "q: m",
    "k: [vk]": "k: [vk]", "v mapping": "v: {name: vv}",
}


@pytest.mark.parametrize("member", list(MEMBERS.values()), ids=list(MEMBERS))
def test_bad_group_member_is_refused(member: str) -> None:
    role = member.split(":")[0]
    others = ", ".join(f"{r}: v{r}" for r in ROLES if r != role)
    refused(HEAD + LISTED + models(f"name: m, {LLAMA}") + f"groups:\n  - {{name: g, {member}, {others}}}\n")


@pytest.mark.parametrize("role", ROLES)
def test_null_group_member_is_refused_or_means_no_member(role: str) -> None:
    others = ", ".join(f"{r}: v{r}" for r in ROLES if r != role)
    out = check_contract(HEAD + LISTED + f"groups:\n  - {{name: g, {role}: ~, {others}}}\n")
    if isinstance(out, Spec):
        same_meaning(out, parse_spec(HEAD + LISTED + f"groups:\n  - {{name: g, {others}}}\n", FILE))


@pytest.mark.parametrize("q, kv", [(30, 8), (8, 32), (7, 2), (1, 2), (12, 8)])
def test_q_heads_not_a_multiple_of_kv_heads_is_refused(q: int, kv: int) -> None:
    """Refused at parse (SpecError), or, if the spec parses, by the model's launch group's guards."""
    out = check_contract(HEAD + models(f"name: m, num_q_heads: {q}, num_kv_heads: {kv}, head_dim: 128"))
    if isinstance(out, Spec):
        with pytest.raises(GuardViolation):
            group_precheck(out.group("m"))


@pytest.mark.parametrize("q, kv", [(32, 8), (8, 8), (64, 4), (8, 1)])
def test_q_heads_a_multiple_of_kv_heads_is_accepted(q: int, kv: int) -> None:
    spec = check_contract(HEAD + models(f"name: m, num_q_heads: {q}, num_kv_heads: {kv}, head_dim: 128"))
    assert isinstance(spec, Spec)
    group_precheck(spec.group("m"))


@pytest.mark.parametrize("text", ["", "\n", "  \n\n", "# only a comment\n"],
                         ids=["empty", "newline", "blank", "comment"])
def test_empty_spec_file_says_it_is_empty(text: str) -> None:
    message = refused(text)
    assert "empty" in message.lower(), message


@pytest.mark.parametrize("spelling", ["~", "null", "Null", "NULL", ""], ids=["tilde", "null", "Null", "NULL", "empty"])
@pytest.mark.parametrize("key", ["head_dim", "num_kv_heads", "rope_style", "kv_layout", "q_store", "v_head_dim"])
def test_every_spelling_of_null_in_block_style(key: str, spelling: str) -> None:
    """`key:` with nothing after it, or ~ / null in any case: one null, refused (required) or the default."""
    lines = {"name": "m", "num_q_heads": "32", "num_kv_heads": "8", "head_dim": "128"}
    without = "".join(f"    {k}: {v}\n" for k, v in lines.items() if k != key)
    text = HEAD + "models:\n  -\n" + without + f"    {key}: {spelling}\n".replace(": \n", ":\n")
    out = check_contract(text)
    if key in REQUIRED:
        assert isinstance(out, str), "a required key given as null was accepted"
    elif isinstance(out, Spec):
        same_meaning(out, parse_spec(HEAD + "models:\n  -\n" + without, FILE))


SECTIONS = {
    "models: ~": "models: ~\n", "models mapping": "models: {name: m}\n", "models: [~]": "models: [~]\n",
    "models: [[]]": "models: [[]]\n", "models: [{}]": "models: [{}]\n", "models: [m]": "models: [m]\n",
    "groups: ~": LISTED + "groups: ~\n", "groups: [1]": LISTED + "groups: [1]\n",
    "groups: [{}]": LISTED + "groups: [{}]\n", "groups mapping": LISTED + "groups: {name: g, q: vq}\n",
    "group without members": LISTED + "groups: [{name: g}]\n",
}


@pytest.mark.parametrize("section", list(SECTIONS.values()), ids=list(SECTIONS))
def test_malformed_section_is_refused(section: str) -> None:
    refused(HEAD + section)
