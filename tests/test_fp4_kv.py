"""4-bit K/V caches of GQA models as the engines lay them out: SGLang's MXFP4 KV (PR #38724's mxfp4_quant.py: e2m1
with one UE8M0 scale per 32 values, the OCP exponent floor(log2(amax)) - 2, ties to even) and FlashInfer 0.7.2's
NVFP4 KV append (page.cuh: an e4m3 scale per 16 values of v / k_scale, k_scale a dequantization scale). Both keep
their scales in a tensor of their own; kernelgen's pages hold [all values | all scales], and Pages.field_view gives
the engines' two tensors as views of one pool."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from kernelgen.codegen.launch import resolve_group
from kernelgen.layout import codec
from kernelgen.layout.layout import layout_of
from kernelgen.layout.pages import Pages
from kernelgen.measure import reference
from kernelgen.measure.inputs import group_inputs, member_inputs
from kernelgen.measure.oracle import check_against_oracle
from kernelgen.spec.parse import load_spec

from engine_readers import fp4_rows

SPEC = load_spec("attention_prep")

pytestmark = pytest.mark.pure

E2M1_GRID = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def sglang_mxfp4(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """SGLang's MXFP4 writer for rows [N, D] of one head each (mxfp4_quant.py lines 90-149, written here from its
    expressions): per 32 values amax, exponent from amax's float32 exponent field (field - 129; -127 for a zero or
    subnormal amax), the value times 2^-e clamped to 6, rounded to nearest even on three evenly spaced ranges (rint),
    sign in bit 3, even element in the low nibble; scale byte e + 127."""
    n, d = x.shape
    blocks = x.float().reshape(n, d // 32, 32)
    amax = blocks.abs().amax(-1)
    field = (amax.view(torch.int32) >> 23) & 0xFF
    e = torch.where(field == 0, torch.full_like(field, -127), field - 129)
    scaled = blocks * torch.ldexp(torch.ones_like(amax), -e)[..., None]
    a = scaled.abs().clamp(max=6.0)
    # rint on [0, 2) in steps of 0.5, [2, 4) in steps of 1, [4, 6] in steps of 2 (ties to even), then the code
    small = torch.round(a * 2) / 2
    mid = torch.round(a)
    big = torch.round(a / 2) * 2
    mag = torch.where(a < 2, small, torch.where(a < 4, mid, big))
    code = (mag[..., None] == E2M1_GRID).int().argmax(-1)
    code = code | (torch.signbit(scaled).int() << 3)
    flat = code.reshape(n, d)
    return (flat[:, 0::2] | (flat[:, 1::2] << 4)).to(torch.uint8), (e + 127).to(torch.uint8)


def awkward_rows(n: int, d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g) * torch.exp2(torch.randint(-20, 20, (n, 1), generator=g).float())
    x[0, :32] = 0.0  # a zero block: scale byte 0, codes 0
    x[0, 32:64] = torch.randn(32, generator=g) * 2.0 ** -140  # a subnormal amax: exponent -127
    x[1, :32] = torch.tensor([4.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0] * 4)  # amax 4: e = 0, every tie
    x[1, 32:64] = torch.tensor([7.9, -0.25, -0.75, -5.0] * 8)  # amax in (6, 8) x 2^e: saturates at 6; -0.25 -> -0
    x[2, :32] = -torch.tensor([2.0 ** -10] * 32)  # amax a power of two
    return x


def test_mxfp4_codes_and_scales_are_sglangs_bytes() -> None:
    k = resolve_group(SPEC.group("qwen3_8b_mxfp4")).member("k")
    lay = layout_of(k.row_variant)
    x = awkward_rows(64, 128, seed=5)
    fields = codec.encode(lay, x)
    codes, scales = sglang_mxfp4(x)
    assert torch.equal(fields["scales"], scales)
    assert torch.equal(fields["values"], codes)
    assert fields["scales"][0, 0] == 0 and fields["scales"][0, 1] == 0  # zero and subnormal blocks
    assert fields["values"][1, 16] & 0xF == 0x7 and fields["values"][1, 16] >> 4 == 0x8  # 7.9 -> 6, -0.25 -> -0
    back = codec.decode(lay, fields, torch.ones(64, dtype=torch.bool))
    assert bool(((back - x).abs() <= x.abs().reshape(64, 4, 32).amax(-1).repeat_interleave(32, -1) / 4 + 1e-30).all())


def test_the_oracle_holds_mxfp4_and_catches_an_exponent_or_a_code_off() -> None:
    g = resolve_group(SPEC.group("qwen3_8b_mxfp4"))
    k = g.member("k")
    inputs = group_inputs(g, 96, 120, "cpu", seed=8)
    mine = member_inputs(g, "k", inputs)
    before = mine["kvcache"].clone()
    reference.store(k, mine["x"], mine["weight"], mine["freqs"], mine["positions"], mine["out_loc"], mine["kvcache"])
    assert check_against_oracle(k, mine["kvcache"], mine, poison=before).ok
    pages = Pages.of(layout_of(k))
    slot = int(mine["out_loc"][mine["out_loc"] >= 0][0])
    for field, bump in (("scales", 1), ("values", 0x01)):
        bad = mine["kvcache"].clone()
        view = pages.field_view(bad, field)
        view[slot, 0, 0] += bump  # page_size 1: slot = page
        assert not check_against_oracle(k, bad, mine, poison=before).ok, field


def flashinfer_nvfp4(x: torch.Tensor, k_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """FlashInfer 0.7.2's NVFP4 append for rows [N, D] (page.cuh 287-346, written here from its expressions with
    IEEE float32 arithmetic; the wheel builds it with -use_fast_math, whose approximate divide and reciprocal this
    does not reproduce): sf = e4m3_sat(amax / (6 gs)), codes e2m1_rne(v * 1 / (float(sf) gs)), 0 where sf is 0."""
    n, d = x.shape
    gs = torch.tensor(k_scale, dtype=torch.float32)
    blocks = x.float().reshape(n, d // 16, 16)
    amax = blocks.abs().amax(-1)
    sf = codec.e4m3_encode(amax / (torch.tensor(6.0) * gs))
    sf_val = codec.e4m3_decode(sf)
    out_scale = torch.where(sf_val == 0, torch.zeros_like(sf_val), torch.tensor(1.0) / (sf_val * gs))
    nib = codec.e2m1_encode_rne((blocks * out_scale[..., None]).reshape(n, d))
    return (nib[:, 0::2] | (nib[:, 1::2] << 4)).to(torch.uint8), sf


def test_nvfp4_kv_takes_flashinfers_dequantization_scale_and_agrees_with_its_rule() -> None:
    k = resolve_group(SPEC.group("llama3_8b_nvfp4")).member("k")
    lay = layout_of(k.row_variant)
    x = torch.randn(512, 128, generator=torch.Generator().manual_seed(2)) * 3
    k_scale = float(x.abs().max()) / (448 * 6)  # a calibrated dequantization scale
    fields = codec.encode(lay, x, global_scale=torch.tensor([k_scale]))
    codes, scales = flashinfer_nvfp4(x, k_scale)
    scale_same = fields["scales"] == scales
    # kernelgen multiplies by RN(1 / k_scale) first and takes amax * RN(1/6); FlashInfer divides amax by 6 k_scale:
    # the scale codes agree but where the two roundings straddle an e4m3 boundary, and then by one code
    assert scale_same.float().mean() > 0.99
    steps = (fields["scales"].int() - scales.int()).abs()
    assert int(steps.max()) <= 1
    rows_same = scale_same.all(dim=1)
    nib = codec.unpack_nibbles(fields["values"][rows_same]).int()
    ref = codec.unpack_nibbles(codes[rows_same]).int()
    agree = (nib == ref).float().mean()
    assert agree > 0.999, float(agree)
    assert int(((nib & 7) - (ref & 7)).abs().max()) <= 1  # a disagreeing code is the neighbouring one
    back = codec.decode(lay, fields, torch.ones(512, dtype=torch.bool), torch.tensor([k_scale]))
    assert float(((back - x).abs() / x.abs().reshape(512, 8, 16).amax(-1).repeat_interleave(16, -1)).max()) <= 0.25


def vllm_nvfp4(x: torch.Tensor, k_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's NVFP4 KV writer for rows [N, D] (csrc/libtorch_stable/nvfp4_kv_cache_kernels.cu and
    quantization/fp4/nvfp4_utils.cuh cvt_warp_fp16_to_fp4, written here from their expressions in IEEE float32, the
    approximate reciprocals taken as correctly rounded): g = 1 / k_scale, sf = e4m3_sat(g x (amax x 1/6)), codes
    e2m1_rne(v x 1 / (float(sf) x 1 / g)), 0 where sf is 0."""
    n, d = x.shape
    g = torch.tensor(1.0) / torch.tensor(k_scale, dtype=torch.float32)
    blocks = x.float().reshape(n, d // 16, 16)
    amax = blocks.abs().amax(-1)
    sf = codec.e4m3_encode(g * (amax * (torch.tensor(1.0) / torch.tensor(6.0))))
    sf_val = codec.e4m3_decode(sf)
    out_scale = torch.where(sf_val == 0, torch.zeros_like(sf_val), torch.tensor(1.0) / (sf_val * (torch.tensor(1.0) / g)))
    nib = codec.e2m1_encode_rne((blocks * out_scale[..., None]).reshape(n, d))
    return (nib[:, 0::2] | (nib[:, 1::2] << 4)).to(torch.uint8), sf


def test_nvfp4_kv_agrees_with_vllms_nvfp4_writer_rule() -> None:
    """vLLM's writer (for trtllm-gen) and kernelgen's nvfp4_kv take the same dequantization scale: kernelgen multiplies
    the row by RN(1 / s) before the block amax, vLLM the amax after; the scale codes agree but where the two
    roundings straddle an e4m3 boundary (then by one code), and so do the codes."""
    k = resolve_group(SPEC.group("llama3_8b_nvfp4_trtllm")).member("v")
    lay = layout_of(k.row_variant)
    x = (torch.randn(512, 128, generator=torch.Generator().manual_seed(4)) * 3).bfloat16().float()
    k_scale = float(x.abs().max()) / (448 * 6)
    fields = codec.encode(lay, x, global_scale=torch.tensor([k_scale]))
    codes, scales = vllm_nvfp4(x, k_scale)
    same = fields["scales"] == scales
    assert same.float().mean() > 0.99 and int((fields["scales"].int() - scales.int()).abs().max()) <= 1
    rows = same.all(dim=1)
    nib, ref = (codec.unpack_nibbles(t[rows]).int() for t in (fields["values"], codes))
    assert float((nib == ref).float().mean()) > 0.999
    assert int(((nib & 7) - (ref & 7)).abs().max()) <= 1


@pytest.mark.parametrize("name, data_shape, scale_shape", [
    ("llama3_8b_nvfp4", (7, 16, 8, 64), (7, 16, 8, 8)),
    ("qwen3_8b_mxfp4", (7, 1, 8, 64), (7, 1, 8, 4)),
])
def test_field_views_are_the_engines_tensors_and_read_back_the_stored_rows(name: str, data_shape: tuple[int, ...],
                                                                             scale_shape: tuple[int, ...]) -> None:
    g = resolve_group(SPEC.group(name))
    k = g.member("k")
    pages = Pages.of(layout_of(k))
    pool = pages.allocate(7)
    data, scales = pages.field_view(pool, "values"), pages.field_view(pool, "scales")
    assert tuple(data.shape) == data_shape and tuple(scales.shape) == scale_shape
    assert data.data_ptr() == pool.data_ptr() and scales.data_ptr() == pool.data_ptr() + pages.field("scales").base
    inputs = group_inputs(g, 40, 7, "cpu", seed=3)
    mine = member_inputs(g, "k", inputs)
    cache = mine["kvcache"]
    reference.store(k, mine["x"], mine["weight"], mine["freqs"], mine["positions"], mine["out_loc"], cache,
                    scale=mine["scale"])
    loc = mine["out_loc"].long()
    slots = loc[(loc >= 0) & (loc < cache.shape[0] * k.page_size)]  # the inputs also hold slots past the pool
    assert slots.numel() > 10
    read = fp4_rows(pages, cache, slots, mine["scale"])  # as the engine's reader does
    want = pages.decode(cache, slots, mine["scale"])
    if k.store == "mxfp4":
        assert torch.equal(read, want)
    else:  # the codec divides by RN(1 / k_scale) where the reader multiplies by k_scale: an ulp or two apart
        assert torch.allclose(read, want, rtol=2 ** -21, atol=0) and not torch.equal(read, torch.zeros_like(read))
    with pytest.raises(ValueError, match=r"field_view needs this cache as uint8 \[num_pages, \d+\]"):
        pages.field_view(cache.view(torch.int8), "values")


def vllm_trtllm_scale_byte(t: int, h: int, b: int, page_size: int, heads: int, head_dim: int) -> int:
    """Where vLLM's NVFP4 writer puts V scale b of (token t, head h) in a page's scale region for trtllm-gen on SM100
    (nvfp4_kv_cache_kernels.cu swizzle_scale_offset, written here from its expressions): in the head's
    [page_size, S] tile (S = head_dim / 16), row 4 (t // 4) + b // (S / 4), column 4 (b % (S / 4)) + t % 4."""
    s = head_dim // 16
    row, col = 4 * (t // 4) + b // (s // 4), 4 * (b % (s // 4)) + t % 4
    return h * page_size * s + row * s + col


def test_trtllm_v_scales_interleave_four_tokens_and_k_scales_stay_linear() -> None:
    """llama3_8b_nvfp4_trtllm: vLLM's [num_blocks, 2 x kv_heads, page_size, 72] pool (K's page, then V's, each HND
    data then scales). Every V scale sits where vLLM's swizzle puts it (the worked example: token 5, head 3, block 6
    at byte 441 of the scale region, page byte 9216 + 8192 + 441), every K scale where a linear write does."""
    g = resolve_group(SPEC.group("llama3_8b_nvfp4_trtllm"))
    k, v = (Pages.of(layout_of(g.member(r))) for r in ("k", "v"))
    assert (k.page_bytes, k.page_stride, v.page_bytes) == (9216, 18432, 9216)
    ks, vs = k.field("scales"), v.field("scales")
    assert ks.base == vs.base == 8 * 16 * 64 and ks.interleave == 1 and vs.interleave == 4
    for t in range(16):
        for h in range(8):
            rec = int(v.in_page(torch.tensor(t * 8 + h)))
            for b in range(8):
                assert vs.byte(rec, b) - vs.base == vllm_trtllm_scale_byte(t, h, b, 16, 8, 128), (t, h, b)
                assert ks.byte(rec, b) - ks.base == (h * 16 + t) * 8 + b
    assert vs.byte(int(v.in_page(torch.tensor(5 * 8 + 3))), 6) == 8192 + 441
    # the bytes a page's V records own are the whole scale region, each once
    cols = torch.stack([vs.byte(torch.tensor(r), torch.arange(8)) for r in range(128)]).flatten()
    assert sorted(cols.tolist()) == list(range(8192, 9216))
    from kernelgen.layout.doc import layout_json  # what export manifests and `kernelgen list --layouts` tell an allocator

    assert [f.get("interleave", 1) for f in layout_json(v)["fields"]] == [1, 4]
    assert [f.get("interleave", 1) for f in layout_json(k)["fields"]] == [1, 1]


def test_trtllm_pool_reads_back_through_the_engines_views() -> None:
    """The group's reference writes vLLM's pool; read as trtllm-gen's writer laid it out (the V scale view
    [pages, heads, page_size / 4, 8, 4]), K and V equal kernelgen's own decode, and V's view of the linear twin's
    pages would not: the interleave moved bytes."""
    g = resolve_group(SPEC.group("llama3_8b_nvfp4_trtllm"))
    inputs = group_inputs(g, 40, 7, "cpu", seed=5)
    for role in ("k", "v"):
        m = g.member(role)
        pages = Pages.of(layout_of(m))
        mine = member_inputs(g, role, inputs)
        cache = mine["kvcache"]
        reference.store(m, mine["x"], mine["weight"], mine["freqs"], mine["positions"], mine["out_loc"], cache,
                        scale=mine["scale"])
        loc = mine["out_loc"].long()
        slots = loc[(loc >= 0) & (loc < cache.shape[0] * m.page_size)]
        assert slots.numel() > 10
        sf = pages.field_view(cache, "scales")
        assert tuple(sf.shape) == ((cache.shape[0], 8, 4, 8, 4) if role == "v" else (cache.shape[0], 8, 16, 8))
        read = fp4_rows(pages, cache, slots, mine["scale"])
        assert torch.allclose(read, pages.decode(cache, slots, mine["scale"]), rtol=2 ** -21, atol=0)
        if role == "v":  # read as if linear, the same bytes give other rows
            linear = Pages.of(layout_of(replace(m, scale_order="linear")))
            assert not torch.allclose(linear.decode(cache, slots, mine["scale"]), read, rtol=1e-3, atol=0)


@pytest.mark.parametrize("change, words", [
    ({"kv_store": "fp8_scaled"}, "scale_order interleaves the one-byte scales of e2m1 codes kept in a region of their "
                                  "own: use a store of fp4_e2m1, nvfp4, fp4_v41, mxfp4, nvfp4_kv, or drop scale_order "
                                  "[guard scale_order_needs_byte_scales]"),
    ({"kv_layout": "nhd"}, "scale_order interleaves the scales of consecutive tokens of one head: it needs kv_layout: "
                           "hnd (or one head)"),
    ({"page_size": 2}, "a page_size that is a multiple of the tokens it interleaves"),
])
def test_a_scale_order_the_layout_cannot_hold_is_refused_in_python_and_by_the_compiler(change: dict,
                                                                                        words: str) -> None:
    import re

    from kernelgen.codegen.guards import precheck
    from kernelgen.codegen.render import render_variant
    from kernelgen.errors import GuardViolation
    from kernelgen.spec.parse import parse_spec

    model = {"name": "m", "num_q_heads": 8, "num_kv_heads": 2, "head_dim": 128, "kv_store": "nvfp4_kv",
             "kv_layout": "hnd", "v_scale_order": "token4", **change}
    text = ("family: fused_norm_rope_store\nname: t\nmodels:\n  - {"
            + ", ".join(f"{k}: {v}" for k, v in model.items()) + "}\n")
    v = parse_spec(text, "t.yaml").variant("m_v")
    with pytest.raises(GuardViolation, match=re.escape(words)):
        precheck(v)
    assert words.split(" [guard")[0][:60] in render_variant(v, check=False)  # the static_assert's message
