"""Launch groups (one launch writes a layer's Q output and K/V caches) and dense outputs (slots: token):
spec, guards, the symbol's arguments and check words, the reference path, and compiling for every target."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kernelgen.codegen.checks import table
from kernelgen.codegen.guards import precheck, violations
from kernelgen.codegen.launch import default_plan, resolve_group
from kernelgen.codegen.render import group_args, render_variant, x_align
from kernelgen.errors import GuardViolation, LayoutMismatch, SpecError
from kernelgen.layout.doc import layout_json
from kernelgen.layout.layout import layout_of
from kernelgen.layout.pages import head_slots, pages_of, slot_columns, split_slots
from kernelgen.measure import reference
from kernelgen.measure.inputs import group_inputs, make_inputs, member_inputs
from kernelgen.measure.oracle import check_against_oracle
from kernelgen.measure.verify import compare, verify_group
from kernelgen.runtime.group_op import GroupChecker, as_rows
from kernelgen.spec.parse import load_spec, parse_spec
from kernelgen.spec.variant import Variant

SPEC = load_spec("attention_prep")
HEAD = "family: fused_norm_rope_store\nname: t\ndefaults: {head_dim: 128, rope_dim: 128, rope_place: head, page_size: 16}\n"
VARIANTS = ("variants:\n  - {name: q1, heads: 4, slots: token, page_size: 1}\n  - {name: k1, heads: 2}\n"
            "  - {name: v1, heads: 2, rope_dim: 0}\n")


def parse(groups: str) -> object:
    return parse_spec(HEAD + VARIANTS + groups, "t.yaml")


@pytest.mark.pure
def test_groups_parse_with_members_by_role_and_a_shared_launch() -> None:
    spec = parse("groups:\n  - {name: layer, q: q1, k: k1, v: v1, launch: {threads_per_token: 16}}\n")
    [g] = spec.groups
    assert g.roles == ("q", "k", "v") and g.member("k").name == "k1" and g.launch.threads_per_token == 16
    assert spec.kernel("layer") is g and spec.kernel("k1").name == "k1"
    resolved = resolve_group(g)
    assert {v.launch for _, v in resolved.members} == {resolved.launch}
    assert resolved.launch.threads_per_token == 16


@pytest.mark.pure
@pytest.mark.parametrize("groups, words", [
    ("groups:\n  - {name: layer, q: qx1, k: k1}\n", "t.yaml:9:22: group member q: no variant named 'qx1' in this spec "
                                                  "(did you mean q1?)"),
    ("groups:\n  - {name: layer}\n", "group 'layer' has no members: name at least one of q, k, v"),
    ("groups:\n  - {name: k1, q: q1}\n", "group name 'k1' is already taken"),
    ("groups:\n  - {name: layer, q: q1, o: k1}\n", "unknown group key 'o'"),
    ("groups:\n  - {q: q1}\n", "each launch group needs a 'name:'"),
    ("groups: {name: layer}\n", "groups must be a list of mappings"),
    ("groups:\n  - {name: 1layer, q: q1}\n", "must be a C identifier"),
])
def test_a_bad_group_gets_one_line_that_says_where_and_what(groups: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        parse(groups)
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.pure
def test_members_that_rotate_share_one_freqs_table_and_the_launch_fits_every_member() -> None:
    spec = parse_spec(HEAD + VARIANTS + "  - {name: k64, heads: 2, rope_dim: 64}\n"
                      "groups:\n  - {name: mixed, q: q1, k: k64}\n  - {name: wide, q: q1, k: k1, launch: {vec: 8, "
                      "threads_per_token: 32}}\n", "t.yaml")
    mixed, wide = spec.groups
    with pytest.raises(GuardViolation, match=r"group mixed: members q and k rotate with one freqs table, so their "
                                             r"rope_dim and rope_table must agree \(q: 128 pairs, k: 64 pairs\)"):
        precheck(mixed)
    assert [g.id for g in violations(mixed)] == ["group_one_freqs"]
    assert "static_assert" in render_variant(spec.groups[1].with_launch(replace(wide.launch, vec=4)), check=False)
    with pytest.raises(GuardViolation, match=r"group wide: member q \(q1\) under the group's launch t32\.b2\.v8: "
                                             r"head_dim must be a multiple of launch.threads_per_token x launch.vec"):
        precheck(wide)
    assert "static_assert(t_mixed_q_math::kRopeDim == t_mixed_k_math::kRopeDim" in render_variant(
        replace(mixed, name="t_mixed"), check=False)


@pytest.mark.pure
def test_members_that_read_positions_read_them_in_one_shape() -> None:
    """One positions tensor serves a group: a member whose temperature reads [N] beside one whose M-RoPE reads [3, N]
    is refused (guard group_one_positions) in Python and by the generated static_assert's words; a shipped M-RoPE
    group's members agree."""
    g = SPEC.group("qwen25_vl_7b")
    q = dict(g.members)["q"]
    nope = replace(q, name="q_nope_temp", rope_dim=0, rope_sections=(), temperature="llama4")
    assert (nope.position_streams, dict(g.members)["k"].position_streams) == (1, 3)
    mixed = replace(g, name="t_mixed_positions", members=tuple((r, nope if r == "q" else v) for r, v in g.members))
    with pytest.raises(GuardViolation, match=r"group t_mixed_positions: members q and k read one positions tensor, so "
                                             r"they must read it in one shape \(q: \[N\], k: \[3, N\]\) "
                                             r"\[guard group_one_positions\]"):
        precheck(mixed)
    assert [gd.id for gd in violations(mixed)] == ["group_one_positions"]
    assert ("static_assert((t_mixed_positions_q_math::kRopeDim > 0 ? t_mixed_positions_q_math::kStreams : 1) == "
            "(t_mixed_positions_k_math::kRopeDim > 0 ? t_mixed_positions_k_math::kStreams : 1)") in render_variant(
        mixed, check=False)
    precheck(g)
    assert violations(g) == []


