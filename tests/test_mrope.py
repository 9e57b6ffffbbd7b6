"""Multimodal RoPE (rope_style mrope / mrope_interleaved, rope_sections): positions [3, N] (temporal, height, width)
and each rotated pair's angle from its section's position, as vLLM 0.34's MRotaryEmbedding.forward_native computes
it (model_executor/layers/rotary_embedding/mrope.py: cos_sin_cache[positions], split by mrope_section for contiguous
sections, apply_interleaved_rope for Qwen3-VL's interleaved order), then neox pairs."""
from __future__ import annotations

import pytest
import torch

from kernelgen.codegen.guards import precheck
from kernelgen.codegen.launch import resolve_group
from kernelgen.errors import GuardViolation, LayoutMismatch, SpecError
from kernelgen.measure import reference
from kernelgen.measure.inputs import group_inputs, member_inputs
from kernelgen.measure.oracle import check_against_oracle
from kernelgen.runtime.group_op import GroupChecker
from kernelgen.codegen.launch import default_plan
from kernelgen.spec.parse import load_spec, parse_spec
from kernelgen.spec.ropes import ROPE_STYLES

SPEC = load_spec("attention_prep")

pytestmark = pytest.mark.pure


def vllm_mrope(x: torch.Tensor, cache: torch.Tensor, positions: torch.Tensor, section: list[int],
               interleaved: bool) -> torch.Tensor:
    """vLLM's forward_native for one head's rows x [N, D] (full rotary): cos/sin of cache[positions] [3, N, D/2]
    merged by section, then x1 * cos - x2 * sin and x2 * cos + x1 * sin over the two halves."""
    cos, sin = cache[positions].chunk(2, dim=-1)
    if interleaved:
        def merge(t: torch.Tensor) -> torch.Tensor:
            ch = torch.arange(t.shape[-1])
            h = (ch % 3 == 1) & (ch < section[1] * 3)
            w = (ch % 3 == 2) & (ch < section[2] * 3)
            return torch.where(w, t[2], torch.where(h, t[1], t[0]))
    else:
        def merge(t: torch.Tensor) -> torch.Tensor:
            return torch.cat([m[i] for i, m in enumerate(t.split(section, dim=-1))], dim=-1)
    cos, sin = merge(cos), merge(sin)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def test_pair_streams_follow_vllms_section_orders() -> None:
    contiguous = ROPE_STYLES["mrope"].pair_streams(128, (16, 24, 24))
    assert contiguous == [0] * 16 + [1] * 24 + [2] * 24
    inter = ROPE_STYLES["mrope_interleaved"].pair_streams(128, (24, 20, 20))
    assert inter[:9] == [0, 1, 2] * 3 and inter[58:] == [1, 2, 0, 0, 0, 0]  # T H W ... then T beyond 3 x 20
    assert inter.count(1) == 20 and inter.count(2) == 20 and inter.count(0) == 24
    assert ROPE_STYLES["neox"].pair_streams(8, ()) == [0] * 4


@pytest.mark.parametrize("name, section, interleaved", [("qwen25_vl_7b", [16, 24, 24], False),
                                                        ("qwen3_vl_8b", [24, 20, 20], True)])
def test_the_reference_rotates_as_vllms_mrope(name: str, section: list[int], interleaved: bool) -> None:
    """The reference rows of the K member (norm, then M-RoPE) equal vLLM's forward_native on the normed rows,
    bit for bit (both float32, the same products), and differ from rotating by the temporal position alone."""
    g = resolve_group(SPEC.group(name))
    k = g.member("k")
    assert k.rope_sections == tuple(section) and k.rope_style == ("mrope_interleaved" if interleaved else "mrope")
    inputs = group_inputs(g, 24, 6, "cpu", seed=4)
    mine = member_inputs(g, "k", inputs)
    pos = mine["positions"]
    assert pos.shape == (3, 24)
    pos = pos % mine["freqs"].shape[0]
    rows_in = mine["x"].reshape(24 * k.heads, 128)
    pos_rows = pos.repeat_interleave(k.heads, dim=-1)
    got = reference.rows(k.row_variant, rows_in, mine["weight"], mine["freqs"], pos_rows)
    normed = reference.rows(k.row_variant.__class__(**{**k.row_variant.__dict__, "rope_dim": 0}), rows_in,
                            mine["weight"], None, None)
    want = vllm_mrope(normed, mine["freqs"], pos_rows, section, interleaved)
    assert torch.equal(got, want)
    temporal_only = vllm_mrope(normed, mine["freqs"], pos_rows[0].expand(3, -1), section, interleaved)
    assert not torch.equal(got, temporal_only)


