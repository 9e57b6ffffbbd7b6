"""How the engines' attention kernels read the 4-bit K/V caches whose scales sit in a tensor of their own, written
from their readers (not from kernelgen's codec): element d from byte d // 2 of the data tensor (odd d: the high
nibble), times its block's scale from the scale tensor (trtllm-gen's V scales: scale b of token t at 4 b + t % 4 of
its run of 4 tokens). Shared by the CPU test of the views and the GPU consumer
test."""
from __future__ import annotations

from typing import Any

from kernelgen.layout import codec


def fp4_rows(pages: Any, cache: Any, slots: Any, k_scale: Any = None) -> Any:
    """K or V rows [N, heads, head_dim] of the given slots, read through Pages.field_view: FlashInfer's NVFP4 (e4m3
    block scale per 16 values, times the dequantization scale k_scale) or SGLang's MXFP4 (2^(byte - 127) per 32
    values, byte 0 read as 2^-127 as its e8m0_to_f32 does)."""
    import torch

    data, sf = pages.field_view(cache, "values"), pages.field_view(cache, "scales")
    loc = slots.long()
    page, entry = loc // pages.page_size, loc % pages.page_size
    d = pages.head_dim
    if pages.hnd:  # [pages, heads, page_size, ...]: vLLM's HND pages for trtllm-gen
        codes = data[page, :, entry]
        # V's scales of each run of 4 tokens transposed to [scale, token] (vLLM's swizzle_scale_offset)
        raw = sf[page, :, entry // 4, :, entry % 4] if sf.dim() == 5 else sf[page, :, entry]
    else:
        codes, raw = data[page, entry], sf[page, entry]
    values = codec.e2m1_decode(codec.unpack_nibbles(codes.reshape(-1, d // 2))).reshape(-1, pages.heads, d)
    if pages.store == "mxfp4":
        scale = torch.where(raw == 0, 2.0 ** -127, torch.ldexp(torch.ones(raw.shape, device=raw.device), raw.int() - 127))
        return values * scale.repeat_interleave(32, -1)
    return values * codec.e4m3_decode(raw).repeat_interleave(16, -1) * k_scale
