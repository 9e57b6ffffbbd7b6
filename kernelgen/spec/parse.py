"""Parse a YAML spec into frozen Variants; every error names file:line:col and a fix."""
from __future__ import annotations

import difflib
import itertools
import math
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

from .. import resources
from ..errors import SpecError
from .formats import FORMATS
from .group import ROLES, Group
from .launchparams import BY_NAME, IN_SPACE_ORDER
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

TOP_KEYS = ("family", "name", "description", "defaults", "matrix", "overrides", "variants", "groups", "models", "tune")
# The tuner's parameters a `tune:` section may set (the launch table's space names), and buckets.
TUNE_KEYS = (*(p.tune for p in IN_SPACE_ORDER), "buckets")
_TUNE_FLAGS = frozenset(p.tune for p in IN_SPACE_ORDER if p.kind is bool)
VARIANT_KEYS = ("name", *AXES, "launch")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_CPP_KEYWORDS = frozenset(
    "alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class "
    "co_await co_return co_yield compl concept const const_cast consteval constexpr constinit continue decltype "
    "default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline "
    "int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public register "
    "reinterpret_cast requires return short signed sizeof static static_assert static_cast struct switch template "
    "this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t "
    "while xor xor_eq".split())
_C_KEYWORDS = frozenset({"restrict"})  # C99's, which C++ lacks; nvcc's host compilers take it as an extension
# A variant named N becomes N, N_math, N_check, N_config and N_cfg<i> in namespace kernelgen_generated, and the
# exported symbols N and N_config (templates/fused_norm_rope_store.cu.j2). Each suffix, with what it names.
_GENERATED_SUFFIXES = (("_config", "the config symbol exported"), ("_math", "the math struct generated"),
                       ("_check", "the argument-check function generated"))
_CFG_SUFFIX = re.compile(r"_cfg(?:0|[1-9][0-9]*)\Z")  # N_cfg0, N_cfg1, ...: one per launch configuration
# Namespaces the generated code names, and global names it uses without `::` inside kernelgen_generated, where
# a variant's function of the same name would hide them (tests/test_spec.py reads them off rendered sources).
_GENERATED_CODE_NAMES = frozenset({"kernelgen", "kernelgen_generated", "tvm", "std", "int64_t", "kDLCUDA",
                                   "DLDataType"})
# The global names (macros among them) of the headers every generated file includes: tvm-ffi (TVMFFI...,
# TVM_FFI_...), DLPack (DLTensor, kDLCUDA, DLPACK_...) and CUDA (cudaMalloc, cuLaunchKernel, CUDA_VERSION, CUresult).
_LIBRARY_PREFIX = re.compile(r"TVM|DLPACK|DL[A-Z][a-z]|kDL[A-Z]|cuda[A-Z]|cu[A-Z]|CUDA|CU[a-z_]")
# Lower-case names C defines as macros (a function of that name would be expanded) and CUDA's built-in variables.
_MACROS_AND_BUILTINS = frozenset("assert errno offsetof setjmp va_arg va_copy va_end va_start stdin stdout stderr "
                                 "threadIdx blockIdx blockDim gridDim warpSize".split())
# The range of each integer axis checked at parse time: the generated code holds these as C++ `int` constants,
# so nothing past 2**31 - 1 reaches the guards, which hold the real limits (and say what to choose instead).
INT_MAX = 2 ** 31 - 1
INT_RANGES = {"head_dim": (1, INT_MAX), "heads": (1, INT_MAX), "rope_dim": (0, INT_MAX), "page_size": (1, INT_MAX)}
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
    "norm": {"rmsnorm": "rms", "rms_norm": "rms", "layernorm": "layer", "layer_norm": "layer", "ln": "layer",
             "gemma": "rms_gemma", "gemma_rms": "rms_gemma", "gemma_rmsnorm": "rms_gemma", "rms_1p": "rms_gemma"},
    "rope_style": {"gptj": "interleaved", "gpt_j": "interleaved", "interleave": "interleaved", "gpt_neox": "neox",
                   "rotate_half": "neox"},
    "rope_place": {"front": "head", "start": "head", "first": "head", "back": "tail", "end": "tail", "last": "tail"},
}
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


def _identifier_problem(name: object, fix: str) -> str | None:
    """Why name can name neither a spec nor a variant, with a fix (`fix` where renaming is it); None if it can."""
    if not isinstance(name, str):
        return f"must be a string, got {quote(name)}"
    if len(name) > MAX_NAME_LENGTH:
        return (f"{quote(name)} is {len(name)} characters, over the limit of {MAX_NAME_LENGTH} "
                "(MAX_NAME_LENGTH); shorten it")
    if not _IDENT.match(name):
        return f"{quote(name)} must be a C identifier (letters, digits, _; not starting with a digit)"
    reason = _reserved_reason(name)
    return f"{quote(name)} {reason}; {fix}" if reason else None