def test_the_oracle_holds_the_reference_and_a_row_with_one_stream_out_of_the_table_is_not_written() -> None:
    g = resolve_group(SPEC.group("qwen3_vl_8b"))
    k = g.member("k")
    inputs = group_inputs(g, 64, 10, "cpu", seed=8)
    mine = member_inputs(g, "k", inputs)
    max_pos = mine["freqs"].shape[0]
    outside = ((mine["positions"] < 0) | (mine["positions"] >= max_pos))
    assert bool(outside.any()) and not bool(outside.all(0).any())  # single streams out of the table
    before = mine["kvcache"].clone()
    reference.store(k, mine["x"], mine["weight"], mine["freqs"], mine["positions"], mine["out_loc"],
                    mine["kvcache"])
    report = check_against_oracle(k, mine["kvcache"], mine, poison=before)
    assert report.ok, report.violations
    keep = reference.written_rows(k, mine["out_loc"], mine["positions"], mine["freqs"], mine["kvcache"])
    assert not bool((keep & outside.any(0)).any())


def test_positions_of_one_stream_are_refused_in_the_symbols_words() -> None:
    g = resolve_group(SPEC.group("qwen25_vl_7b"))
    inputs = group_inputs(g, 8, 4, "cpu", seed=1)
    checker = GroupChecker(g, default_plan(g))
    args = {a: t for a, t in inputs.items() if a != "qkv"}
    with pytest.raises(LayoutMismatch, match=r"positions must be int32/int64 \[3, N\] \(M-RoPE: each token's "
                                             r"temporal, height and width positions"):
        checker.check({**args, "positions": inputs["positions"][0]})


def test_sections_that_do_not_cover_the_rope_are_refused_by_the_guard() -> None:
    k = resolve_group(SPEC.group("qwen25_vl_7b")).member("k")
    bad = k.__class__(**{**k.__dict__, "rope_sections": (16, 24, 20)})
    with pytest.raises(GuardViolation, match="three numbers, temporal, height, width, summing to rope_dim / 2"):
        precheck(bad)
    plain = k.__class__(**{**k.__dict__, "rope_style": "neox"})
    with pytest.raises(GuardViolation, match="other rope styles take none"):
        precheck(plain)
    table = k.__class__(**{**k.__dict__, "rope_table": "pairs"})
    with pytest.raises(GuardViolation, match="set rope_table: halves"):
        precheck(table)


def test_a_model_s_mrope_section_must_be_a_list_of_positive_integers() -> None:
    text = ("family: fused_norm_rope_store\nname: vl\nmodels:\n"
            "  - {name: m, num_q_heads: 4, num_kv_heads: 2, head_dim: 64, rope_style: mrope, mrope_section: 8}\n")
    with pytest.raises(SpecError, match=r"vl.yaml:4:\d+: mrope_section must be a list of positive integers "
                                        r"\(e.g. \[16, 24, 24\]\), got 8"):
        parse_spec(text, "vl.yaml")
    ok = parse_spec(text.replace("mrope_section: 8", "mrope_section: [8, 12, 12]"), "vl.yaml")
    assert ok.group("m").member("k").rope_sections == (8, 12, 12)


