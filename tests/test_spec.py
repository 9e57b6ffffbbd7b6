"""Pure tier: spec parsing, naming, and one-line errors that point at file:line:col."""
from __future__ import annotations

import pytest

from kernelgen import resources
from kernelgen.cli import main
from kernelgen.errors import SpecError
from kernelgen.spec.parse import load_spec, parse_spec
from kernelgen.spec.variant import AXES

pytestmark = pytest.mark.pure

BASE = "family: fused_norm_rope_store\nname: t\n"
STORES = ", ".join(AXES["store"][1] or ())


def parse(body: str):
    return parse_spec(BASE + body, "s.yaml")


def error_of(body: str) -> str:
    with pytest.raises(SpecError) as info:
        parse(body)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_shipped_specs_parse_with_expected_variants() -> None:
    names = {p.stem: [v.name for v in load_spec(p).variants] for p in resources.shipped_specs()}
    assert set(names) >= {"dsv4_indexer", "dsv4_mainkv", "dsv32_indexer", "example"}
    assert "dsv4_indexer_bf16_p64" in names["dsv4_indexer"]
    assert {"dsv4_indexer_fp8_p1", "dsv4_indexer_fp4_p256"} <= set(names["dsv4_indexer"])
    assert "dsv4_mainkv_fp8mla_p64" in names["dsv4_mainkv"]


def test_shipped_spec_by_name_and_by_path() -> None:
    assert load_spec("dsv4_indexer").variants == load_spec("specs/dsv4_indexer.yaml").variants


def test_matrix_defaults_overrides_and_listed_variants() -> None:
    spec = parse(
        "defaults: {head_dim: 256, hadamard: true}\n"
        "matrix:\n  store: [fp8_e4m3, bf16]\n  page_size: [1, 64]\n"
        "overrides:\n  t_bf16_p64: {launch: {tokens_per_block: 16}}\n"
        "variants:\n  - {name: extra, store: fp4_e2m1, head_dim: 128}\n"
    )
    assert [v.name for v in spec.variants] == ["t_fp8_p1", "t_fp8_p64", "t_bf16_p1", "t_bf16_p64", "extra"]
    by = {v.name: v for v in spec.variants}
    assert by["t_fp8_p1"].head_dim == 256 and by["t_fp8_p1"].hadamard
    assert by["t_bf16_p64"].launch.tokens_per_block == 16 and by["t_bf16_p1"].launch.tokens_per_block == 0
    assert by["extra"].head_dim == 128 and by["extra"].hadamard  # listed variants start from defaults
    assert by["t_fp8_p64"].origin.startswith("s.yaml:")


def test_variants_are_frozen() -> None:
    v = parse("variants: [{name: a}]").variants[0]
    with pytest.raises(AttributeError):
        v.head_dim = 64  # type: ignore[misc]


@pytest.mark.parametrize("body, expected", [
    ("stores: 1\n", "s.yaml:3:1: unknown top-level key 'stores'"),
    ("variants:\n  - {name: a, store: fp8e4}\n", f"s.yaml:4:22: store 'fp8e4' is not one of {STORES} (did you mean "
     "fp8_e4m3?)"),
    ("variants:\n  - {name: a, head_dim: big}\n", "s.yaml:4:25: head_dim must be an integer from 1 to 2147483647, "
     "got 'big'"),
    ("variants:\n  - {name: a, hadamard: 1}\n", "s.yaml:4:25: hadamard must be true or false, got 1"),
    ("variants:\n  - {name: a, page_sise: 64}\n", "s.yaml:4:15: unknown variant key 'page_sise' (did you mean page_size?)"),
    ("variants:\n  - {name: a}\n  - {name: a}\n", "s.yaml:5:5: duplicate variant name 'a' (first defined at s.yaml:4:5)"),
    ("defaults: {norm: rms, norm: layer}\n", "s.yaml:3:23: duplicate key 'norm' (first given at line 3)"),
    ("variants: [{name: a}\n", "s.yaml:4:1: YAML syntax error"),
    ("matrix: {store: [bf16]}\noverrides: {t_bf16x: {page_size: 8}}\n",
     "s.yaml:4:13: override for unknown matrix variant 't_bf16x' (did you mean t_bf16?)"),
    ("variants:\n  - {name: a, launch: {vec: 0}}\n", "s.yaml:4:29: launch.vec must be a positive integer up to 4096, got 0"),
    ("matrix: {store: []}\n", "s.yaml:3:17: matrix.store must be a non-empty list"),
    ("variants:\n  - {name: 9a}\n", "must be a C identifier"),
    ("", "s.yaml:1:1: spec defines no variants"),
    ("variants:\n  - {name: int}\n", "s.yaml:4:12: variant name 'int' is a C++ keyword; rename the variant"),
    ("variants:\n  - {name: 5}\n", "s.yaml:4:12: variant name must be a string, got 5"),
    ("variants:\n  - {name: a, head_dim: 0}\n", "s.yaml:4:25: head_dim must be an integer from 1 to 2147483647, got 0"),
    ("variants:\n  - {name: a, rope_dim: -64}\n", "s.yaml:4:25: rope_dim must be an integer from 0 to 2147483647, "
     "got -64"),
    ("matrix: {page_size: [64, 64]}\n", "s.yaml:3:26: matrix.page_size lists 64 twice"),
    ("variants: [1]\n", "s.yaml:3:12: variants[0] must be a mapping"),
])
def test_spec_errors_name_place_and_fix(body: str, expected: str) -> None:
    assert expected in error_of(body)


