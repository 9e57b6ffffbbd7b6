"""vLLM's per-token-head KV modes (store fp8_per_token_head, int8_per_token_head) in its packed cache: each (slot,
head) cell [K codes | K scale | V codes | V scale], one float32 scale max(amax / qmax, 1e-6) per half, codes of
v * RN(1 / scale), int8 rounded half away from zero (vllm 0.34 v1/attention/ops/triton_reshape_and_cache_flash.py
_reshape_cache_per_token_head; the cell: v1/attention/backends/triton_attn.py _ensure_scale_caches)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from kernelgen.codegen.launch import resolve_group
from kernelgen.layout import codec
from kernelgen.layout.layout import layout_of
from kernelgen.measure import reference
from kernelgen.measure.inputs import group_inputs, member_inputs
from kernelgen.measure.oracle import check_against_oracle
from kernelgen.spec.parse import load_spec

SPEC = load_spec("attention_prep")
F32 = np.float32

pytestmark = pytest.mark.pure


def vllm_rule(rows: np.ndarray, qmax: float, int8: bool) -> tuple[np.ndarray, np.ndarray]:
    """vLLM's Triton expressions in float32, one (token, head) row each: scale = max(max|x| / QUANT_MAX, 1e-6),
    q = x * (1.0 / scale); int8: where(q >= 0, q + 0.5, q - 0.5), clamp(-128, 127), truncated by the store;
    fp8: clamp(-448, 448), rounded to nearest even by the store. (Triton divides with div.full.f32, an
    approximation within 2 ulps; these are the correctly rounded quotients kernelgen writes.)"""
    x = rows.astype(F32)
    scale = np.maximum(np.abs(x).max(axis=1, keepdims=True) / F32(qmax), F32(1e-6)).astype(F32)
    q = (x * (F32(1.0) / scale)).astype(F32)
    if int8:
        h = np.where(q >= 0, q + F32(0.5), q - F32(0.5)).astype(F32)
        codes = np.trunc(np.clip(h, -128, 127)).astype(np.int8).view(np.uint8)
    else:
        codes = torch.from_numpy(np.clip(q, -448, 448)).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    return codes, scale


def test_int8_codes_round_half_away_from_zero_after_a_float32_add() -> None:
    q = torch.tensor([0.49999997, 0.5, -0.5, -0.49999997, 126.5, -127.4, 2.5, -0.0, 1e-9, 130.0, -200.0])
    got = codec.i8_encode(q).view(torch.int8).tolist()
    # 0.5 - 2^-25 + 0.5 rounds to 1.0 in float32 (a tie, to even), so it truncates to 1 as vLLM's does
    assert got == [1, 1, -1, -1, 127, -127, 3, 0, 0, 127, -128]


@pytest.mark.parametrize("store, qmax", [("fp8_per_token_head", 448.0), ("int8_per_token_head", 127.0)])
def test_the_reference_writes_vllms_rule_into_its_cell(store: str, qmax: float) -> None:
    """The reference's bytes equal vLLM's expressions evaluated in numpy float32 on the same rows, at the bytes
    triton_attn.py reads: K codes at 0, K scale at D, V codes at D + 4, V scale at 2D + 4 of each cell; rows with a
    tiny amax take the 1e-6 floor."""
    name = f"qwen3_8b_vllm_{'fp8' if store.startswith('fp8') else 'int8'}_pth"
    g = resolve_group(SPEC.group(name))
    k = g.member("k")
    assert k.store == store and layout_of(k).pool_record == 132
    inputs = group_inputs(g, 40, 6, "cpu", seed=9)
    keep = reference.written_rows(k, inputs["out_loc"], inputs["positions"], inputs["freqs"], inputs["k_cache"])
    tiny = int(keep.nonzero()[1])
    inputs["v"][tiny] *= 1e-6  # one written token's V rows below the floor: scale 1e-6
    pool = inputs["k_cache"]._base
    for role in ("k", "v"):
        mine = member_inputs(g, role, inputs)
        reference.store(g.member(role), mine["x"], mine["weight"], mine["freqs"], mine["positions"], mine["out_loc"],
                        mine["kvcache"])
    cells = pool.view(pool.shape[0], 16, 8, 2 * 132)
    loc = inputs["out_loc"][keep]
    assert 20 <= int(keep.sum()) < 40  # the inputs aim some tokens outside the pool: those write nothing
    for half, role in enumerate(("k", "v")):
        m = g.member(role)
        mine = member_inputs(g, role, inputs)
        rows = reference.rows(m.row_variant, mine["x"][keep].reshape(-1, 128), mine["weight"], mine["freqs"],
                              mine["positions"][keep].repeat_interleave(8), 1e-6).numpy()
        codes, scale = vllm_rule(rows, qmax, store.startswith("int8"))
        got = cells[loc // 16, loc % 16][..., half * 132:(half + 1) * 132].reshape(-1, 132)
        assert np.array_equal(got[:, :128].numpy(), codes), role
        assert np.array_equal(got[:, 128:].contiguous().view(torch.float32).numpy(), scale), role
        floored = scale.reshape(-1, 8) == F32(1e-6)
        assert floored.any(axis=1).tolist() == [role == "v" and i == 1 for i in range(len(floored))], role


@pytest.mark.parametrize("store", ["fp8_per_token_head", "int8_per_token_head"])
def test_the_float64_oracle_accepts_the_reference_and_catches_a_code_off_by_two(store: str) -> None:
    name = f"qwen3_8b_vllm_{'fp8' if store.startswith('fp8') else 'int8'}_pth"
    g = resolve_group(SPEC.group(name))
    k = g.member("k")
    inputs = group_inputs(g, 24, 4, "cpu", seed=3)
    mine = member_inputs(g, "k", inputs)
    before = mine["kvcache"].clone()
    reference.store(k, mine["x"], mine["weight"], mine["freqs"], mine["positions"], mine["out_loc"], mine["kvcache"])
    report = check_against_oracle(k, mine["kvcache"], mine, poison=before)
    assert report.ok, report.violations
    slot = int(mine["out_loc"][0])
    lay = layout_of(k)
    at = lay.field("values").offset(lay.in_page(slot % 16 * 8))  # head 0 of the first token's slot
    cache = mine["kvcache"]
    page = slot // 16
    code = int(cache[page, at])
    if store.startswith("int8"):
        cache[page, at] = (code + (2 if code < 100 else -2)) & 0xFF
    else:
        cache[page, at] = code ^ 0x02  # two mantissa steps away
    assert not check_against_oracle(k, cache, mine, poison=before).ok
