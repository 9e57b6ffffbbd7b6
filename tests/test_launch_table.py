"""Pure tier: the launch parameters are one table (kernelgen/spec/launchparams.py) and every stage reads it.

Adding a parameter must touch only that table and the device code that reads its constant. A test
cannot add one, so these hold each stage to what the table says: Launch's fields, the id and its
parser, the spec's launch and tune keys, the search space, the tie order, the configuration struct
of the generated code, and the one statement of "a launch option is not compiled code"."""
from __future__ import annotations

import itertools
import re
from dataclasses import fields
from pathlib import Path

import pytest

from kernelgen import resources
from kernelgen.codegen.guards import GUARDS
from kernelgen.codegen.launch import ALL_TOKENS, plan_routes, resolve
from kernelgen.codegen.render import render_variant
from kernelgen.errors import SpecError
from kernelgen.spec import parse
from kernelgen.spec.formats import FORMATS
from kernelgen.spec.launchparams import (
    COMPILED,
    ID_EXAMPLE,
    ID_FLAGS,
    ID_NUMBERS,
    IN_SPACE_ORDER,
    IN_TIE_ORDER,
    LAUNCH_PARAMS,
    OPTIONS,
)
from kernelgen.spec.variant import LAUNCH_FLAGS, LAUNCH_KEYS, Launch
from kernelgen.tune import space
from kernelgen.tune.search import simplicity

pytestmark = pytest.mark.pure

V = parse.load_spec("dsv4_indexer").variant("dsv4_indexer_fp8_p64")
PACKAGE = Path(__file__).resolve().parents[1] / "kernelgen"