@pytest.mark.parametrize("name, reason", [
    ("main", "'main' would export a symbol named main, the name of a program's entry point"),
    ("static_assert", "'static_assert' is a C++ keyword"),
    ("char8_t", "'char8_t' is a C++ keyword"),
    ("xor_eq", "'xor_eq' is a C++ keyword"),
    ("restrict", "'restrict' is a C keyword"),
    ("_x", "'_x' starts with an underscore, which C++ reserves for the implementation at global scope"),
    ("_X", "'_X' starts with an underscore, which C++ reserves for the implementation at global scope"),
    ("a__b", "'a__b' contains a double underscore, which C++ reserves for the implementation"),
    ("a_", "'a_' ends with an underscore, so its generated names (a__config, a__math) hold a double underscore, "
           "which C++ reserves"),
    ("int64_t", "'int64_t' is a name the generated code uses"),
    ("kDLCUDA", "'kDLCUDA' is a name the generated code uses"),
    ("kernelgen_generated", "'kernelgen_generated' is a name the generated code uses"),
    ("std", "'std' is a name the generated code uses"),
    ("TVMFFIBacktrace", "'TVMFFIBacktrace' starts like the global names of tvm-ffi, DLPack and CUDA"),
    ("DLTensor", "'DLTensor' starts like the global names of tvm-ffi, DLPack and CUDA"),
    ("cudaMalloc", "'cudaMalloc' starts like the global names of tvm-ffi, DLPack and CUDA"),
    ("assert", "'assert' is a standard C macro or CUDA built-in"),
    ("threadIdx", "'threadIdx' is a standard C macro or CUDA built-in"),
])
def test_variant_names_that_cannot_be_cpp_symbols_are_refused(name: str, reason: str) -> None:
    """A variant's name becomes C++ functions and structs in namespace kernelgen_generated and exported symbols."""
    message = error_of(f"variants:\n  - {{store: bf16, name: {name}}}\n")
    assert message.startswith(f"s.yaml:4:25: variant name {reason}"), message
    assert message.endswith("; rename the variant"), message


def test_a_bad_matrix_variant_name_asks_to_rename_the_spec() -> None:
    text = "family: fused_norm_rope_store\nname: CUDA\nmatrix: {store: [bf16]}\n"
    with pytest.raises(SpecError, match=r"^s.yaml:3:9: variant name 'CUDA_bf16' starts like the global names of "
                                        r"tvm-ffi, DLPack and CUDA, which the generated code includes; rename the "
                                        r"spec \(its name starts each matrix variant's name\)$"):
        parse_spec(text, "s.yaml")


def test_a_name_refused_for_its_length_or_spelling_carries_one_fix() -> None:
    assert error_of(f"variants: [{{name: {'a' * 101}}}]\n").endswith("(MAX_NAME_LENGTH); shorten it")
    assert error_of("variants: [{name: a-b}]\n").endswith("must be a C identifier (letters, digits, _; not "
                                                           "starting with a digit)")


def test_spec_name_rules_stay_those_of_a_name_prefix() -> None:
    """A spec's name only prefixes generated names: 'main' or 'std' are fine there, keywords are not."""
    for name in ("main", "std"):
        text = f"family: fused_norm_rope_store\nname: {name}\nmatrix: {{store: [bf16]}}\n"
        assert parse_spec(text, "s.yaml").variants[0].name == f"{name}_bf16"
    with pytest.raises(SpecError, match=r"^s.yaml:2:7: name 'int' is a C\+\+ keyword; rename the spec \(its name "
                                        r"prefixes generated variant names\)$"):
        parse_spec("family: fused_norm_rope_store\nname: int\nmatrix: {store: [bf16]}\n", "s.yaml")


