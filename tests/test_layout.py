"""Pure tier: byte layouts match docs/layouts.md (the serving layouts); quantizers follow their rounding rules."""
from __future__ import annotations

import pytest
import torch

from kernelgen.errors import LayoutMismatch
from kernelgen.layout import codec
from kernelgen.layout.pages import pages_of as layout_of
from kernelgen.layout.pages import read_fields, write_fields
from kernelgen.spec.variant import Variant

pytestmark = pytest.mark.pure


def indexer(store: str, page_size: int = 64) -> Variant:
    return Variant(f"idx_{store}_p{page_size}", head_dim=128, hadamard=True, store=store, page_size=page_size)


def mainkv(store: str, page_size: int) -> Variant:
    return Variant(f"kv_{store}_p{page_size}", head_dim=512, store=store, page_size=page_size)


@pytest.mark.parametrize("variant, bytes_per_token, page_bytes", [
    (indexer("fp8_e4m3", 64), 132, 8448),
    (indexer("bf16", 64), 256, 16384),
    (indexer("fp4_e2m1", 64), 68, 4352),
    (indexer("fp8_e4m3", 1), 132, 132),
    (mainkv("fp8_flashmla", 1), 584, 1152),
    (mainkv("fp8_flashmla", 64), 584, 37440),  # ceil(584*64/576)*576
    (mainkv("bf16", 1), 1024, 1024),
])
def test_sizes_match_layouts_md(variant: Variant, bytes_per_token: int, page_bytes: int) -> None:
    layout = layout_of(variant)
    assert (layout.bytes_per_token, layout.page_bytes) == (bytes_per_token, page_bytes)
    assert layout.allocate(3).shape == (3, page_bytes)


def test_field_offsets_match_layouts_md() -> None:
    fp8 = layout_of(indexer("fp8_e4m3", 64))
    assert fp8.field("values").offset(5) == 5 * 128
    assert fp8.field("scale").offset(5) == 128 * 64 + 5 * 4
    fp4 = layout_of(indexer("fp4_e2m1", 16))
    assert fp4.field("scales").offset(3) == 64 * 16 + 3 * 4
    mla = layout_of(mainkv("fp8_flashmla", 64))
    assert (mla.field("nope").offset(2), mla.field("rope").offset(2)) == (2 * 576, 2 * 576 + 448)
    assert mla.field("scales").offset(2) == 576 * 64 + 2 * 8 and mla.field("scales").size == 7


def test_pool_of_other_layout_fails_naming_both_numbers() -> None:
    from kernelgen.codegen.launch import default_plan, resolve
    from kernelgen.codegen.render import x_align
    from kernelgen.runtime.op import InputChecker

    v = resolve(indexer("fp8_e4m3", 64))
    fp8 = InputChecker(v, layout_of(v), x_align(v, default_plan(v)))  # the pool checks are the op's table
    x, w, freqs = torch.zeros(4, 128, dtype=torch.bfloat16), torch.ones(128), torch.zeros(16, 64)
    pos, loc = torch.zeros(4, dtype=torch.long), torch.arange(4)
    with pytest.raises(LayoutMismatch) as info:
        fp8.check(x, w, None, freqs, pos, loc, torch.zeros(10, 16384, dtype=torch.uint8))
    assert str(info.value).startswith(
        "idx_fp8_e4m3_p64: kvcache rows are 16384 bytes but idx_fp8_e4m3_p64 writes 8448-byte pages "
        "(132 B/token x 64)")
    with pytest.raises(LayoutMismatch, match="2-D uint8"):
        fp8.check(x, w, None, freqs, pos, loc, torch.zeros(10, 8448, dtype=torch.bfloat16))


def test_byte_map_covers_page_and_marks_padding() -> None:
    mla = layout_of(mainkv("fp8_flashmla", 1))
    spans = mla.byte_map()
    assert spans[0][0] == 0 and spans[-1][1] == 1152
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert spans[-1][2] == "padding (never written)"


def test_e2m1_thresholds_round_up_only_strictly_above() -> None:
    q = torch.tensor([0.25, 0.2501, 0.75, 0.7501, 1.25, 1.75, 2.5, 3.5, 5.0, 5.01, 100.0, -0.75, -0.1])
    codes = codec.e2m1_encode(q)
    assert codec.e2m1_decode(codes).tolist() == [0.0, 0.5, 0.5, 1.0, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 6.0, -0.5, -0.0]
    assert int(codes[-1]) == 8  # small negatives keep the sign bit


def test_pow2_scales_are_exact_ceil_log2() -> None:
    v = torch.tensor([1.0, 1.0000001, 0.5, 3.0, 2.0 ** -20, 0.75])
    assert codec.ceil_log2(v).tolist() == [0, 1, -1, 2, -20, 0]


