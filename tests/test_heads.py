"""Several heads per token (the `heads` axis): each head of a token is normed, rotated and stored on its own,
with the token's position and slot, into NHD pages. Pure tier: the reference against a per-head loop, the
decode, strided rows, awkward heads, keys; tests/test_gpu.py holds the kernel to the reference."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from kernelgen.layout.layout import layout_of
from kernelgen.layout.pages import head_slots, pages_of
from kernelgen.measure import reference
from kernelgen.measure.inputs import make_inputs
from kernelgen.spec.parse import load_spec
from kernelgen.spec.variant import Variant

pytestmark = pytest.mark.pure

GQA = {v.name: v for v in load_spec("gqa_kv").variants}


def _store(v, inputs, x=None) -> torch.Tensor:
    cache = inputs["kvcache"].clone()
    reference.store(v, inputs["x"] if x is None else x, inputs["weight"], inputs["freqs"], inputs["positions"],
                    inputs["out_loc"], cache, 1e-6, inputs["bias"], scale=inputs["scale"])
    return cache


def _pool_and_want(v, cache: torch.Tensor, row: torch.Tensor, scale: torch.Tensor | None):
    """The pool as [num_pages, page_size, heads, head_dim] elements and what a row's values become there."""
    if v.store == "bf16":
        return cache.view(torch.bfloat16), row.bfloat16()
    assert v.store == "fp8_scaled"  # codes of v * RN(1 / s), saturating
    inv = (1.0 / scale.double()).float()
    return cache.view(torch.float8_e4m3fn), (row * inv).clamp(-448, 448).to(torch.float8_e4m3fn)