@pytest.mark.parametrize("other, what", [
    ("x_config", "the config symbol exported"),
    ("x_math", "the math struct generated"),
    ("x_check", "the argument-check function generated"),
    ("x_cfg0", "the launch-configuration struct generated"),
    ("x_cfg12", "the launch-configuration struct generated"),
])
def test_a_variant_name_that_clashes_with_another_variants_symbols_is_refused(other: str, what: str) -> None:
    for first, second in (("x", other), (other, "x")):  # the suffixed name is blamed, whichever comes first
        message = error_of(f"variants:\n  - {{name: {first}}}\n  - {{name: {second}}}\n")
        line = 4 if first == other else 5
        where_x = "s.yaml:5:12" if first == other else "s.yaml:4:12"
        assert message == (f"s.yaml:{line}:12: variant name '{other}' clashes with {other}, {what} for variant 'x' "
                           f"({where_x}); rename the variant"), message


def test_names_that_only_look_generated_are_fine() -> None:
    spec = parse("variants:\n  - {name: x}\n  - {name: x_cfg}\n  - {name: x_cfg01}\n  - {name: y_config}\n"
                 "  - {name: x_configs}\n")
    assert [v.name for v in spec.variants] == ["x", "x_cfg", "x_cfg01", "y_config", "x_configs"]


def test_a_matrix_variant_clashing_with_a_listed_one_is_refused_at_the_listed_name() -> None:
    message = error_of("matrix: {store: [bf16]}\nvariants:\n  - {name: t_bf16_check}\n")
    assert message == ("s.yaml:5:12: variant name 't_bf16_check' clashes with t_bf16_check, the argument-check "
                       "function generated for variant 't_bf16' (s.yaml:3:9); rename the variant")


def test_every_name_the_generated_code_uses_unqualified_is_refused() -> None:
    """A variant's function in namespace kernelgen_generated hides any global name it shares with one the generated
    code uses without `::` there (int64_t, kDLCUDA, ...): read those names off each shipped variant's source."""
    import re

    from kernelgen.codegen.render import render_variant
    from kernelgen.spec.parse import shipped_variants

    # Names that no function can hide: parameters and locals, members, words of the language and preprocessor,
    # and a macro argument that is only stringified (TVM_FFI_THROW(ValueError)).
    local = {"x", "weight", "bias", "freqs", "positions", "out_loc", "kvcache", "scale", "eps", "config", "pdl", "n", "t",
             "In", "Weight", "include", "ifdef", "ifndef", "endif", "maybe_unused", "ValueError"}
    used: set[str] = set()
    for v in shipped_variants():
        code = re.sub(r'"(?:\\.|[^"\\])*"', '""', re.sub(r"//[^\n]*", "", render_variant(v)))
        words = {m.group(1) for m in re.finditer(r"(?<![\w.>:])([A-Za-z_]\w*)", code)}
        used |= {w for w in words if not w.startswith(v.name) and not re.fullmatch(r"k[A-Z]\w*", w) or w == "kDLCUDA"}
    assert used - local, "the scan found no names: the template changed shape"
    for name in sorted(used - local):
        with pytest.raises(SpecError, match=r"variant name .*; rename the variant$"):
            parse(f"variants: [{{name: '{name}'}}]\n")  # quoted: true and false are names here


@pytest.mark.parametrize("axis, value, suggestion", [
    ("input_dtype", "float16", "fp16"),
    ("input_dtype", "half", "fp16"),
    ("input_dtype", "float32", "fp32"),
    ("input_dtype", "float", "fp32"),
    ("input_dtype", "bfloat16", "bf16"),
    ("input_dtype", "torch.bfloat16", "bf16"),
    ("input_dtype", "FP16", "fp16"),
    ("input_dtype", "flaot16", "fp16"),  # a typo of an alias
    ("weight_dtype", "float32", "fp32"),
    ("weight_dtype", "bfloat16", "bf16"),
    ("store", "fp8", "fp8_e4m3"),
    ("store", "float8_e4m3fn", "fp8_e4m3"),
    ("store", "fp8mla", "fp8_flashmla"),
    ("store", "fp4", "fp4_e2m1"),
    ("store", "fp6", "fp16"),
    ("store", "float16", "fp16"),
    ("store", "fp8e4", "fp8_e4m3"),
    ("norm", "rmsnorm", "rms"),
    ("norm", "LayerNorm", "layer"),
    ("rope_style", "gpt-j", "interleaved"),
    ("rope_style", "rotate_half", "neox"),
    ("rope_place", "front", "head"),
])
def test_enum_values_suggest_the_spelling_kernelgen_uses(axis: str, value: str, suggestion: str) -> None:
    message = error_of(f"variants:\n  - {{name: a, {axis}: {value}}}\n")
    assert message.endswith(f" (did you mean {suggestion}?)"), message
    assert f"{axis} '{value}' is not one of " in message