def _cpp_literal(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _every_value(kind_values: dict[type, object]) -> Launch:
    return Launch(**{p.name: kind_values[p.kind] for p in LAUNCH_PARAMS})


def test_the_table_is_well_formed() -> None:
    n = len(LAUNCH_PARAMS)
    for attr in ("name", "token", "tune"):
        values = [getattr(p, attr) for p in LAUNCH_PARAMS]
        assert len(set(values)) == n, f"two launch parameters share a {attr}: {values}"
    for attr in ("id_pos", "space_pos", "tie_pos"):
        assert sorted(getattr(p, attr) for p in LAUNCH_PARAMS) == list(range(n)), f"{attr} is not 0..{n - 1}"
    assert max(p.id_pos for p in ID_NUMBERS) < min(p.id_pos for p in ID_FLAGS), "an id's numbers come before its flags"
    cpp = [p.cpp for p in COMPILED]
    assert len(set(cpp)) == len(cpp) and all(re.fullmatch(r"k[A-Z]\w*", c or "") for c in cpp)
    assert all(p.cpp is None for p in OPTIONS), "a launch option sets no constant of the compiled code"
    for p in LAUNCH_PARAMS:
        assert p.kind in (int, bool) and p.doc and p.prefer in ("low", "high") and p.limit > 0
        assert p.default == p.kind()


def test_launch_fields_are_the_table() -> None:
    assert [(f.name, f.default) for f in fields(Launch)] == [(p.name, p.default) for p in LAUNCH_PARAMS]
    assert [f.name for f in fields(Launch)] == ["threads_per_token", "tokens_per_block", "vec", "prefetch", "pdl",
                                                "loop", "hw_convert", "min_blocks", "packed_f32", "rope_rows",
                                                "early_reads", "lean_math", "bracket_codes", "warm_pass"]  # positional construction keeps its meaning
    launch = Launch(32, 2, 4, True, True)
    assert (launch.prefetch, launch.pdl, launch.loop) == (True, True, False)


def test_ids_are_the_tokens_in_id_order_and_parse_back() -> None:
    numbers = dict(zip((p.name for p in ID_NUMBERS), itertools.count(3)))
    for flags in itertools.product((False, True), repeat=len(ID_FLAGS)):
        launch = Launch(**numbers, **dict(zip((p.name for p in ID_FLAGS), flags)))
        want = ".".join(f"{p.token}{numbers[p.name]}" for p in ID_NUMBERS)
        want += "".join(f".{p.token}" for p in ID_FLAGS if getattr(launch, p.name))
        assert launch.id == want
        assert Launch.from_id(want) == launch
    # Records on disk are keyed by these strings: they stay byte-identical.
    assert Launch(32, 2, 4, True, True, True).id == "t32.b2.v4.pf.lp.pdl"
    assert Launch(8, 8, 8).id == "t8.b8.v8" and Launch(4, 16, 8, loop=True, pdl=True).id == "t4.b16.v8.lp.pdl"


@pytest.mark.parametrize("text", ["t8.b8", "b8.t8.v8", "t8.b8.v8.zz", "t8.bx.v8", ""])
def test_a_bad_id_is_refused_in_one_line_naming_the_form(text: str) -> None:
    assert ID_EXAMPLE == "t8.b8.v8[.pf][.lp][.pdl][.hw][.pk][.rr][.er][.lm][.bc][.wp][.mb2]"
    with pytest.raises(ValueError) as err:
        Launch.from_id(text)
    assert str(err.value) == f"'{text}' is not a launch id like {ID_EXAMPLE}"


def test_describe_reads_the_table() -> None:
    launch = _every_value({int: 4, bool: True})
    want = " ".join([*(f"{p.name}=4" for p in LAUNCH_PARAMS if p.kind is int and not p.optional),
                     *(p.name for p in ID_FLAGS), *(f"{p.name}=4" for p in LAUNCH_PARAMS if p.optional)])
    assert launch.describe() == want == ("threads_per_token=4 tokens_per_block=4 vec=4 prefetch loop pdl hw_convert "
                                         "packed_f32 rope_rows early_reads lean_math bracket_codes warm_pass min_blocks=4")
    assert launch.id == "t4.b4.v4.pf.lp.pdl.hw.pk.rr.er.lm.bc.wp.mb4" and Launch.from_id(launch.id) == launch
    for old in ("t8.b8.v8", "t32.b2.v4.pf.pdl", "t4.b16.v8.lp"):  # ids written before min_blocks keep their meaning
        assert Launch.from_id(old).id == old and Launch.from_id(old).min_blocks == 0
    for bad in ("t8.b8.v8.mb0", "t8.b8.v8.mb-2", "t8.b8.v8.mbx", "t8.b8.v8.mb2.zz"):
        with pytest.raises(ValueError, match="is not a launch id like"):
            Launch.from_id(bad)
    assert Launch(8, 8, 8).describe() == "threads_per_token=8 tokens_per_block=8 vec=8"


def test_instance_resets_every_launch_option_and_keeps_the_compiled_code() -> None:
    assert [p.name for p in OPTIONS] == ["pdl"]
    on = _every_value({int: 8, bool: True})
    inst = on.instance
    assert all(getattr(inst, p.name) == p.default for p in OPTIONS)
    assert all(getattr(inst, p.name) == getattr(on, p.name) for p in COMPILED)
    assert inst.instance == inst and Launch(32, 2, 4, True, True).instance == Launch(32, 2, 4, True, False)


def test_the_space_is_the_table() -> None:
    assert space.PARAM_NAMES == tuple(p.tune for p in IN_SPACE_ORDER)
    s = space.default_space(V)
    # a parameter bound to some GPUs keeps its default alone where the GPU is not one of them (here: none known)
    assert s.values == tuple((p.tune, (p.default,) if p.capabilities else p.values(V)) for p in IN_SPACE_ORDER)
    point = {"threads_per_token": 32, "vec": 4, "block_threads": 64, "prefetch": True, "pdl": True, "loop": False,
             "hw_convert": False, "resident_threads": 0, "packed_f32": False, "rope_rows": False,
             "early_reads": False, "lean_math": False, "bracket_codes": False, "warm_pass": False}
    assert space.point(point) == Launch(32, 2, 4, True, True)
    valid, rejected = space.candidates(V, space.default_space(V, {"loop": (False, True)}))
    assert {c.instance for c in valid} == set(space.instances(valid)) and rejected


def test_the_space_rejects_by_the_guards_the_table_names() -> None:
    by_id = {g.id: g for g in GUARDS}
    named = {gid for p in LAUNCH_PARAMS for gid in p.guards}
    assert named <= set(by_id), f"unknown guard ids in the launch table: {sorted(named - set(by_id))}"
    assert all(by_id[gid].launch for gid in named), "the launch table names a guard that is not a launch guard"
    own = {g.id for fmt in FORMATS.values() for g in fmt.guards}  # a store format's own rules live in its entry
    unnamed = {g.id for g in GUARDS if g.launch and g.id not in own} - named
    assert not unnamed, f"launch guards no launch parameter names: {sorted(unnamed)}"


def test_the_tie_order_is_the_table() -> None:
    default = resolve(V).launch
    sign = {"low": 1, "high": -1}
    for launch in space.candidates(V, space.default_space(V, {"loop": (False, True)}))[0]:
        want = (launch != default, *(sign[p.prefer] * getattr(launch, p.name) for p in IN_TIE_ORDER))
        assert simplicity(launch, default) == want
    # What the table says, in words: without PDL first, then without prefetch, then fewer threads per token.
    assert [p.name for p in IN_TIE_ORDER][:3] == ["pdl", "prefetch", "threads_per_token"]


def _config_structs(source: str) -> list[list[tuple[str, str, str]]]:
    blocks = re.findall(r"struct \w+_cfg\d+ : \w+_math \{\n((?:  static constexpr .*\n)+)", source)
    return [re.findall(r"  static constexpr (\w+) (\w+) = ([^;]+);", block) for block in blocks]


def test_the_configuration_struct_is_the_compiled_parameters() -> None:
    configs = [Launch(32, 2, 4, True, True, True), Launch(8, 8, 8)]
    plan = plan_routes(V, [(16, configs[0]), (ALL_TOKENS, configs[1])])
    structs = _config_structs(render_variant(V, plan=plan))
    assert structs == [[(p.cpp_type, p.cpp, _cpp_literal(getattr(c, p.name))) for p in COMPILED] for c in configs]


def test_the_device_code_reads_every_compiled_constant() -> None:
    headers = "\n".join(p.read_text() for p in sorted(resources.template_dir().glob("kernelgen/*.cuh")))
    unread = [p.cpp for p in COMPILED if not re.search(rf"\b{p.cpp}\b", headers)]
    assert not unread, f"compiled launch parameters whose constant no device header reads: {unread}"


def test_the_spec_keys_are_the_table() -> None:
    assert LAUNCH_KEYS == tuple(p.name for p in LAUNCH_PARAMS)
    assert LAUNCH_FLAGS == tuple(p.name for p in LAUNCH_PARAMS if p.kind is bool)
    assert parse.TUNE_KEYS == (*(p.tune for p in IN_SPACE_ORDER), "buckets")


def test_a_spec_sets_every_parameter_by_its_table_name() -> None:
    launch = ", ".join(f"{p.name}: {'true' if p.kind is bool else 8}" for p in LAUNCH_PARAMS)
    tune = ", ".join(f"{p.tune}: [{'false, true' if p.kind is bool else 64}]" for p in IN_SPACE_ORDER)
    spec = parse.parse_spec("family: fused_norm_rope_store\nname: s\n"
                            f"variants:\n  - {{name: a, launch: {{{launch}}}}}\ntune: {{{tune}}}\n", "s.yaml")
    assert spec.variants[0].launch == _every_value({int: 8, bool: True})
    assert dict(spec.tune) == {p.tune: ((False, True) if p.kind is bool else (64,)) for p in IN_SPACE_ORDER}
    for p in LAUNCH_PARAMS:
        if p.kind is int:
            with pytest.raises(SpecError, match=f"launch.{p.name} must be a positive integer up to {p.limit}"):
                parse.parse_spec(f"family: fused_norm_rope_store\nname: s\nvariants:\n"
                                 f"  - {{name: a, launch: {{{p.name}: {p.limit + 1}}}}}\n", "s.yaml")
    for p in LAUNCH_PARAMS:  # a field the space sets through another name: the error says that name
        assert bool(p.searched_as) == (p.tune != p.name), p.name
        if p.tune != p.name:
            with pytest.raises(SpecError, match=rf"^s.yaml:\d+:\d+: tune: {p.name} is searched as {p.tune} \(.*e\.g\. "
                                                rf"{p.tune}: \["):
                parse.parse_spec(f"family: fused_norm_rope_store\nname: s\nvariants:\n  - {{name: a}}\n"
                                 f"tune: {{{p.name}: [8]}}\n", "s.yaml")


# "A launch option is not compiled code" is said once, by Launch.instance. Files the launch table's change
# did not own still say it themselves; each leaves NOT_YET_SWITCHED when it switches to Launch.instance.
NOT_YET_SWITCHED: set[str] = set()
# Where pdl=False is about PDL itself, not about what is compiled: KERNELGEN_PDL=0 turns PDL off.
ABOUT_PDL_ITSELF = {"tune/lookup.py"}


def test_a_launch_option_is_reset_in_one_place() -> None:
    restated = re.compile(r"replace\([^()]*(?:\([^()]*\)[^()]*)*\bpdl\s*=\s*False")
    found = {str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py") if restated.search(path.read_text())}
    extra = found - NOT_YET_SWITCHED - ABOUT_PDL_ITSELF
    assert not extra, f"{sorted(extra)}: use Launch.instance (the compiled instance) instead of replace(..., pdl=False)"
    switched = NOT_YET_SWITCHED - found
    assert not switched, f"{sorted(switched)} switched to Launch.instance: drop them from NOT_YET_SWITCHED"
