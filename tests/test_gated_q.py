"""Gated attention (Qwen3-Next, Qwen3.5: attn_output_gate): each Q head of the projection is [q | gate]; the Q member
reads the q half of every head (x_head_stride 2 x head_dim) and never touches the gate, as vLLM's
torch.chunk(q_gate.view(N, H, 2D), 2, dim=-1) splits it (model_executor/models/qwen3_next.py lines 448-456)."""
from __future__ import annotations

import pytest
import torch

from kernelgen.codegen.launch import default_plan, resolve_group
from kernelgen.errors import LayoutMismatch, SpecError
from kernelgen.measure import reference
from kernelgen.measure.inputs import group_inputs, member_inputs
from kernelgen.measure.oracle import check_against_oracle
from kernelgen.runtime.group_op import GroupChecker
from kernelgen.spec.parse import load_spec, parse_spec

SPEC = load_spec("attention_prep")

pytestmark = pytest.mark.pure


def test_q_is_the_first_half_of_each_gated_head_and_the_gate_is_left_alone() -> None:
    g = resolve_group(SPEC.group("qwen3_next_80b"))
    q = g.member("q")
    assert (q.heads, q.head_dim, q.x_head_stride, q.x_width, q.rope_dim, q.norm) == (16, 256, 512, 8192, 64,
                                                                                     "rms_gemma")
    assert g.member("k").x_head_stride == 0
    inputs = group_inputs(g, 20, 4, "cpu", seed=3)
    assert inputs["q"].shape == (20, 16 * 512) and inputs["k"].shape == (20, 2 * 256)
    qkv_before = inputs["qkv"].clone()
    mine = member_inputs(g, "q", inputs)
    before = mine["kvcache"].clone()
    reference.store(q, mine["x"], mine["weight"], mine["freqs"], mine["positions"], mine["out_loc"], mine["kvcache"])
    assert torch.equal(inputs["qkv"], qkv_before)
    # vLLM's split: q, gate = chunk(q_gate.view(N, H, 2D), 2, dim=-1); the plain variant over q gives the same bytes
    q_half, _gate = torch.chunk(mine["x"].view(20, 16, 512), 2, dim=-1)
    plain = q.__class__(**{**q.__dict__, "x_head_stride": 0})
    want = before.clone()
    reference.store(plain, q_half.reshape(20, 16 * 256), mine["weight"], mine["freqs"], mine["positions"],
                    mine["out_loc"], want)
    assert torch.equal(mine["kvcache"], want)
    assert check_against_oracle(q, mine["kvcache"], mine, poison=before).ok


def test_a_q_input_of_packed_heads_is_refused_by_its_width() -> None:
    g = resolve_group(SPEC.group("qwen3_next_80b"))
    inputs = group_inputs(g, 8, 4, "cpu", seed=1)
    checker = GroupChecker(g, default_plan(g))
    args = {a: t for a, t in inputs.items() if a != "qkv"}
    with pytest.raises(LayoutMismatch, match=r"q must be bfloat16 \[N, 8192\]"):
        checker.check({**args, "q": torch.zeros(8, 16 * 256, dtype=torch.bfloat16)})


def test_attn_output_gate_is_a_flag() -> None:
    text = ("family: fused_norm_rope_store\nname: g\nmodels:\n"
            "  - {name: m, num_q_heads: 4, num_kv_heads: 2, head_dim: 64, attn_output_gate: yes please}\n")
    with pytest.raises(SpecError, match=r"g.yaml:4:\d+: model 'm': attn_output_gate must be true or false, "
                                        r"got 'yes please'"):
        parse_spec(text, "g.yaml")
    spec = parse_spec(text.replace("yes please", "true"), "g.yaml")
    assert spec.group("m").member("q").x_head_stride == 128 and spec.group("m").member("k").x_head_stride == 0
