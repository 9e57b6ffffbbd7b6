"""Llama-4's attention prep (vLLM 0.34 model_executor/models/llama4.py): RoPE layers rotate, then normalize Q and K
by an RMSNorm without weight (norm rms_unweighted, norm_order rope_then_norm); NoPE layers scale Q by
attn_temperature_tuning's log(floor((pos + 1) / 8192) + 1) * 0.1 + 1 (temperature: llama4)."""
from __future__ import annotations

import math

import pytest
import torch

from kernelgen.codegen.guards import violations
from kernelgen.codegen.launch import resolve_group
from kernelgen.measure import reference
from kernelgen.measure.inputs import group_inputs, member_inputs
from kernelgen.measure.oracle import check_against_oracle
from kernelgen.spec.parse import load_spec
from kernelgen.spec.ropes import TEMPERATURES

SPEC = load_spec("attention_prep")

pytestmark = pytest.mark.pure


def test_the_temperature_is_llama4s_expression() -> None:
    pos = torch.tensor([0, 8190, 8191, 16382, 16383, 1 << 20, (1 << 24) + 5])
    got = TEMPERATURES["llama4"].factor(pos)
    want = [1.0, 1.0, 1 + 0.1 * math.log(2), 1 + 0.1 * math.log(2), 1 + 0.1 * math.log(3),
            1 + 0.1 * math.log(128 + 1), 1 + 0.1 * math.log(2048 + 1)]
    assert got.dtype == torch.float32
    assert got.tolist() == torch.tensor(want, dtype=torch.float32).tolist()
    # vLLM's float32 evaluation (_get_attn_scale) agrees within an ulp
    p32 = pos.to(torch.float32)
    vllm = torch.log(torch.floor((p32 + 1.0) / 8192.0) + 1.0) * 0.1 + 1.0
    assert ((vllm - got).abs() <= 2 * torch.finfo(torch.float32).eps).all()


def test_nope_layers_q_is_tempered_by_position_and_held_by_the_oracle() -> None:
    g = resolve_group(SPEC.group("llama4_scout_nope"))
    q = g.member("q")
    assert (q.temperature, q.rope_dim, q.norm) == ("llama4", 0, "none")
    assert g.member("k").temperature == "none"
    inputs = group_inputs(g, 256, 24, "cpu", seed=6)
    mine = member_inputs(g, "q", inputs)
    pos = mine["positions"]
    assert int(pos.max()) >= 8191 and bool((pos < 0).any())
    rows = reference.rows(q.row_variant, mine["x"].reshape(-1, 128), None, None, pos.repeat_interleave(40))
    t = TEMPERATURES["llama4"].factor(pos.clamp_min(0)).repeat_interleave(40)[:, None]
    assert torch.equal(rows, mine["x"].reshape(-1, 128).float() * t)
    before = mine["kvcache"].clone()
    reference.store(q, mine["x"], None, None, pos, mine["out_loc"], mine["kvcache"])
    report = check_against_oracle(q, mine["kvcache"], mine, poison=before)
    assert report.ok, report.violations
    assert torch.equal(mine["kvcache"][pos < 0], before[pos < 0])  # a negative position writes nothing
    untempered = before.clone()
    q_off = q.__class__(**{**q.__dict__, "temperature": "none"})
    reference.store(q_off, mine["x"], None, None, None, mine["out_loc"], untempered)
    untempered[pos < 0] = before[pos < 0]  # only the values differ: t(pos) > 1 from position 8191 on
    assert not check_against_oracle(q, untempered, mine, poison=before).ok


def test_rope_layers_normalize_the_rotated_heads_without_a_weight() -> None:
    g = resolve_group(SPEC.group("llama4_scout_rope"))
    k = g.member("k")
    assert (k.norm, k.norm_order, k.rope_style) == ("rms_unweighted", "rope_then_norm", "neox")
    assert "weight" not in g.names("k") or "k_weight" not in group_inputs(g, 4, 2, "cpu", seed=1)
    inputs = group_inputs(g, 32, 6, "cpu", seed=2)
    mine = member_inputs(g, "k", inputs)
    assert mine["weight"] is None
    x = mine["x"].reshape(-1, 128)
    pos = mine["positions"].repeat_interleave(8) % mine["freqs"].shape[0]
    got = reference.rows(k.row_variant, x, None, mine["freqs"], pos, 1e-5)
    rotated = reference.rows(k.row_variant.__class__(**{**k.row_variant.__dict__, "norm": "none"}), x, None,
                             mine["freqs"], pos)
    want = rotated * (1.0 / torch.sqrt((rotated * rotated).mean(-1, keepdim=True) + torch.tensor(1e-5)))
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-6)
    assert torch.allclose(got.pow(2).mean(-1), torch.ones(got.shape[0]), rtol=1e-3)
    before = mine["kvcache"].clone()
    reference.store(k, mine["x"], None, mine["freqs"], mine["positions"], mine["out_loc"], mine["kvcache"], 1e-5)
    assert check_against_oracle(k, mine["kvcache"], mine, eps=1e-5, poison=before).ok
    assert not violations(k)