def test_fp8_scale_is_raw_amax_over_448() -> None:
    layout = layout_of(indexer("fp8_e4m3", 1))
    y = torch.zeros(2, 128)
    y[0, 3], y[1, 7] = -3.0, 1e-6
    scale = codec.encode(layout, y)["scale"].view(torch.float32).flatten()
    assert scale[0] == torch.tensor(3.0) / 448 and scale[1] == torch.tensor(1e-4) / 448


@pytest.mark.parametrize("store, tol", [("bf16", 8e-3), ("fp8_e4m3", 0.07), ("fp4_e2m1", 0.3), ("fp8_flashmla", 0.07)])
def test_encode_write_read_decode_round_trip(store: str, tol: float) -> None:
    v = mainkv(store, 4) if store == "fp8_flashmla" else indexer(store, 4)
    layout = layout_of(v)
    y = torch.randn(9, v.head_dim) * 5
    loc = torch.tensor([0, 5, 2, 9, 11, 3, -1, 7, 1])
    cache = torch.randint(0, 256, (3, layout.page_bytes), dtype=torch.uint8)
    write_fields(layout, cache, loc, codec.encode(layout, y))
    back = layout.decode(cache, loc)
    assert torch.isnan(back[6]).all()
    keep = loc >= 0
    assert float((back[keep] - y[keep]).norm() / y[keep].norm()) < tol
    assert set(read_fields(layout, cache, loc)) == {f.name for f in layout.fields}


def test_golden_bytes_written_by_hand_from_layouts_md() -> None:
    """Bytes derived from the layout reference by hand, so a mistake shared by encode and decode still fails."""
    # fp4, page_size 2, slot 1: values at 64*1, scales at 64*2 + 4*1.
    fp4 = layout_of(indexer("fp4_e2m1", 2))
    y = torch.zeros(1, 128)
    y[0, 0], y[0, 1], y[0, 2], y[0, 3] = 0.5, -6.0, 2.6, 0.2  # group 0 amax 6 -> scale 2^0
    y[0, 32] = 12.0  # group 1 amax 12 -> scale 2^ceil(log2 2) = 2 -> code of 6 is 7
    cache = torch.zeros(1, fp4.page_bytes, dtype=torch.uint8)
    write_fields(fp4, cache, torch.tensor([1]), codec.encode(fp4, y))
    row = cache[0].tolist()
    assert row[64:66] == [0x01 | (0x8 | 0x7) << 4, 0x5 | 0x0 << 4]  # low nibble = even dim; 2.6 -> 3.0 (code 5)
    assert row[64 + 16] == 0x7  # dim 32: 12 / 2 = 6 -> code 7
    assert row[128 + 4:128 + 8] == [127, 128, 127 - 15, 127 - 15]  # groups 2, 3: amax 0 -> 1e-4/6 -> 2^-15
    assert row[:64] == [0] * 64 and row[128:132] == [0] * 4  # slot 0 untouched
    # fp8 indexer, page_size 4, slot 2: codes at 2*128, raw fp32 scale at 128*4 + 2*4.
    fp8 = layout_of(indexer("fp8_e4m3", 4))
    y = torch.zeros(1, 128)
    y[0, 0], y[0, 1] = 448.0, -1.0
    cache = torch.zeros(1, fp8.page_bytes, dtype=torch.uint8)
    write_fields(fp8, cache, torch.tensor([2]), codec.encode(fp8, y))
    assert cache[0, 256:258].tolist() == [0x7E, 0xB8]  # e4m3: 448 = 0x7E, -1.0 = 0xB8
    assert cache[0, 520:524].tolist() == list(torch.tensor([1.0]).view(torch.uint8).tolist())  # 448/448, LE
    # FlashMLA main KV, page_size 1: nope codes, then the roped dims as bf16, then 7 UE8M0 bytes + 1 pad.
    mla = layout_of(mainkv("fp8_flashmla", 1))
    y = torch.zeros(1, 512)
    y[0, 0], y[0, 448], y[0, 511] = 448.0, 1.0, -2.0
    cache = torch.full((1, mla.page_bytes), 0xEE, dtype=torch.uint8)
    write_fields(mla, cache, torch.tensor([0]), codec.encode(mla, y))
    row = cache[0].tolist()
    assert row[0] == 0x7E and row[448:450] == [0x80, 0x3F] and row[574:576] == [0x00, 0xC0]  # bf16 1.0, -2.0
    assert row[576:583] == [127] + [127 - 22] * 6 and row[583] == 0xEE  # 1e-4/448 -> 2^-22; byte 8 untouched
    assert row[584:] == [0xEE] * (1152 - 584)


@pytest.mark.pure
def test_docs_layouts_md_is_generated_from_the_layout_code() -> None:
    from pathlib import Path

    from kernelgen.layout.doc import layouts_markdown
    from kernelgen.spec.parse import shipped_variants

    doc = Path(__file__).resolve().parents[1] / "docs" / "layouts.md"
    assert doc.read_text() == layouts_markdown(shipped_variants()), "run python tools/gen_docs.py"