def _reserved_reason(name: str) -> str | None:
    if name in _CPP_KEYWORDS or name in _C_KEYWORDS:
        return f"is a {'C++' if name in _CPP_KEYWORDS else 'C'} keyword"
    if name.startswith("_"):
        return "starts with an underscore, which C++ reserves for the implementation at global scope"
    if "__" in name:
        return "contains a double underscore, which C++ reserves for the implementation"
    return None


def _symbol_reason(name: str) -> str | None:
    """Why an identifier cannot name a variant, whose name becomes C++ functions, structs and exported symbols."""
    if name == "main":
        return "would export a symbol named main, the name of a program's entry point"
    if name.endswith("_"):
        return (f"ends with an underscore, so its generated names ({name}_config, {name}_math) hold a double "
                "underscore, which C++ reserves")
    if name in _GENERATED_CODE_NAMES:
        return "is a name the generated code uses (in namespace kernelgen_generated)"
    if _LIBRARY_PREFIX.match(name):
        return "starts like the global names of tvm-ffi, DLPack and CUDA, which the generated code includes"
    if name in _MACROS_AND_BUILTINS:
        return "is a standard C macro or CUDA built-in"
    return None


def _generated_by(name: str) -> tuple[str, str] | None:
    """(base, what) when name is a name generated for a variant named base (x_config: ('x', 'the config ...'))."""
    cfg = _CFG_SUFFIX.search(name)
    if cfg:
        return name[:cfg.start()], "the launch-configuration struct generated"
    return next(((name[:-len(suffix)], what) for suffix, what in _GENERATED_SUFFIXES if name.endswith(suffix)), None)


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
    # A matrix variant's name is the spec's name and its values: renaming the spec is the fix there.
    fix = "rename the variant" if name_path else "rename the spec (its name starts each matrix variant's name)"
    problem = _symbol_name_problem(name, fix)
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
        raise _fail(src, (), "spec defines no variants: add a 'matrix:', a 'variants:' or a 'models:' list")
    _check_unique(src, variants)
    _check_symbols(src, variants, top)
    groups = _groups(src, top, variants, spec_name) + model_groups
    _check_group_names(groups, variants)
    return Spec(spec_name, file, _description(src, top), tuple(variants), _tune_section(src, top), groups)


GROUP_KEYS = ("name", *ROLES, "launch")

# `models:`: a model's attention prep in the words of its config (num_q_heads, num_kv_heads, head_dim, ...),
# expanded into its Q output, K cache and V cache variants (<name>_q, <name>_k, <name>_v) and a launch group
# <name> of the three. Each key with its default and the variant axis it sets.
MODEL_DEFAULTS: dict[str, object] = {
    "num_q_heads": None, "num_kv_heads": None, "head_dim": None,  # required
    "v_head_dim": None,  # default head_dim
    "rotary_dim": None,  # default head_dim (full rotary); fewer: the first rotary_dim dims of each head; 0: no RoPE
    "rope_style": "neox", "rope_table": "halves", "qk_norm": "none",
    "norm_order": "norm_then_rope",  # or "rope_then_norm": Q's and K's norm runs on the rotated heads
    "q_store": "bf16",  # or "none": no Q output (the group writes K and V only)
    "kv_store": "bf16", "k_store": None, "v_store": None,  # k_store / v_store default to kv_store
    "page_size": 16, "kv_layout": "nhd", "input_dtype": "bf16", "weight_dtype": "fp32",
    "kv_pool": "separate",  # or "joint": K and V are the halves of one pool [num_pages, 2, page_size, ...]
}
MODEL_KEYS = ("name", *MODEL_DEFAULTS, "launch")
_MODEL_AXIS = {"num_q_heads": "heads", "num_kv_heads": "heads", "head_dim": "head_dim", "v_head_dim": "head_dim",
               "rotary_dim": "rope_dim", "rope_style": "rope_style", "rope_table": "rope_table", "qk_norm": "norm",
               "norm_order": "norm_order",
               "q_store": "store", "kv_store": "store", "k_store": "store", "v_store": "store",
               "page_size": "page_size", "kv_layout": "kv_layout", "input_dtype": "input_dtype",
               "weight_dtype": "weight_dtype", "kv_pool": "kv_pool"}


