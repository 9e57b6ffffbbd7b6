"""M-RoPE's cos/sin from whole vectors of each position stream's row (launch.rope_rows) as a tuner candidate: offered
for the kernels whose rotation reads three position streams (Qwen2.5-VL's contiguous sections, Qwen3-VL's interleaved
T H W), a no-op elsewhere. The values a pair takes are the same table entries either way (the stream rule is the one
`stream_of`); the tuner checks every candidate's bytes against the reference on the GPU before it may choose one, and
the GPU tier's sample of each kernel's space includes it. The build tier reads what it saves: the scalar load per
value and its row choice become three vector loads per chunk and a select."""
from __future__ import annotations

import pytest

from kernelgen.codegen.launch import resolve
from kernelgen.spec.launchparams import BY_NAME
from kernelgen.spec.parse import load_spec
from kernelgen.spec.variant import Launch
from kernelgen.tune.space import candidates, default_space, group_candidates, group_space

from sass_ops import SASS, sass_ops

SPEC = load_spec("attention_prep")


@pytest.mark.pure
def test_the_table_holds_rope_rows_as_a_compiled_flag() -> None:
    p = BY_NAME["rope_rows"]
    assert p.kind is bool and p.compiled and p.cpp == "kRopeRows" and p.token == "rr" and not p.capabilities
    lid = "t4.b16.v8.pdl.rr.mb24"  # after the other flags, before the optional ints
    assert Launch.from_id(lid).rope_rows and Launch.from_id(lid).id == lid
    assert not Launch.from_id("t4.b16.v8.pf.pdl").rope_rows  # ids written before the parameter keep their meaning


@pytest.mark.pure
@pytest.mark.parametrize("name, offered", [("qwen3_vl_8b_q", True), ("qwen3_vl_8b_k", True), ("qwen25_vl_7b_q", True),
                                           ("qwen3_vl_8b_v", False), ("qwen3_8b_bf16_q", False),
                                           ("llama4_scout_nope_q", False)])
def test_the_space_offers_it_only_where_the_rotation_reads_three_streams(name: str, offered: bool) -> None:
    v = SPEC.variant(name)
    valid, _ = candidates(v, default_space(v))
    assert any(c.rope_rows for c in valid) == offered
    assert {c.rope_rows for c in valid} == ({False, True} if offered else {False})


@pytest.mark.pure
@pytest.mark.parametrize("group, offered", [("qwen3_vl_8b", True), ("qwen25_vl_7b", True), ("qwen3_8b_bf16", False)])
def test_a_group_is_offered_it_where_its_members_rotate_three_streams(group: str, offered: bool) -> None:
    g = resolve(SPEC.group(group))
    grouped, _ = group_candidates(g, group_space(g))
    assert any(c.rope_rows for c in grouped) == offered


@pytest.mark.build
@SASS
@pytest.mark.parametrize("name", ["qwen3_vl_8b_q", "qwen25_vl_7b_q"])
def test_the_rows_build_issues_fewer_instructions_and_loads(name: str) -> None:
    """sm_90a, the launch the H200 records chose for these groups at large N (t4.b16.v8): interleaved streams
    977 -> 836 instructions, contiguous 560 -> 493 (when written)."""
    got = sass_ops("attention_prep", name, ["t4.b16.v8", "t4.b16.v8.rr"], "sm_90a")
    plain, rows = got["t4.b16.v8"], got["t4.b16.v8.rr"]

    def loads(ops: dict[str, int]) -> int:
        return sum(n for op, n in ops.items() if op.startswith("LDG"))

    assert sum(rows.values()) < 0.95 * sum(plain.values()), (sum(rows.values()), sum(plain.values()))
    assert loads(rows) < loads(plain) and rows.get("LDG.E.128.CONSTANT", 0) > plain.get("LDG.E.128.CONSTANT", 0)


@pytest.mark.build
def test_the_rows_candidates_of_both_section_orders_compile_for_every_target() -> None:
    """A sample of each M-RoPE group's `.rr` candidates (every value of every compiled parameter among them, as the
    GPU tier samples) compiles for sm_90a, sm_100a and sm_120a."""
    from launch_sample import sample_compile_failures

    for name in ("qwen3_vl_8b", "qwen25_vl_7b"):
        g = resolve(SPEC.group(name))
        assert not sample_compile_failures(g, [c for c in group_candidates(g, group_space(g))[0] if c.rope_rows])