@pytest.mark.parametrize("name", sorted(GQA))
def test_pages_are_nhd_with_each_head_processed_alone(name: str) -> None:
    """Head h of the token in slot s sits at [s // page_size, s % page_size, h] of the pool seen as
    [num_pages, page_size, heads, head_dim] elements, and equals the one-head math on that head's slice."""
    v = GQA[name]
    inputs = make_inputs(v, 50, 4, "cpu", seed=3)
    cache = _store(v, inputs)
    one = replace(v, heads=1)
    pool, _ = _pool_and_want(v, cache, torch.zeros(1), inputs["scale"])
    pool = pool.reshape(cache.shape[0], v.page_size, v.heads, v.head_dim)
    keep = reference.written_rows(v, inputs["out_loc"], inputs["positions"], inputs["freqs"], cache)
    assert keep.sum() > 30 and (~keep).sum() > 0
    for h in range(v.heads):
        x = inputs["x"][:, h * v.head_dim:(h + 1) * v.head_dim]
        row = reference.rows(one, x, inputs["weight"], inputs["freqs"], inputs["positions"], 1e-6)
        _, want = _pool_and_want(v, cache, row, inputs["scale"])
        loc = inputs["out_loc"][keep]
        got = pool[loc // v.page_size, loc % v.page_size, h]
        assert torch.equal(got.view(torch.uint8), want[keep].view(torch.uint8)), f"head {h}"
    untouched = _pool_and_want(v, inputs["kvcache"], torch.zeros(1), inputs["scale"])[0].reshape(pool.shape)
    written = torch.zeros(pool.shape[:2], dtype=torch.bool)
    written[inputs["out_loc"][keep] // v.page_size, inputs["out_loc"][keep] % v.page_size] = True
    assert torch.equal(pool[~written].view(torch.uint8), untouched[~written].view(torch.uint8))


def test_fp8_scaled_saturates_and_decodes_times_the_scale() -> None:
    v = GQA["llama3_8b_v_fp8_p16"]
    inputs = make_inputs(v, 64, 8, "cpu", seed=8)
    inputs["out_loc"] = torch.arange(64)
    s = float(inputs["scale"])
    assert 1 / 64 < s <= 2
    inputs["x"][0, :] = 1000 * s  # above 448 * s: saturates
    got = pages_of(v).decode(_store(v, inputs), inputs["out_loc"], inputs["scale"])
    assert torch.allclose(got[0], torch.full_like(got[0], 448 * s))  # 448 / RN(1 / s)
    x = inputs["x"][1:].float().reshape(63, v.heads, v.head_dim)
    small = (x.abs() * (1 / s) < 440) & (x.abs() * (1 / s) > 2 ** -6)
    assert small.float().mean() > 0.5
    rel = ((got[1:] - x).abs() / x.abs())[small]
    assert float(rel.max()) <= 2 ** -4 + 1e-6  # e4m3: 3 mantissa bits, half an ulp


def test_decode_gives_tokens_by_heads() -> None:
    v = GQA["qwen3_8b_k_bf16_p16"]
    inputs = make_inputs(v, 20, 4, "cpu", seed=1)
    inputs["out_loc"] = torch.arange(20) + 3
    inputs["positions"] = inputs["positions"] % inputs["freqs"].shape[0]
    got = pages_of(v).decode(_store(v, inputs), inputs["out_loc"])
    assert got.shape == (20, v.heads, v.head_dim)
    rows = reference.rows(replace(v, heads=1), inputs["x"].reshape(-1, v.head_dim), inputs["weight"], inputs["freqs"],
                          inputs["positions"].repeat_interleave(v.heads), 1e-6)
    assert torch.equal(got, rows.bfloat16().float().reshape(20, v.heads, v.head_dim))


def test_a_slice_of_packed_qkv_writes_what_a_contiguous_k_writes() -> None:
    """x may be K's columns of the packed projection [N, (Hq + 2 Hkv) * D] (rows strided)."""
    v = GQA["qwen3_8b_k_bf16_p16"]
    inputs = make_inputs(v, 33, 4, "cpu", seed=2)
    width = v.heads * v.head_dim
    qkv = torch.randn(33, 32 * v.head_dim + 2 * width).to(torch.bfloat16)
    qkv[:, 32 * v.head_dim:32 * v.head_dim + width] = inputs["x"]
    k = qkv[:, 32 * v.head_dim:32 * v.head_dim + width]
    assert not k.is_contiguous()
    assert torch.equal(_store(v, inputs, k), _store(v, inputs))


def test_a_nan_in_one_head_makes_only_that_head_a_nan_row() -> None:
    v = GQA["qwen3_8b_k_bf16_p16"]
    inputs = make_inputs(v, 16, 4, "cpu", seed=5)
    inputs["out_loc"] = torch.arange(16)
    inputs["positions"] = inputs["positions"] % inputs["freqs"].shape[0]
    inputs["x"][2, 3 * v.head_dim + 7] = float("nan")
    got = pages_of(v).decode(_store(v, inputs), inputs["out_loc"])
    assert torch.isnan(got[2, 3]).all()
    assert not torch.isnan(got[2, :3]).any() and not torch.isnan(got[2, 4:]).any()
    assert not torch.isnan(got[[0, 1] + list(range(3, 16))]).any()


def test_layout_counts_records_per_head_and_keys_keep_one_head_variants() -> None:
    v = GQA["qwen3_30b_k_bf16_p16"]
    lay = layout_of(v)
    assert (lay.page_size, lay.heads, lay.records_per_page) == (16, 4, 64)
    assert lay.page_bytes == 16 * 4 * 128 * 2 and lay.bytes_per_token == 4 * 128 * 2
    assert lay.byte_map() == [(0, 16384, "values: 16 x 4 x 256 B bf16 values")]
    assert head_slots(torch.tensor([2, -1, 5]), 4).tolist() == [8, 9, 10, 11, -1, -1, -1, -1, 20, 21, 22, 23]
    one = replace(v, heads=1, name="x")
    assert one.content_key() != v.content_key()
    # one rule for every axis: an axis at its default does not enter the key, so a one-head variant's key is
    # the key it would have had before the axis existed (records and exports stay valid)
    fields = {k: val for k, val in one.math_fields().items() if k != "heads" and val != getattr(Variant("d"), k)}
    import hashlib
    import json
    assert one.content_key() == hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:24]
