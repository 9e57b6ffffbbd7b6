"""Gemma-3n's V norm (vLLM model_executor/models/gemma3n.py Gemma3nAttention: v_norm = RMSNorm(head_dim,
has_weight=False) on each V head before the cache write; q_norm and k_norm are RMSNorm with a weight): the model
key v_norm sets the V member's norm from the norm table."""
from __future__ import annotations

import pytest
import torch

from kernelgen.codegen.launch import resolve_group
from kernelgen.errors import SpecError
from kernelgen.layout.layout import layout_of
from kernelgen.measure import reference
from kernelgen.measure.inputs import group_inputs, member_inputs
from kernelgen.measure.oracle import check_against_oracle
from kernelgen.spec.parse import load_spec, parse_spec

SPEC = load_spec("attention_prep")

pytestmark = pytest.mark.pure


def test_gemma3n_v_heads_are_normalized_without_a_weight_as_vllm_does() -> None:
    g = resolve_group(SPEC.group("gemma3n_e4b"))
    v, k = g.member("v"), g.member("k")
    assert (v.norm, v.rope_dim, v.heads, v.head_dim) == ("rms_unweighted", 0, 2, 256)
    assert (k.norm, g.member("q").norm) == ("rms", "rms")
    inputs = group_inputs(g, 40, 6, "cpu", seed=4)
    assert "v_weight" not in inputs  # no weight argument for an unweighted norm
    mine = member_inputs(g, "v", inputs)
    before = mine["kvcache"].clone()
    reference.store(v, mine["x"], None, None, None, mine["out_loc"], mine["kvcache"], eps=1e-6)
    # vLLM's RMSNorm(has_weight=False) forward_native: x.float() * rsqrt(mean(x^2) + eps), cast to bf16
    x = mine["x"].reshape(40, 2, 256).float()
    want = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16)
    lay = layout_of(v)
    pages = mine["kvcache"].view(-1, lay.page_size, 2, 256 * 2)
    slot = mine["out_loc"].long()
    written = slot >= 0
    got = pages.reshape(-1, 2, 512)[slot[written]].view(torch.bfloat16)
    assert written.sum() > 0
    diff = (got.float() - want[written].float()).abs()
    assert float(diff.max()) <= float(want[written].float().abs().max()) * 2 ** -7  # one bf16 ulp at most
    assert check_against_oracle(v, mine["kvcache"], mine, poison=before).ok
    plain = before.clone()  # an unnormalized V (norm none) is not what the oracle holds
    reference.store(v.__class__(**{**v.__dict__, "norm": "none"}), mine["x"], None, None, None, mine["out_loc"],
                    plain)
    assert not check_against_oracle(v, plain, mine, poison=before).ok


def test_v_norm_is_a_norm_table_value_and_a_weighted_one_takes_v_weight() -> None:
    text = ("family: fused_norm_rope_store\nname: g\nmodels:\n"
            "  - {name: m, num_q_heads: 4, num_kv_heads: 2, head_dim: 64, v_norm: rsm}\n")
    with pytest.raises(SpecError, match=r"g.yaml:4:\d+: .*'rsm'.*did you mean rms\?\)"):
        parse_spec(text, "g.yaml")
    spec = parse_spec(text.replace("rsm", "rms"), "g.yaml")
    g = resolve_group(spec.group("m"))
    assert g.member("v").norm == "rms" and g.member("k").norm == "none"
    assert "v_weight" in group_inputs(g, 4, 2, "cpu", seed=1)


def test_head_dim_512_with_a_v_norm_is_a_valid_group() -> None:
    text = ("family: fused_norm_rope_store\nname: g\nmodels:\n"
            "  - {name: m, num_q_heads: 8, num_kv_heads: 1, head_dim: 512, qk_norm: rms, v_norm: rms_unweighted}\n")
    g = resolve_group(parse_spec(text, "g.yaml").group("m"))
    inputs = group_inputs(g, 12, 3, "cpu", seed=2)
    for role in ("q", "k", "v"):
        m = g.member(role)
        mine = member_inputs(g, role, inputs)
        before = mine["kvcache"].clone()
        reference.store(m, mine["x"], mine["weight"], mine["freqs"], mine["positions"], mine["out_loc"],
                        mine["kvcache"])
        assert check_against_oracle(m, mine["kvcache"], mine, poison=before).ok, role