@pytest.mark.pure
def test_the_symbol_takes_each_members_tensors_by_role_and_the_shared_ones_once() -> None:
    g = SPEC.group("cake_8_1_fp8")
    assert group_args(g) == ("q", "k", "v", "q_weight", "k_weight", "freqs", "positions", "out_loc",
                                              "q_out", "k_cache", "v_cache", "k_scale", "v_scale")
    assert g.content_key() != SPEC.group("cake_8_1").content_key()
    assert replace(g, name="other").content_key() == g.content_key()


@pytest.mark.pure
def test_group_checks_name_the_member_argument_in_the_symbols_words() -> None:
    g = SPEC.group("qwen3_8b_bf16")
    checker = GroupChecker(g, default_plan(g))
    inputs = {k: t for k, t in group_inputs(g, 8, 4, "cpu", seed=1).items() if k != "qkv"}
    with pytest.raises(LayoutMismatch, match=r"^qwen3_8b_bf16: q must be on a CUDA device, got bfloat16 \[8, 4096\] on cpu$"):
        checker.check(inputs)
    with pytest.raises(LayoutMismatch, match=r"^qwen3_8b_bf16: k must have as many rows \(tokens\) as q, got "
                                             r"bfloat16 \[4, 1024\] on cpu$"):
        checker.check({**inputs, "k": inputs["k"][:4]})
    with pytest.raises(LayoutMismatch, match=r"^qwen3_8b_bf16: k_weight must be float32 \[128\], got bfloat16"):
        checker.check({**inputs, "k_weight": inputs["k_weight"].bfloat16()})
    with pytest.raises(LayoutMismatch, match=r"^qwen3_8b_bf16: v_cache rows are 100 bytes but qwen3_8b_bf16_v writes "
                                             r"32768-byte pages"):
        checker.check({**inputs, "v_cache": inputs["v_cache"][:, :100]})
    with pytest.raises(LayoutMismatch, match=r"^qwen3_8b_bf16: q_out must be a 2-D uint8 tensor \[N, 8192\]"):
        checker.check({**inputs, "q_out": inputs["q_out"].view(torch.bfloat16)})
    with pytest.raises(LayoutMismatch, match=r"^qwen3_8b_bf16: v_weight must be a torch tensor, got NoneType|"
                                             r"^qwen3_8b_bf16: positions must be a torch tensor, got NoneType"):
        checker.check({**inputs, "positions": None})