def test_a_temperature_without_rotation_reads_one_position_per_token_whatever_the_rope_style() -> None:
    """An M-RoPE rope_style with rope_dim 0 rotates nothing, so a position-dependent temperature reads one position per
    token ([N], as the device code and the reference read it); the inputs, the check table and the symbol's words agree
    (a random variant of the GPU tier, mrope with rope_dim 0 and llama4's temperature, was refused its own [N] inputs)."""
    from dataclasses import replace

    from torch._subclasses.fake_tensor import FakeTensorMode

    from kernelgen.codegen.launch import resolve
    from kernelgen.codegen.render import x_align
    from kernelgen.layout.pages import pages_of
    from kernelgen.measure.inputs import call_inputs, group_workload_inputs
    from kernelgen.runtime.op import InputChecker

    k = resolve_group(SPEC.group("qwen25_vl_7b")).member("k")
    v = resolve(replace(k, name="mrope_style_nope", rope_dim=0, rope_sections=(), temperature="llama4"))
    precheck(v)
    assert (k.position_streams, v.position_streams) == (3, 1)
    inputs = call_inputs(group_inputs(v, 8, 4, "cpu", seed=1))
    assert inputs["positions"].shape == (8,)
    for workload in ("decode", "prefill"):  # the bench's and the tuner's inputs too
        assert group_workload_inputs(v, 8, workload, device="cpu")["positions"].shape == (8,), workload
        assert group_workload_inputs(k, 8, workload, device="cpu")["positions"].shape == (3, 8), workload
    checker = InputChecker(v, pages_of(v), x_align(v, default_plan(v)))
    with FakeTensorMode():  # fake CUDA tensors of the inputs' shapes and strides: no GPU needed
        fake = {n: torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda") for n, t in inputs.items()
                if t is not None}
        checker.check(fake, metadata_only=True)
        streams = torch.empty(3, 8, dtype=torch.int64, device="cuda")
        with pytest.raises(LayoutMismatch, match=r"positions must be int32/int64 \[N\]"):
            checker.check({**fake, "positions": streams}, metadata_only=True)


def test_a_temperature_beside_mrope_reads_the_temporal_row_in_the_reference_and_the_oracle() -> None:
    """With M-RoPE rotating, the device code's temperature reads each token's first (temporal) position of [3, N]; the
    reference, its written rows and the float64 oracle read the same row (they took the whole [3, N] and failed)."""
    from dataclasses import replace

    from kernelgen.spec.ropes import TEMPERATURES

    k = resolve_group(SPEC.group("qwen3_vl_8b")).member("k")
    kt = replace(k, name="qwen3_vl_8b_k_temp", temperature="llama4")
    precheck(kt)
    mine = member_inputs(kt, "", group_inputs(kt, 64, 10, "cpu", seed=8))
    assert mine["positions"].shape == (3, 64)
    mine["positions"][0, :3] = -5  # a negative temporal position: not written
    mine["positions"][1:, 40:] += 1 << 20  # height and width far from the temporal row (kept inside the table below)
    mine["positions"][1:, 40:] %= mine["freqs"].shape[0]
    rows_in = mine["x"].reshape(64 * k.heads, 128)
    pos_rows = mine["positions"].repeat_interleave(k.heads, dim=-1).clamp_min(0)
    plain = reference.rows(k.row_variant, rows_in, mine["weight"], mine["freqs"], pos_rows)
    tempered = reference.rows(kt.row_variant, rows_in, mine["weight"], mine["freqs"], pos_rows)
    assert torch.equal(tempered, plain * TEMPERATURES["llama4"].factor(pos_rows[0])[:, None])
    before = mine["kvcache"].clone()
    reference.store(kt, mine["x"], mine["weight"], mine["freqs"], mine["positions"], mine["out_loc"], mine["kvcache"])
    keep = reference.written_rows(kt, mine["out_loc"], mine["positions"], mine["freqs"], mine["kvcache"])
    assert not bool(keep[:3].any())
    report = check_against_oracle(kt, mine["kvcache"], mine, poison=before)
    assert report.ok, report.violations