def _models(src: Located, top: dict[str, Any], spec_name: str) -> tuple[list[Variant], tuple[Group, ...]]:
    variants: list[Variant] = []
    groups = []
    for path, table, name in _entries(src, top, "models", MODEL_KEYS, "model",
                                      "each with a name, num_q_heads, num_kv_heads and head_dim"):
        for key in ("num_q_heads", "num_kv_heads", "head_dim"):
            if key not in table:
                raise _fail(src, path, f"model {quote(name)} needs {key}: (e.g. num_q_heads: 32, num_kv_heads: 8, "
                                       "head_dim: 128, as in the model's config)")
        m = {**MODEL_DEFAULTS, **{k: v for k, v in table.items() if k not in ("name", "launch")}}
        for key, value in m.items():
            if value is None or (key == "q_store" and value == "none"):
                continue
            m[key] = _axis_value(src, path + (key,), _MODEL_AXIS[key], value, key)
        where = {key: str(src.at(path + (key,))) for key in table if key != "name"}
        head_dim = m["head_dim"]
        rotary = head_dim if m["rotary_dim"] is None else m["rotary_dim"]
        shared = {"input_dtype": m["input_dtype"], "weight_dtype": m["weight_dtype"], "rope_place": "head",
                  "rope_style": m["rope_style"], "rope_table": m["rope_table"]}
        qk = {**shared, "head_dim": head_dim, "rope_dim": rotary, "norm": m["qk_norm"], "norm_order": m["norm_order"]}
        parts = {
            "q": ({**qk, "heads": m["num_q_heads"], "store": m["q_store"], "slots": "token", "page_size": 1},
                  ("num_q_heads", "head_dim", "rotary_dim", "qk_norm", "norm_order", "q_store")),
            "k": ({**qk, "heads": m["num_kv_heads"], "store": m["k_store"] or m["kv_store"],
                   "page_size": m["page_size"], "kv_layout": m["kv_layout"], "kv_pool": m["kv_pool"]},
                  ("num_kv_heads", "head_dim", "rotary_dim", "qk_norm", "norm_order", "k_store", "kv_store",
                   "page_size", "kv_layout", "kv_pool")),
            "v": ({**shared, "head_dim": m["v_head_dim"] or head_dim, "heads": m["num_kv_heads"], "rope_dim": 0,
                   "norm": "none", "store": m["v_store"] or m["kv_store"], "page_size": m["page_size"],
                   "kv_layout": m["kv_layout"], "kv_pool": m["kv_pool"]},
                  ("num_kv_heads", "v_head_dim", "head_dim", "v_store", "kv_store", "page_size", "kv_layout",
                   "kv_pool")),
        }
        members = []
        for role, (settings, keys) in parts.items():
            if role == "q" and m["q_store"] == "none":
                continue
            origins = {_MODEL_AXIS[k]: where[k] for k in reversed(keys) if k in where}
            v = _make(src, spec_name, f"{name}_{role}", settings, path, path + ("name",), origins)
            variants.append(v)
            members.append((role, v))
        k, v = (dict(members)[role] for role in ("k", "v"))
        if m["kv_pool"] == "joint" and (k.head_dim, k.store) != (v.head_dim, v.store):
            raise _fail(src, path + ("kv_pool",), f"model {quote(name)}: kv_pool: joint needs K and V pages of one "
                                                  f"shape (head_dim {k.head_dim} / {v.head_dim}, store {k.store} / "
                                                  f"{v.store} here): give v_head_dim and v_store the K values, or "
                                                  "drop kv_pool")
        launch = Launch(**_launch(src, path + ("launch",), table["launch"])) if "launch" in table else Launch()
        groups.append(Group(name, tuple(members), launch, spec_name, str(src.at(path))))
    return variants, tuple(groups)


def _check_group_names(groups: tuple[Group, ...], variants: list[Variant]) -> None:
    """A group's name is taken by no variant and no other group (its symbol lives beside theirs)."""
    seen = {v.name: v.origin for v in variants}
    for g in groups:
        if g.name in seen:
            raise SpecError(f"{g.origin}: group name {quote(g.name)} is already taken ({seen[g.name]}): a group's "
                            "symbol lives beside its members'; rename it")
        seen[g.name] = g.origin


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


def _symbol_name_problem(name: Any, fix: str) -> str | None:
    """Why name cannot name a variant or a group (their names become C++ structs and exported symbols), else None."""
    problem = _identifier_problem(name, fix)
    if problem is None and _symbol_reason(name):
        problem = f"{quote(name)} {_symbol_reason(name)}; {fix}"
    return problem


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


def _check_symbols(src: Located, variants: list[Variant], top: dict[str, Any]) -> None:
    """No variant's name is a name generated for another (x_config is variant x's config symbol): one library
    or process holding both would see two definitions of it. Blame the longer name, at its `name:`."""
    where = {v.name: str(src.at(("matrix",))) for v in variants}
    listed = top.get("variants", [])
    where |= {item["name"]: str(src.at(("variants", i, "name"))) for i, item in enumerate(listed)}
    for v in variants:
        base, what = _generated_by(v.name) or ("", "")
        if base in where:
            raise SpecError(f"{where[v.name]}: variant name {quote(v.name)} clashes with {v.name}, {what} for variant "
                            f"{quote(base)} ({where[base]}); rename the variant")


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
        want_bool = key in _TUNE_FLAGS
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