@pytest.mark.pure
def test_debug_mode_checks_a_groups_slots_and_a_variant_takes_its_names_as_keywords(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """One Op for variants and launch groups: KERNELGEN_DEBUG's duplicate-slot check covers a group's caches (a slot
    two rows share is refused before the launch, one past the pools may repeat), and a variant's op called with its
    symbol's names as keywords makes the symbol call its positional call makes. The op wraps a fake library (no GPU
    here) whose symbol records its calls; the per-call tensor checks (which want CUDA tensors) are stubbed to pass."""
    from kernelgen import knobs
    from kernelgen.build.store import Artifact
    from kernelgen.runtime import op as op_module

    launched: list[tuple] = []
    monkeypatch.setattr(op_module, "load_module", lambda path: {
        name: lambda *args: launched.append(args) for k in (SPEC.group("qwen3_8b_bf16"), SPEC.variant("qwen3_8b_bf16_k"))
        for name in (k.name, f"{k.name}_config")})
    monkeypatch.setattr(op_module.InputChecker, "check", lambda self, *args, **kw: None)
    g = SPEC.group("qwen3_8b_bf16")
    with knobs.scope(DEBUG="1"):
        op = op_module.Op(Artifact(variant=g, key="fake", directory=tmp_path, launch_plan=default_plan(g)))
    inputs = {k: t for k, t in group_inputs(g, 6, 3, "cpu", seed=1).items() if k != "qkv"}
    past = inputs["k_cache"].shape[0] * g.member("k").page_size
    op(**{**inputs, "out_loc": torch.tensor([0, 1, past, past, -1, -1])})
    assert len(launched) == 1
    with pytest.raises(LayoutMismatch, match=r"^qwen3_8b_bf16: out_loc names slot 2 more than once in one call"):
        op(**{**inputs, "out_loc": torch.tensor([0, 1, 2, 2, -1, -1])})
    assert len(launched) == 1, "a refused call must not launch"
    v = SPEC.variant("qwen3_8b_bf16_k")
    op = op_module.Op(Artifact(variant=v, key="fake", directory=tmp_path, launch_plan=default_plan(v)))
    i = make_inputs(v, 4, 2, "cpu", seed=1)
    op(i["x"], i["weight"], i["freqs"], i["positions"], i["out_loc"], i["kvcache"], eps=1e-5)
    op(x=i["x"], weight=i["weight"], freqs=i["freqs"], positions=i["positions"], out_loc=i["out_loc"],
       kvcache=i["kvcache"], eps=1e-5)
    assert launched[-1] == launched[-2] and len(launched[-1]) == len(op.args) + 1


@pytest.mark.pure
def test_dense_outputs_take_no_out_loc_and_accept_strided_rows() -> None:
    """slots: token writes token t to row t: no out_loc argument, and rows of any stride (Q in place, in qkv)."""
    q = SPEC.variant("qwen3_8b_bf16_q")
    checks = table(q, layout_of(q), 16)
    assert "out_loc" not in {c.arg for c in checks}
    out = [c for c in checks if c.arg == "kvcache"]
    assert [c.kind for c in out] == ["dtype_shape", "page_bytes", "rows", "device", "aligned"]
    assert layout_of(q).page_bytes == 32 * 128 * 2
    inputs = make_inputs(q, 5, 1, "cpu", seed=2)
    assert inputs["out_loc"].tolist() == [0, 1, 2, 3, 4] and inputs["kvcache"].shape == (5, 8192)
    qkv = torch.zeros(5, 6144, dtype=torch.bfloat16)
    rows = as_rows(qkv[:, :4096])
    assert rows.shape == (5, 8192) and rows.stride() == (12288, 1) and rows.data_ptr() == qkv.data_ptr()
    assert as_rows(torch.zeros(5, 32, 128, dtype=torch.bfloat16)).shape == (5, 8192)
    with pytest.raises(GuardViolation, match=r"slots: token writes token t to row t of a dense output \(one token per "
                                             r"row\): set page_size: 1 \[guard token_slots_one_per_page\]"):
        precheck(Variant("dense16", slots="token", page_size=16))


def _written_value_byte(g: object, role: str, tensors: dict) -> tuple[int, int]:
    """(page, column) of a byte of member `role`'s value field that the call writes: its first token whose row is
    written (a slot in the pool, and with RoPE a position inside freqs), head 0, the field's fourth byte."""
    v = g.member(role)  # type: ignore[attr-defined]
    mine = member_inputs(g, role, tensors)
    keep = reference.written_rows(v, mine["out_loc"], mine["positions"], mine["freqs"], mine["kvcache"])
    token = int(torch.nonzero(keep)[0])
    layout = layout_of(v)
    slot = head_slots(mine["out_loc"][token:token + 1], v.heads)[:1]
    valid, page, off = split_slots(layout, slot, mine["kvcache"].shape[0])
    assert bool(valid[0])
    return int(page[0]), int(slot_columns(layout.field("values"), off)[0, 3])


@pytest.mark.pure
@pytest.mark.parametrize("role", ["q", "k", "v"])
def test_verify_group_compares_every_member_and_catches_a_wrong_byte(role: str) -> None:
    """The group's comparison, with the reference as the 'kernel' (the CPU tier has no GPU): every member agrees;
    one bit flipped in a value byte that the call writes, in one member's output, fails that member's report
    (one differing code, nothing outside the written slots) and only that member's."""
    g = resolve_group(SPEC.group("cake_8_1_fp8"))
    flipped: list[tuple[str, int, int]] = []

    def run(eps: float, corrupt: str = "", **tensors: object) -> None:
        for r, v in g.members:
            mine = member_inputs(g, r, tensors)
            reference.store(v, mine["x"], mine["weight"], mine["freqs"], mine["positions"], mine["out_loc"],
                            mine["kvcache"], eps, mine["bias"], scale=mine["scale"])
        if corrupt:
            page, column = _written_value_byte(g, corrupt, tensors)
            tensors[g.names(corrupt)["kvcache"]][page, column] ^= 1  # type: ignore[index]
            flipped.append((corrupt, page, column))

    names = ["cake_8_1_fp8_q", "cake_8_1_fp8_k", "cake_8_1_fp8_v"]
    reports = verify_group(g, run, 37, 4, "cpu", seed=3)
    assert [r.variant for r in reports] == names
    assert all(r.ok and r.written_rows > 0 for r in reports), [r.as_dict() for r in reports]
    bad = verify_group(g, lambda eps, **t: run(eps, role, **t), 37, 4, "cpu", seed=3)
    assert [f[0] for f in flipped] == [role]  # the byte was flipped, in the member's own output
    failed = [r for r in bad if not r.ok]
    assert [r.variant for r in failed] == [g.member(role).name], [r.as_dict() for r in bad]
    [report] = failed
    assert (report.code_mismatches, report.outside_changed, report.written_rows) == \
        (1, 0, reports[names.index(g.member(role).name)].written_rows), report.as_dict()


@pytest.mark.pure
def test_every_shipped_group_passes_its_guards_and_its_members_are_shipped_variants() -> None:
    names = {v.name for v in SPEC.variants}
    for g in SPEC.groups:
        precheck(g)
        assert {v.name for _, v in g.members} <= names
        assert x_align(g.member("q"), default_plan(g)) == 16


@pytest.mark.build
def test_shipped_groups_compile_for_every_target(tmp_path: Path) -> None:
    """Every shipped launch group (and so every member's code) compiles for sm_90a, sm_100a and sm_120a."""
    from kernelgen.build import toolchain
    from kernelgen.build.lifecycle import compile_only

    from kernelgen.spec.parse import shipped_specs

    groups = [g for spec in shipped_specs() for g in spec.groups]  # attention_prep's and dsv4_q_paths' layer_q_kv
    results = compile_only(groups, toolchain.detect(), ("sm_90a", "sm_100a", "sm_120a"))
    assert [r for r in results if not r.ok] == [] and len(results) == 3 * len(groups)


@pytest.mark.pure
def test_the_symbol_applies_the_python_checks_in_the_same_order_with_the_same_words() -> None:
    """The generated check function's messages, in source order, are the Python table's (what a GPU test holds
    both sides to on bad tensors)."""
    import re

    from kernelgen.codegen.render import group_checks

    g = SPEC.group("cake_64_8_fp8")
    source = render_variant(g)
    body = source[source.index(f"void {g.name}_check("):source.index(f"void {g.name}(")]
    symbol = [bytes(m, "utf-8").decode("unicode_escape") for m in
              re.findall(r'TVM_FFI_THROW\(ValueError\) << "((?:\\.|[^"\\])*)"', body)]
    python = [c.parts(g.name)[0] for _, block in group_checks(g, default_plan(g)) for c in block]
    assert symbol == python and len(python) > 40


@pytest.mark.pure
def test_a_model_in_its_configs_words_expands_into_three_variants_and_their_group() -> None:
    spec = parse_spec("family: fused_norm_rope_store\nname: m\nmodels:\n"
                      "  - {name: glm, num_q_heads: 32, num_kv_heads: 2, head_dim: 128, rotary_dim: 64, "
                      "v_head_dim: 64, kv_store: fp8_scaled, qk_norm: rms_gemma}\n"
                      "  - {name: kv_only, num_q_heads: 32, num_kv_heads: 8, head_dim: 128, q_store: none}\n", "m.yaml")
    glm, kv_only = spec.groups
    q, k, v = (glm.member(r) for r in ("q", "k", "v"))
    assert (q.heads, q.slots, q.page_size, q.rope_dim, q.rope_place, q.norm, q.store) == \
        (32, "token", 1, 64, "head", "rms_gemma", "bf16")
    assert (k.heads, k.page_size, k.rope_dim, k.norm, k.store) == (2, 16, 64, "rms_gemma", "fp8_scaled")
    assert (v.heads, v.head_dim, v.rope_dim, v.norm, v.store) == (2, 64, 0, "none", "fp8_scaled")
    assert kv_only.roles == ("k", "v") and [x.name for x in spec.variants][-2:] == ["kv_only_k", "kv_only_v"]
    # the shipped models are the explicit groups they replaced (same members' math): cake_64_8 was tuned as an
    # explicit group, and its H200 record is keyed by the content key the model entry gives
    import json

    shipped = json.loads((Path(__file__).resolve().parents[1] / "cache" / "nvidia-h200-sm90-132sms.json").read_text())
    assert shipped["variants"][SPEC.group("cake_64_8").content_key()]["variant"] == "cake_64_8"
    assert dict(k.origins)["store"] == "m.yaml:4:108"  # where kv_store is set: a guard on k's store points there


@pytest.mark.pure
@pytest.mark.parametrize("model, words", [
    ("{name: x, num_q_heads: 32, head_dim: 128}", "m.yaml:4:5: model 'x' needs num_kv_heads:"),
    ("{name: x, num_q_heads: 32, num_kv_heads: 8, head_dim: 128, kv_store: fp9}", "m.yaml:4:74: kv_store 'fp9' is not one of fp8_e4m3,"),
    ("{name: x, num_q_heads: 32, num_kv_heads: 8, head_dim: 128, heads: 4}", "unknown model key 'heads'"),
    ("{num_q_heads: 32, num_kv_heads: 8, head_dim: 128}", "each model needs a 'name:'"),
    ("{name: x, num_q_heads: 0, num_kv_heads: 8, head_dim: 128}", "m.yaml:4:28: num_q_heads must be an integer from 1"),
])
def test_a_bad_model_gets_one_line_that_says_where_and_what(model: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(f"family: fused_norm_rope_store\nname: m\nmodels:\n  - {model}\n", "m.yaml")
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.pure
def test_a_model_whose_heads_break_a_guard_names_the_models_key() -> None:
    spec = parse_spec("family: fused_norm_rope_store\nname: m\nmodels:\n"
                      "  - {name: big, num_q_heads: 256, num_kv_heads: 8, head_dim: 128}\n", "m.yaml")
    with pytest.raises(GuardViolation, match=r"member q \(big_q\) .*heads must be between 1 and 128 \[guard heads_range\]"):
        precheck(spec.groups[0])
    with pytest.raises(GuardViolation, match=r"^m.yaml:4:30: variant big_q: heads must be between 1 and 128"):
        precheck(spec.variant("big_q"))


@pytest.mark.build
def test_a_group_is_a_torch_custom_op_whose_fake_checks_metadata(tmp_path: Path) -> None:
    """torch.ops.kernelgen.<group>: the schema names every tensor and marks the outputs mutated; on fake CUDA
    tensors (torch.compile's tracing) the fake applies the group's checks to metadata; real CPU tensors reach the
    symbol, which refuses them in kernelgen's words."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from kernelgen import knobs
    from kernelgen.runtime.group_op import load_group_kernel
    from kernelgen.runtime.torch_ops import group_schema, register_group

    with knobs.scope(CACHE_DIR=str(tmp_path)):
        op = load_group_kernel(SPEC.group("cake_8_1"), arch="sm_90a", gpu=None)
    assert group_schema(op) == ("(Tensor q, Tensor k, Tensor v, Tensor q_weight, Tensor k_weight, Tensor freqs, "
                                "Tensor positions, Tensor out_loc, Tensor(a!) q_out, Tensor(b!) k_cache, "
                                "Tensor(c!) v_cache, float eps=1e-06) -> ()")
    torch_op = register_group(op)
    cpu = {k: t for k, t in group_inputs(op.group, 4, 2, "cpu", seed=1).items() if k != "qkv"}
    with pytest.raises(LayoutMismatch, match=r"^cake_8_1: q must be on a CUDA device"):
        torch_op(*(cpu[a] for a in op.args))
    with FakeTensorMode():
        # the inputs' shapes and strides (q, k, v: columns of one qkv); slicing a fake CUDA tensor needs a CUDA build
        fake = {k: torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda") for k, t in cpu.items()}
        torch_op(*(fake[a] for a in op.args), eps=1e-6)  # metadata passes
        with pytest.raises(LayoutMismatch, match=r"^cake_8_1: k must have as many rows \(tokens\) as q"):
            short = torch.empty_strided((2, 128), (1280, 1), dtype=torch.bfloat16, device="cuda")
            torch_op(*(short if a == "k" else fake[a] for a in op.args))


@pytest.mark.pure
@pytest.mark.parametrize("name", ["cake_64_8_fp8", "llama3_8b_fp8", "gptoss_bf16", "phi3_mini", "phi4_mini"])
def test_the_float64_oracle_holds_every_member_of_a_group(name: str) -> None:
    """The oracle (float64 math, a window for float32 rounding) accepts every stored value of every member that
    the reference wrote, and nothing outside the written slots changed; a wrong code is a violation."""
    from kernelgen.measure.oracle import check_group_against_oracle

    g = resolve_group(SPEC.group(name))
    inputs = group_inputs(g, 37, 4, "cpu", seed=5)
    poisons = {role: inputs[g.names(role)["kvcache"]].clone() for role in g.roles}
    for role, v in g.members:
        mine = member_inputs(g, role, inputs)
        reference.store(v, mine["x"], mine["weight"], mine["freqs"], mine["positions"], mine["out_loc"],
                        mine["kvcache"], 1e-6, mine["bias"], scale=mine["scale"])
    reports = check_group_against_oracle(g, inputs, poisons=poisons)
    assert all(r.ok and r.rows > 0 for r in reports), [r.violations for r in reports]
    k_cache = inputs[g.names("k")["kvcache"]]
    slot = int(inputs["out_loc"][inputs["out_loc"] >= 0][0])
    page, row = divmod(slot * g.member("k").heads, g.member("k").page_size * g.member("k").heads)
    k_cache[page, row * layout_of(g.member("k").row_variant).fields[0].stride] ^= 0x10  # one value's bits
    assert not check_group_against_oracle(g, inputs, poisons=poisons)[1].ok


@pytest.mark.pure
def test_hnd_pages_put_each_head_s_slots_together() -> None:
    """kv_layout: hnd: a page is [heads, page_size, record]; the reference writes head h of the token in slot s
    at [s // page_size, h, s % page_size] (checked through a plain torch view of the pool), and decode reads it
    back; the same rows under NHD land at [s // page_size, s % page_size, h]."""
    base = Variant("kv_nhd", head_dim=128, heads=4, rope_dim=128, rope_place="head", rope_style="neox", norm="rms",
                   store="bf16", page_size=16)
    hnd = replace(base, name="kv_hnd", kv_layout="hnd")
    assert layout_of(hnd).page_bytes == layout_of(base).page_bytes and layout_of(hnd).hnd
    assert layout_of(hnd).byte_map() == [(0, 16384, "values: 4 x 16 x 256 B bf16 values")]
    inputs = make_inputs(hnd, 40, 6, "cpu", seed=7)
    caches = {}
    for v in (base, hnd):
        cache = torch.zeros_like(inputs["kvcache"])
        reference.store(v, inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"], inputs["out_loc"], cache)
        caches[v.kv_layout] = cache
    pages = inputs["kvcache"].shape[0]
    nhd_view = caches["nhd"].view(torch.bfloat16).view(pages, 16, 4, 128)
    hnd_view = caches["hnd"].view(torch.bfloat16).view(pages, 4, 16, 128)
    written = reference.written_rows(hnd, inputs["out_loc"], inputs["positions"], inputs["freqs"], caches["hnd"])
    slots = inputs["out_loc"][written]
    assert slots.numel() > 20
    assert torch.equal(hnd_view[slots // 16, :, slots % 16], nhd_view[slots // 16, slots % 16, :])
    decoded = pages_of(hnd).decode(caches["hnd"], slots)
    assert torch.equal(decoded, hnd_view[slots // 16, :, slots % 16].float())
    # the comparison and the oracle read the same places: the reference's cache against itself is exact
    poison = torch.zeros_like(inputs["kvcache"])
    assert compare(hnd, caches["hnd"], caches["hnd"], poison, inputs).ok
    assert not compare(hnd, caches["nhd"], caches["hnd"], poison, inputs).ok
    assert check_against_oracle(hnd, caches["hnd"], inputs, poison=poison).ok
    with pytest.raises(GuardViolation, match=r"kv_layout: hnd arranges the heads of a paged cache .* \[guard hnd_needs_pages\]"):
        precheck(replace(hnd, slots="token", page_size=1))
    spec = parse_spec("family: fused_norm_rope_store\nname: m\nmodels:\n  - {name: hm, num_q_heads: 8, "
                      "num_kv_heads: 4, head_dim: 128, kv_layout: hnd}\n", "m.yaml")
    assert [spec.groups[0].member(r).kv_layout for r in ("q", "k", "v")] == ["nhd", "hnd", "hnd"]


@pytest.mark.build
def test_hnd_variants_compile_for_every_target() -> None:
    from kernelgen.build import toolchain
    from kernelgen.build.lifecycle import compile_only

    v = Variant("hnd_fp8", head_dim=128, heads=8, rope_dim=128, rope_place="head", rope_style="neox",
                store="fp8_scaled", page_size=16, kv_layout="hnd")
    results = compile_only([v], toolchain.detect(), ("sm_90a", "sm_100a", "sm_120a"))
    assert all(r.ok for r in results), results


@pytest.mark.pure
def test_deepseek_v4_query_paths_are_shipped_variants_and_a_group() -> None:
    """specs/dsv4_q_paths.yaml: the indexer's Q prep (64 heads, Hadamard, per-head fp8 into a dense output), the
    main Q rotation (128 heads of 512) and the layer's Q rotation + FlashMLA KV insert in one launch; its KV member
    is dsv4_mainkv's FlashMLA variant itself (same content key, so the same kernel and record)."""
    spec = load_spec("dsv4_q_paths")
    assert spec.variant("main_kv").content_key() == load_spec("dsv4_mainkv").variant("dsv4_mainkv_fp8mla_p64").content_key()
    q = spec.variant("indexer_q")
    assert (q.heads, q.hadamard, q.store, q.slots) == (64, True, "fp8_e4m3", "token")
    assert [v.name for _, v in spec.group("layer_q_kv").members] == ["main_q", "main_kv"]


@pytest.mark.pure
def test_a_new_model_with_a_shipped_shape_is_one_entry_that_reuses_its_records() -> None:
    """examples/more_models.yaml adds Mistral-7B fp8 as one model entry; its kernels have the content keys of
    attention_prep's llama3_8b_fp8, so the shipped H200 records serve it."""
    mistral = load_spec(str(Path(__file__).resolve().parents[1] / "examples" / "more_models.yaml")).group("mistral_7b_fp8")
    llama = SPEC.group("llama3_8b_fp8")
    assert mistral.content_key() == llama.content_key()
    assert [v.content_key() for _, v in mistral.members] == [v.content_key() for _, v in llama.members]


@pytest.mark.pure
def test_partial_rotary_over_96_dims_is_hf_s_rotate_half_on_the_first_96() -> None:
    """Phi-4-mini (rotary_dim 96 of a 128-dim head, not a power of two): the K cache holds HF's
    q_rot = k[..., :96] rotated by rotate_half (pairs j, j + 48) and k[..., 96:] passed through, written here
    independently in float64 from the cos_sin_cache; the device code's pair lookup for such a rope differs
    from the power-of-two one (guard neox_partner_reach)."""
    g = resolve_group(SPEC.group("phi4_mini"))
    k = g.member("k")
    assert (k.rope_dim, k.rope_style, k.rope_table, k.head_dim) == (96, "neox", "halves", 128)
    inputs = group_inputs(g, 20, 3, "cpu", seed=11)
    mine = member_inputs(g, "k", inputs)
    reference.store(k, mine["x"], mine["weight"], mine["freqs"], mine["positions"], mine["out_loc"], mine["kvcache"])
    written = reference.written_rows(k, mine["out_loc"], mine["positions"], mine["freqs"], mine["kvcache"])
    x = mine["x"][written].double().reshape(-1, k.heads, 128)
    cs = mine["freqs"][mine["positions"][written].long()].double()
    cos = torch.cat([cs[:, :48], cs[:, :48]], dim=-1)[:, None, :]
    sin = torch.cat([cs[:, 48:], cs[:, 48:]], dim=-1)[:, None, :]
    rot, rest = x[..., :96], x[..., 96:]
    half = torch.cat([-rot[..., 48:], rot[..., :48]], dim=-1)  # rotate_half
    want = torch.cat([rot * cos + half * sin, rest], dim=-1)
    got = pages_of(k).decode(mine["kvcache"], mine["out_loc"][written]).double()  # [N, heads, 128]
    assert torch.allclose(got, want, rtol=1 / 128, atol=1e-2)
    assert not torch.allclose(want[..., 48:96], x[..., 48:96])  # the upper half rotated too


@pytest.mark.pure
def test_a_full_rotary_256_dim_head_matches_its_float64_oracle() -> None:
    """rope_dim 256 (Gemma's full rotary on D 256): the reference's rows are within the oracle's bound, NeoX pairs
    (j, j + 128) over the whole head."""
    from kernelgen.measure.oracle import check_against_oracle

    v = Variant("rot256", head_dim=256, heads=2, rope_dim=256, rope_place="head", rope_style="neox", norm="rms_gemma",
                rope_table="halves", store="bf16", page_size=16)
    precheck(v)
    inputs = make_inputs(v, 30, 4, "cpu", seed=8)
    reference.store(v, inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"], inputs["out_loc"],
                    inputs["kvcache"])
    assert check_against_oracle(v, inputs["kvcache"], inputs).ok


@pytest.mark.pure
def test_a_joint_pool_s_halves_take_k_and_v_and_nothing_else() -> None:
    """kv_pool: joint: K and V are pool[:, 0] and pool[:, 1] of one [num_pages, 2, page] pool (FlashInfer's single
    paged_kv_cache): the reference writes K's pages and V's pages, each leaving the other half alone; pool_halves
    views a typed bf16 pool [num_pages, 2, page_size, heads, head_dim] as the two uint8 caches without a copy."""
    from kernelgen.layout.pages import pool_halves

    g = resolve_group(SPEC.group("qwen3_8b_joint"))
    k, v = g.member("k"), g.member("v")
    assert layout_of(k).joint and layout_of(k).page_stride == 2 * layout_of(k).page_bytes
    manifest = layout_json(layout_of(k))  # what an export's manifest tells a pool allocator
    assert manifest["pool"] == "joint" and manifest["page_stride"] == 2 * manifest["page_bytes"]
    assert "pool" not in layout_json(layout_of(resolve_group(SPEC.group("qwen3_8b_bf16")).member("k")))
    inputs = group_inputs(g, 40, 6, "cpu", seed=5)
    kc, vc = inputs["k_cache"], inputs["v_cache"]
    assert kc.stride(0) == vc.stride(0) == 2 * kc.shape[1] and vc.data_ptr() - kc.data_ptr() == kc.shape[1]
    pool = torch.as_strided(kc, (kc.shape[0], 2, kc.shape[1]), (kc.stride(0), kc.shape[1], 1))
    before = pool.clone()
    mine = member_inputs(g, "k", inputs)
    reference.store(k, mine["x"], mine["weight"], mine["freqs"], mine["positions"], mine["out_loc"], mine["kvcache"])
    assert torch.equal(pool[:, 1], before[:, 1]) and not torch.equal(pool[:, 0], before[:, 0])
    written = reference.written_rows(k, inputs["out_loc"], inputs["positions"], inputs["freqs"], kc)
    slots = inputs["out_loc"][written]
    typed = pool.view(torch.bfloat16).view(pool.shape[0], 2, 16, 8, 128)  # the pool as an engine allocates it
    assert torch.equal(pages_of(k).decode(kc, slots), typed[slots // 16, 0, slots % 16].float())
    halves = pool_halves(typed)
    assert [h.data_ptr() for h in halves] == [kc.data_ptr(), vc.data_ptr()] and halves[1].stride() == vc.stride()
    assert pages_of(k).allocate(3).shape == (3, 2, layout_of(k).page_bytes)
    with pytest.raises(ValueError, match=r"a joint K/V pool must be a tensor \[num_pages, 2, \.\.\.\]"):
        pool_halves(typed[:, :1])


@pytest.mark.pure
@pytest.mark.parametrize("name, elem", [("llama3_8b_vllm_bf16", 2), ("llama3_8b_vllm_fp8", 1)])
def test_a_packed_pool_holds_k_then_v_in_every_cell_as_vllm_indexes_it(name: str, elem: int) -> None:
    """kv_pool: packed is vLLM's cache [num_blocks, block_size, num_kv_heads, 2 x head_size] (vllm 0.34
    v1/kv_cache_interface.py, the backends' kv_cache.split(head_size, dim=-1)): K of (block b, slot n, head h) at
    element b*stride + n*(H*2D) + h*2D + d, V at the same + D. The reference writes K's records and V's, each leaving
    the other's alone; halves() views vLLM's typed tensor as the two uint8 caches without a copy."""
    g = resolve_group(SPEC.group(name))
    k, v = g.member("k"), g.member("v")
    lay = layout_of(k)
    record = 128 * elem
    assert (lay.pool_record, lay.page_stride, lay.page_bytes) == (record, 16 * 8 * 2 * record, 16 * 8 * 2 * record - record)
    assert [f.stride for f in lay.fields] == [2 * record]
    manifest = layout_json(lay)
    assert manifest["pool"] == "packed" and manifest["pool_record"] == record
    inputs = group_inputs(g, 40, 6, "cpu", seed=5)
    kc, vc = inputs["k_cache"], inputs["v_cache"]
    assert kc.stride(0) == vc.stride(0) == lay.page_stride and vc.data_ptr() - kc.data_ptr() == record
    pool = kc._base
    typed = pool.view(pool.shape[0], 16, 8, 2, record)  # vLLM's cell: [K | V] bytes of one (slot, head)
    for role, member in (("k", k), ("v", v)):
        before = typed.clone()
        mine = member_inputs(g, role, inputs)
        reference.store(member, mine["x"], mine["weight"], mine["freqs"], mine["positions"], mine["out_loc"],
                        mine["kvcache"], scale=mine.get("scale"))
        other = 1 if role == "k" else 0
        assert torch.equal(typed[..., other, :], before[..., other, :]), role  # the other cache's records untouched
    written = reference.written_rows(k, inputs["out_loc"], inputs["positions"], inputs["freqs"], kc)
    slots = inputs["out_loc"][written]
    got_k = pages_of(k).decode(kc, slots, member_inputs(g, "k", inputs).get("scale"))
    assert bool(got_k.isfinite().all())
    if elem == 2:  # bf16: the decoded rows are the cell's first D values as vLLM reads them
        cells = pool.view(torch.bfloat16).view(pool.shape[0], 16, 8, 256)
        assert torch.equal(got_k, cells[slots // 16, slots % 16, :, :128].float())
        assert torch.equal(pages_of(v).decode(vc, slots), cells[slots // 16, slots % 16, :, 128:].float())
    vllm = torch.zeros(3, 16, 8, 256, dtype=torch.bfloat16 if elem == 2 else torch.uint8)  # as vLLM allocates it
    halves = pages_of(k).halves(vllm)
    assert [h.data_ptr() - vllm.data_ptr() for h in halves] == [0, record]
    assert pages_of(k).allocate(3).shape == (3, lay.page_stride)
    with pytest.raises(ValueError, match=r"a packed K/V pool's pages are \d+ B"):
        pages_of(k).halves(vllm[:, :8])
    checker = GroupChecker(g, default_plan(g))
    args = {a: t for a, t in inputs.items() if a != "qkv"}
    alone = torch.zeros(kc.shape, dtype=torch.uint8)  # a contiguous cache of the half's size: not a pool's half
    with pytest.raises(LayoutMismatch, match=r"k_cache must be one half of a packed K/V pool uint8 \[num_pages, "
                                             rf"{lay.page_stride}\]"):
        checker.check({**args, "k_cache": alone})


@pytest.mark.pure
def test_a_joint_pool_half_is_checked_by_its_page_stride_in_the_symbol_s_words() -> None:
    """A contiguous cache (its own pool) passed to a joint member is refused: the check names the pool's shape and
    the page stride; the C++ symbol renders the same words and condition."""
    g = resolve_group(SPEC.group("qwen3_8b_joint"))
    checker = GroupChecker(g, default_plan(g))
    inputs = {k: t for k, t in group_inputs(g, 8, 4, "cpu", seed=1).items() if k != "qkv"}
    own = inputs["k_cache"].contiguous()
    with pytest.raises(LayoutMismatch, match=r"^qwen3_8b_joint: k_cache must be one half of a joint K/V pool uint8 "
                                             r"\[num_pages, 2, 32768\] \(pool\[:, 0\] or pool\[:, 1\]: pages 65536 "
                                             r"bytes apart, each contiguous; .*\), got strides \[32768, 1\]$"):
        checker.check({**inputs, "k_cache": own})
    source = render_variant(g.member("k"), default_plan(g.member("k")))
    assert "kernelgen::pool_half(kvcache, 65536)" in source and "static constexpr bool kJointPool = true;" in source
    with pytest.raises(GuardViolation, match=r"kv_pool: joint writes one half of a paged K/V pool .*"
                                             r"\[guard joint_pool_needs_pages\]"):
        precheck(replace(g.member("q"), kv_pool="joint"))
    with pytest.raises(SpecError, match=r"m.yaml:4:\d+: model 'j': kv_pool: joint needs K and V pages of one shape "
                                        r"\(head_dim 128 / 64, store bf16 / bf16 here\)"):
        parse_spec("family: fused_norm_rope_store\nname: m\nmodels:\n  - {name: j, num_q_heads: 8, num_kv_heads: 2, "
                   "head_dim: 128, v_head_dim: 64, kv_pool: joint}\n", "m.yaml")


ROPE_FIRST = ("family: fused_norm_rope_store\nname: rf\nmodels:\n  - {name: rope_first, num_q_heads: 8, "
              "num_kv_heads: 2, head_dim: 128, qk_norm: rms, norm_order: rope_then_norm, kv_store: fp8_scaled}\n")


@pytest.mark.pure
def test_rope_then_norm_norms_the_rotated_heads_and_its_oracle_tells_the_orders_apart() -> None:
    """norm_order: rope_then_norm: the reference rotates, then norms (its rows equal the norm of the rotated rows),
    the float64 oracle (with the rotated rows' error carried into the norm) accepts its bytes and refuses the bytes
    of the other order; only Q and K take the order."""
    g = resolve_group(parse_spec(ROPE_FIRST, "rf.yaml").groups[0])
    assert [v.norm_order for _, v in g.members] == ["rope_then_norm", "rope_then_norm", "norm_then_rope"]
    k = g.member("k")
    inputs = make_inputs(k, 40, 6, "cpu", seed=9)
    rv = k.row_variant
    x = inputs["x"].reshape(-1, 128)
    pos = inputs["positions"].clamp(0, inputs["freqs"].shape[0] - 1).repeat_interleave(2)
    plain = replace(rv, norm="none")
    rotated = reference.rows(plain, x, None, inputs["freqs"], pos)
    got = reference.rows(rv, x, inputs["weight"], inputs["freqs"], pos)
    normed_after = reference._norm(rv, rotated, inputs["weight"], None, 1e-6)
    assert torch.equal(got, normed_after)
    other = reference.rows(replace(rv, norm_order="norm_then_rope"), x, inputs["weight"], inputs["freqs"], pos)
    assert not torch.equal(got, other)
    caches = {}
    for order in ("rope_then_norm", "norm_then_rope"):
        cache = inputs["kvcache"].clone()
        reference.store(replace(k, norm_order=order), inputs["x"], inputs["weight"], inputs["freqs"],
                        inputs["positions"], inputs["out_loc"], cache, scale=inputs["scale"])
        caches[order] = cache
    poison = inputs["kvcache"].clone()
    assert check_against_oracle(k, caches["rope_then_norm"], inputs, poison=poison).ok
    assert not check_against_oracle(k, caches["norm_then_rope"], inputs, poison=poison).ok
    with pytest.raises(GuardViolation, match=r"\[guard rope_then_norm_needs_both\]"):
        precheck(replace(g.member("v"), norm_order="rope_then_norm"))


@pytest.mark.pure
@pytest.mark.parametrize("norm,bias,store", [("rms", False, "bf16"), ("rms_gemma", False, "bf16"), ("layer", True, "bf16"),
                                             ("rms", False, "fp8_e4m3"), ("layer", False, "fp4_e2m1")])
def test_rope_then_norm_is_within_the_oracle_for_every_norm(norm: str, bias: bool, store: str) -> None:
    v = Variant("rf", head_dim=128, rope_dim=64, rope_place="tail", norm=norm, norm_bias=bias, store=store,
                page_size=16, norm_order="rope_then_norm")
    precheck(v)
    for seed in range(3):
        inputs = make_inputs(v, 64, 6, "cpu", seed=seed)
        cache, poison = inputs["kvcache"].clone(), inputs["kvcache"].clone()
        reference.store(v, inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"], inputs["out_loc"],
                        cache, bias=inputs["bias"], scale=inputs["scale"])
        report = check_against_oracle(v, cache, inputs, poison=poison)
        assert report.ok and report.rows > 0, report.as_dict()


FP16_MODEL = ("family: fused_norm_rope_store\nname: h\nmodels:\n  - {name: fp16_layer, num_q_heads: 8, num_kv_heads: 2, "
              "head_dim: 128, qk_norm: rms, input_dtype: fp16, q_store: fp16, kv_store: fp16}\n")


@pytest.mark.pure
def test_an_fp16_store_is_the_cast_of_the_rows_and_within_the_oracle() -> None:
    """store: fp16 (an fp16 model's Q output and K/V caches): each value is the rows' float32 cast to fp16 (round
    to nearest even), a non-finite row is fp16 NaN 0x7E00 in every value, and the float64 oracle accepts it and
    refuses the bf16 bytes of the same rows."""
    g = resolve_group(parse_spec(FP16_MODEL, "h.yaml").groups[0])
    precheck(g)
    k = g.member("k")
    inputs = make_inputs(k, 40, 6, "cpu", seed=4)
    inputs["x"][3, 5] = float("inf")
    cache, poison = inputs["kvcache"].clone(), inputs["kvcache"].clone()
    reference.store(k, inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"], inputs["out_loc"], cache)
    written = reference.written_rows(k, inputs["out_loc"], inputs["positions"], inputs["freqs"], cache)
    slots = inputs["out_loc"][written]
    rows = reference.rows(k.row_variant, inputs["x"].reshape(-1, 128), inputs["weight"], inputs["freqs"],
                          inputs["positions"].clamp(0, 4095).repeat_interleave(2)).reshape(-1, 2, 128)
    stored = cache.view(torch.float16).view(cache.shape[0], 16, 2, 128)[slots // 16, slots % 16]
    finite = torch.isfinite(rows[written]).all(-1)
    assert torch.equal(stored[finite], rows[written][finite].half())
    if bool(written[3]):
        assert (stored[int(written[:3].sum())][0].view(torch.int16) == 0x7E00).all()
    assert check_against_oracle(k, cache, inputs, poison=poison).ok
    as_bf16 = cache.clone()
    reference.store(replace(k, store="bf16"), inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"],
                    inputs["out_loc"], as_bf16)
    assert not check_against_oracle(k, as_bf16, inputs, poison=poison).ok


@pytest.mark.build
def test_fp16_and_rope_then_norm_groups_compile_for_every_target() -> None:
    from kernelgen.build import toolchain
    from kernelgen.build.lifecycle import compile_only

    groups = [parse_spec(FP16_MODEL, "h.yaml").groups[0], parse_spec(ROPE_FIRST, "rf.yaml").groups[0]]
    results = compile_only(groups, toolchain.detect(), ("sm_90a", "sm_100a", "sm_120a"))
    assert [r for r in results if not r.ok] == [] and len(results) == 3 * len(groups)
