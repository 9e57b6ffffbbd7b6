"""Unit tier: DeepSeek-V3 MLA caches (specs/mla.yaml) hold vLLM's bytes, by facts read from its sources and stated
here as numbers: the fp8_ds_mla 656-byte record, the fp8 cache's divide by k_scale, and the kv_a_layernorm over the
512 latent dims only (norm_dims: nope)."""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from kernelgen.codegen.launch import default_plan, resolve
from kernelgen.codegen.render import x_align
from kernelgen.errors import LayoutMismatch
from kernelgen.layout import codec
from kernelgen.layout.layout import layout_of
from kernelgen.layout.pages import pages_of
from kernelgen.measure import reference
from kernelgen.runtime.op import InputChecker
from kernelgen.spec.parse import load_spec

pytestmark = pytest.mark.pure

MLA = load_spec("mla")


def test_fp8_ds_mla_is_vllms_656_byte_record() -> None:
    lay = layout_of(MLA.variant("deepseek_v3_kv_fp8dsmla_p64"))
    # vLLM concat_and_cache_ds_mla: codes at 0..511, 4 fp32 tile scales at 512..527, 64 bf16 rope dims at 528..655
    assert {f.name: (f.base, f.stride, f.size) for f in lay.fields} == {
        "nope": (0, 656, 512), "scales": (512, 656, 16), "rope": (528, 656, 128)}
    assert (lay.bytes_per_token, lay.page_bytes) == (656, 64 * 656)


def test_vllm_mla_caches_are_576_wide_records() -> None:
    assert layout_of(MLA.variant("deepseek_v3_kv_bf16_p64")).page_bytes == 64 * 576 * 2
    assert layout_of(MLA.variant("deepseek_v3_kv_fp8_p64")).page_bytes == 64 * 576  # uint8 [blocks, 64, 576]


def test_fp8_ds_mla_tile_scales_are_powers_of_two_floored_at_1e_4() -> None:
    v = MLA.variant("deepseek_v3_kv_fp8dsmla_p64")
    row = torch.zeros(1, 576)
    row[0, 0], row[0, 128], row[0, 256] = 448.0, 449.0, 3.0  # tile 3 all zero
    f = codec.encode(layout_of(v), row)
    scales = f["scales"].view(torch.float32)[0].tolist()
    # 448 / 448 = 1; 449 / 448 -> 2; 3 / 448 -> 2^-7 (0.0078125); an all-zero tile: max(0, 1e-4) -> 2^-13
    assert scales == [1.0, 2.0, 2.0 ** -7, 2.0 ** -13]
    codes = f["nope"][0]
    assert codes[0].item() == 0x7E and codes[128].item() == 0x76  # 448 / 1 = 448; 449 / 2 = 224.5 -> 224 (0x76)
    assert codes[256].item() == 0x7C  # 3 / 2^-7 = 384 (0x7C)
    assert torch.equal(f["rope"].view(torch.bfloat16)[0], row[0, 512:].bfloat16())


def test_the_fp8_cache_divides_by_k_scale_where_fp8_scaled_multiplies() -> None:
    """vLLM's scaled_convert is RN(v / s); FlashInfer's and fp8_scaled's is RN(v * RN(1 / s)). A value where the
    two differ after e4m3 rounding keeps each format honest."""
    s = torch.tensor([0.3], dtype=torch.float32)
    grid = codec.e4m3_decode(torch.arange(0, 126, dtype=torch.uint8)).double()
    near = ((grid[:-1] + grid[1:]) / 2 * 0.3).float()  # v / s near each rounding boundary of the e4m3 grid
    vals = torch.cat([near.view(torch.int32).add(k).view(torch.float32) for k in range(-8, 9)])
    vals = torch.cat([vals, torch.zeros(576 - vals.numel() % 576)]).reshape(-1, 576)
    divided = layout_of(MLA.variant("deepseek_v3_kv_fp8_p64"))
    want_div = codec.e4m3_encode(vals / s)
    want_mul = codec.e4m3_encode(vals * (1.0 / s.double()).float())
    assert not torch.equal(want_div, want_mul)  # the inputs do reach a difference
    assert torch.equal(codec.encode(divided, vals, global_scale=s)["values"], want_div)


def test_the_norm_spans_the_latent_dims_and_the_rope_dims_are_only_rotated() -> None:
    v = resolve(MLA.variant("deepseek_v3_kv_bf16_p64"))
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(6, 576, generator=g) * 2).bfloat16()
    w = (1 + 0.2 * torch.randn(512, generator=g)).bfloat16()
    cos_sin = torch.randn(16, 64, generator=g)
    pos = torch.arange(6) % 16
    y = reference.rows(v, x, w, cos_sin, pos)
    xf = x.float()
    inv = 1.0 / torch.sqrt((xf[:, :512] * xf[:, :512]).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(y[:, :512], xf[:, :512] * inv * w.float(), rtol=1e-5, atol=1e-6)
    cos, sin = cos_sin[pos, :32], cos_sin[pos, 32:]  # vLLM's cos_sin_cache: 32 cos, then 32 sin
    a, b = xf[:, 512::2], xf[:, 513::2]  # DeepSeek's interleaved pairs (is_neox_style=False)
    assert torch.equal(y[:, 512::2], a * cos - b * sin) and torch.equal(y[:, 513::2], b * cos + a * sin)


def _checker(name: str) -> InputChecker:
    v = resolve(MLA.variant(name))
    return InputChecker(v, pages_of(v), x_align(v, default_plan(v)))


def test_the_weight_is_the_latent_dims_long() -> None:
    checker = _checker("deepseek_v3_kv_bf16_p64")
    dev = "cuda"
    with FakeTensorMode():
        def args(weight_len: int) -> list[torch.Tensor]:
            return [torch.empty(4, 576, dtype=torch.bfloat16, device=dev),
                    torch.empty(weight_len, dtype=torch.bfloat16, device=dev), None, torch.empty(64, 64, device=dev),
                    torch.empty(4, dtype=torch.long, device=dev), torch.empty(4, dtype=torch.long, device=dev),
                    torch.empty(2, 64 * 1152, dtype=torch.uint8, device=dev), None]
        checker.check(*args(512), metadata_only=True)
        with pytest.raises(LayoutMismatch, match=r"weight must be .*\[512\]"):
            checker.check(*args(576), metadata_only=True)