@pytest.mark.parametrize("axis, value", [("weight_dtype", "float16"), ("weight_dtype", "fp16"), ("store", "fp32"),
                                         ("store", "float32")])
def test_no_suggestion_for_a_value_the_axis_does_not_take(axis: str, value: str) -> None:
    """fp16 weights and an fp32 store do not exist: suggesting the nearest spelling (bf16) would mislead."""
    message = error_of(f"variants:\n  - {{name: a, {axis}: {value}}}\n")
    assert message.endswith(f"{axis} '{value}' is not one of {', '.join(AXES[axis][1] or ())}"), message


def test_enum_axis_given_no_name_lists_its_values() -> None:
    assert error_of("variants:\n  - {name: a, store: 8}\n") == f"s.yaml:4:22: store must be one of {STORES}, got 8"
    assert error_of("variants:\n  - {name: a, norm: off}\n") == (
        "s.yaml:4:21: norm must be one of rms, layer, none, rms_gemma, rms_unweighted, got False (YAML reads an unquoted no, off or false "
        "as false: did you mean none?)")
    assert error_of("variants:\n  - {name: a, norm: 0}\n") == "s.yaml:4:21: norm must be one of rms, layer, none, rms_gemma, rms_unweighted, got 0"


def test_alias_targets_are_values_of_their_axes() -> None:
    from kernelgen.spec.parse import ALIASES
    from kernelgen.spec.variant import AXES

    assert set(ALIASES) <= set(AXES)
    for axis, table in ALIASES.items():
        assert set(table.values()) - {None} <= set(AXES[axis][1] or ()), axis
        assert not set(table) & set(AXES[axis][1] or ()), axis  # an alias is never itself a value
        assert all(key == key.lower() and "-" not in key and " " not in key for key in table), axis


def test_int_axes_each_have_a_range() -> None:
    from kernelgen.spec.parse import INT_RANGES
    from kernelgen.spec.variant import AXES

    assert set(INT_RANGES) == {a for a, (kind, _) in AXES.items() if kind is int}
    assert all(0 <= lo < hi == 2 ** 31 - 1 for lo, hi in INT_RANGES.values())  # the code holds them as C++ int


def test_description_must_be_text() -> None:
    assert parse('description: "a: b"\nvariants: [{name: a}]\n').description == "a: b"
    assert parse("variants: [{name: a}]\n").description == ""
    assert error_of("description: {a: 1}\nvariants: [{name: a}]\n").startswith(
        "s.yaml:3:14: description must be a string, got a mapping")


def test_top_level_must_be_a_mapping() -> None:
    with pytest.raises(SpecError, match=r"^s.yaml:1:1: a spec must be a mapping"):
        parse_spec("- a\n", "s.yaml")


def test_wrong_family_is_reported() -> None:
    with pytest.raises(SpecError, match=r"s.yaml:1:9: family must be 'fused_norm_rope_store'"):
        parse_spec("family: other\nname: t\nvariants: [{name: a}]\n", "s.yaml")


