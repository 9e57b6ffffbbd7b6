"""Unit tier: DeepSeek-V4.1's main-KV records (fp8_v41, fp4_v41 and their interleaved arrangements) hold the bytes
SGLang 0.5.23 writes, by facts read from its sources (kv_layout.py / kv_layout.cuh), stated here as numbers so that
neither the layout code nor the codec can vouch for itself; a V4 pool is refused by a V4.1 kernel and back."""
from __future__ import annotations

from dataclasses import replace

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
from kernelgen.spec.variant import Variant

pytestmark = pytest.mark.pure

# SGLang's KVLayout: (data bytes, scale bytes, page align, interleaved) per layout, and our store for it.
SGLANG = {
    "fp8_v41": (512, 16, 512, False),
    "fp8_v41_interleaved": (512, 16, 528, True),
    "fp4_v41": (256, 32, 256, False),
    "fp4_v41_interleaved": (256, 32, 288, True),
}


def _v(store: str, page_size: int = 64, **kw: object) -> Variant:
    return Variant(f"t_{store}", head_dim=512, rope_dim=64, store=store, page_size=page_size, **kw)


@pytest.mark.parametrize("store", sorted(SGLANG))
@pytest.mark.parametrize("page_size", [1, 2, 4, 16, 64, 128])
def test_page_bytes_and_row_addressing_are_sglangs(store: str, page_size: int) -> None:
    data, scale, align, interleaved = SGLANG[store]
    lay = layout_of(_v(store, page_size))
    assert lay.bytes_per_token == data + scale
    assert lay.page_bytes == -(-page_size * (data + scale) // align) * align  # kv_layout.py page_bytes
    values, scales = lay.field("values"), lay.field("scales")
    # kv_layout.py row_addressing: (data stride, scale base, scale stride)
    want = (data + scale, data, data + scale) if interleaved else (data, page_size * data, scale)
    assert (values.stride, scales.base, scales.stride) == want
    assert (values.size, scales.size) == (data, scale)


def _encode(store: str, row: torch.Tensor) -> dict[str, torch.Tensor]:
    return codec.encode(layout_of(_v(store)), row.reshape(1, 512).float())


def test_fp8_v41_scale_floor_is_on_the_scale() -> None:
    # an all-zero row: exponent floored at 2^-13 (byte 114), where fp8_flashmla floors amax at 1e-4 (2^-22: byte 105)
    f = _encode("fp8_v41", torch.zeros(512))
    assert f["scales"].tolist() == [[114] * 16] and f["values"].eq(0).all()
    # amax 448 -> 2^0 (byte 127), just above -> 2^1; 1e-4 * 448 = 0.0448 -> 2^-13 still; codes exact multiples
    row = torch.zeros(512)
    row[0], row[32], row[64], row[96] = 448.0, 448.5, 0.0448, 3.5
    f = _encode("fp8_v41", row)
    assert f["scales"][0, :4].tolist() == [127, 128, 114, 120]  # 3.5 / 448 = 2^-7: byte 120
    assert f["values"][0, 0].item() == 0x7E  # 448 / 2^0 = 448: e4m3 0x7E
    assert f["values"][0, 96].item() == 0x7E  # 3.5 / 2^-7 = 448 too


def test_fp4_v41_scale_divides_is_clamped_and_codes_keep_the_sign_of_zero() -> None:
    row = torch.zeros(512)
    row[0:16] = torch.tensor([6.0, -0.2, 0.75, 0.25, 1.75, -3.5, 5.0, 2.5] + [0.0] * 8)  # scale 1.0: e4m3 0x38
    row[16] = 1e-3  # amax / 6 below 2^-9: the scale is 2^-9 (e4m3 0x01), so 1e-3 / 2^-9 = 0.512 -> code 1 (0.5)
    f = _encode("fp4_v41", row)
    assert f["scales"][0, 0].item() == 0x38 and f["scales"][0, 1].item() == 0x01
    assert f["scales"][0, 2:].eq(0x01).all()  # all-zero groups: the 2^-9 floor, never a 0 scale
    codes = codec.unpack_nibbles(f["values"])[0]
    # 6 -> 7; -0.2 -> -0 (8); 0.75 -> 1.0 (2, tie to even); 0.25 -> 0; 1.75 -> 2 (4); -3.5 -> -4 (8 | 6); 5 -> 4 (6)
    assert codes[:8].tolist() == [7, 8, 2, 0, 4, 14, 6, 4]
    assert codes[16].item() == 1
    assert f["values"][0, 0].item() == 7 | (8 << 4)  # the even dim in the low nibble


def test_round_norm_bf16_rotates_the_bf16_norm_output() -> None:
    v = _v("fp8_v41", round_norm_bf16=True, round_through_bf16=True)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 512, generator=g).bfloat16()
    w = torch.rand(512, generator=g) + 0.5
    freqs = torch.randn(32, 64, generator=g)
    pos = torch.arange(8)
    plain = reference.rows(replace(v, round_norm_bf16=False), x, w, freqs, pos)
    got = reference.rows(v, x, w, freqs, pos)
    assert torch.equal(got[:, :448], codec.bf16_round(plain[:, :448]))  # the nope dims: the bf16 norm output
    # the roped dims: the interleaved pairs of the rounded norm output, rotated in float32
    normed = codec.bf16_round(reference.rows(replace(v, round_norm_bf16=False, rope_dim=0), x, w, None, None))
    a, b = normed[:, 448::2], normed[:, 449::2]
    cos, sin = freqs[pos][:, 0::2], freqs[pos][:, 1::2]
    assert torch.equal(got[:, 448::2], a * cos - b * sin) and torch.equal(got[:, 449::2], b * cos + a * sin)
    assert not torch.equal(got[:, 448:], plain[:, 448:])


V4 = ("dsv4_mainkv", "dsv4_mainkv_fp8mla_p64")
V41 = [("dsv4_mainkv", f"dsv4_mainkv_{n}_p64") for n in ("v41", "v41_new", "v41_fp4", "v41_fp4_new", "uniform_fp8")]


def _checker(spec: str, name: str) -> InputChecker:
    v = resolve(load_spec(spec).variant(name))
    return InputChecker(v, pages_of(v), x_align(v, default_plan(v)))


def _args(pool_bytes: int, n: int = 4) -> list[torch.Tensor]:
    dev = "cuda"
    return [torch.empty(n, 512, dtype=torch.bfloat16, device=dev), torch.empty(512, device=dev),
            torch.empty(512, device=dev), torch.empty(64, 64, device=dev), torch.empty(n, dtype=torch.long, device=dev),
            torch.empty(n, dtype=torch.long, device=dev), torch.empty(3, pool_bytes, dtype=torch.uint8, device=dev),
            torch.empty(1, device=dev)]  # scale: read only by fp8_scaled (UNIFORM_FP8)


@pytest.mark.parametrize("other", V41, ids=lambda o: o[1])
def test_a_v4_pool_is_refused_by_a_v41_kernel_and_back(other: tuple[str, str]) -> None:
    v4, v41 = _checker(*V4), _checker(*other)
    v4_bytes, v41_bytes = (layout_of(load_spec(s).variant(n)).page_bytes for s, n in (V4, other))
    assert v4_bytes != v41_bytes
    with FakeTensorMode():
        for checker, foreign, own in ((v41, v4_bytes, v41_bytes), (v4, v41_bytes, v4_bytes)):
            checker.check(*_args(own), metadata_only=True)  # its own pool passes
            with pytest.raises(LayoutMismatch, match=rf"rows are {foreign} bytes but \S+ writes {own}-byte pages"):
                checker.check(*_args(foreign), metadata_only=True)