def test_cli_prints_one_line_and_exits_nonzero(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BASE + "variants:\n  - {name: a, store: fp8e4}\n")
    assert main(["list", str(bad)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert err.startswith(f"error: {bad}:4:22: store 'fp8e4' is not one of")


def test_cli_missing_spec_lists_shipped(capsys) -> None:
    assert main(["list", "no_such_spec"]) == 1
    assert "shipped specs: " in capsys.readouterr().err


def test_cli_layout_docs_come_from_the_layout_code(capsys) -> None:
    import json

    assert main(["list", "dsv4_indexer", "--layouts"]) == 0
    text = capsys.readouterr().out
    assert "dsv4_indexer_fp8_p64: fp8_e4m3, 132 B/token, page_size 64, page 8448 B (cache = uint8 [num_pages, 8448])" in text
    assert "[  8192,   8448)  scale: 64 x 4 B fp32 scale (amax/448)" in text
    assert main(["list", "dsv4_mainkv", "--json"]) == 0
    records = {r["variant"]: r for r in json.loads(capsys.readouterr().out)}
    mla = records["dsv4_mainkv_fp8mla_p64"]
    assert (mla["bytes_per_token"], mla["page_bytes"]) == (584, 37440)
    assert [f["name"] for f in mla["fields"]] == ["nope", "rope", "scales"]
    assert mla["byte_map"][-1] == {"start": 37375, "end": 37440, "what": "padding (never written)"}


def test_yaml_merge_keys_work_and_explicit_keys_override() -> None:
    spec = parse_spec(BASE + "defaults: &d {head_dim: 256, store: fp8_e4m3}\n"
                      "variants:\n  - {<<: *d, name: a, store: bf16}\n", "s.yaml")
    assert (spec.variants[0].head_dim, spec.variants[0].store) == (256, "bf16")


def test_only_bare_names_resolve_to_shipped_specs(tmp_path) -> None:
    with pytest.raises(SpecError, match="no such spec file"):
        load_spec("dsv4_indexer.yml")
    with pytest.raises(SpecError, match="no such spec file"):
        load_spec(str(tmp_path / "specs" / "dsv4_indexer.yaml"))
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"family: fused_norm_rope_store\nname: caf\xe9\n")
    with pytest.raises(SpecError, match="not UTF-8"):
        load_spec(bad)


def test_partial_launch_tables_merge_key_by_key() -> None:
    spec = parse(
        "defaults: {launch: {vec: 4}}\n"
        "matrix: {store: [bf16]}\n"
        "overrides:\n  t_bf16: {launch: {tokens_per_block: 16}}\n"
        "variants:\n  - {name: a, launch: {threads_per_token: 8}}\n"
    )
    by = {v.name: v.launch for v in spec.variants}
    assert (by["t_bf16"].vec, by["t_bf16"].tokens_per_block, by["t_bf16"].threads_per_token) == (4, 16, 0)
    assert (by["a"].vec, by["a"].threads_per_token) == (4, 8)


GUARDED = """family: fused_norm_rope_store
name: g
defaults:
  head_dim: 128
matrix:
  store: [fp8_e4m3, bf16]
  page_size: [64, 48]
overrides:
  g_bf16_p64:
    round_through_bf16: true
variants:
  - {name: wide, head_dim: 2048}
  - {name: fast, launch: {vec: 3}}
"""


@pytest.mark.pure
def test_a_guard_violation_points_at_the_key_that_broke_it() -> None:
    from kernelgen.codegen.guards import precheck
    from kernelgen.errors import GuardViolation

    spec = parse_spec(GUARDED, "g.yaml")
    expected = {"g_fp8_p48": "g.yaml:7:19:", "g_bf16_p64": "g.yaml:10:25:", "wide": "g.yaml:12:28:",
                "fast": "g.yaml:13:26:"}  # the launch table
    for name, where in expected.items():
        with pytest.raises(GuardViolation) as info:
            precheck(spec.variant(name))
        assert str(info.value).startswith(f"{where} variant {name}:"), str(info.value)


@pytest.mark.pure
def test_an_override_may_not_change_an_axis_that_names_the_variant() -> None:
    text = "family: fused_norm_rope_store\nname: h\nmatrix:\n  page_size: [64, 16]\noverrides:\n  h_p64:\n    page_size: 16\n"
    with pytest.raises(SpecError, match=r"^h.yaml:7:5: overrides.h_p64 changes page_size to 16, but page_size is a "
                                        r"matrix axis that names this variant \(p64\)"):
        parse_spec(text, "h.yaml")


@pytest.mark.pure
def test_a_typo_suggests_the_closest_name() -> None:
    spec = load_spec("dsv4_indexer")
    with pytest.raises(SpecError, match=r"did you mean dsv4_indexer_fp8_p64\?"):
        spec.variant("dsv4_indexer_fp8_p65")


def test_the_spec_axes_are_every_field_but_name_launch_and_provenance() -> None:
    """math_fields (and so content keys, records and exports) are the AXES: a new Variant field must join them
    (its spec's promises say which tuned launches may run it, not what it computes)."""
    from dataclasses import fields

    from kernelgen.spec.variant import AXES, Variant

    assert set(AXES) == {f.name for f in fields(Variant)} - {"name", "launch", "spec_name", "origin", "origins",
                                                             "promises"}
