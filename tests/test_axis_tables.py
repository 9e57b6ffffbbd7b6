"""Pure tier: the norm and RoPE axes are tables (spec/norms.py, spec/ropes.py) that every stage reads: the
device enums and flags, the spec language and its other spellings, names, the renderer, the reference."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kernelgen.codegen.render import render_variant
from kernelgen.errors import SpecError
from kernelgen.measure import reference
from kernelgen.spec import norms, ropes
from kernelgen.spec.parse import parse_spec
from kernelgen.spec.variant import AXES, Variant, short_name

pytestmark = pytest.mark.pure
ROOT = Path(__file__).resolve().parents[1]


def _device_enum(name: str) -> list[str]:
    text = (ROOT / "templates" / "kernelgen" / "params.cuh").read_text()
    found = re.search(rf"enum class {name} \{{([^}}]*)\}}", text)
    assert found is not None
    return [e.strip() for e in found.group(1).split(",")]


def test_the_device_norm_enum_is_the_tables() -> None:
    assert _device_enum("Norm") == list(norms.NORM_ENUM_ORDER)
    assert sorted(k.enum for k in norms.NORMS.values()) == sorted(norms.NORM_ENUM_ORDER)


def test_the_spec_language_takes_every_value_and_names_it_for_another_spelling() -> None:
    assert AXES["norm"][1] == tuple(norms.NORMS) and AXES["rope_style"][1] == tuple(ropes.ROPE_STYLES)
    assert AXES["rope_table"][1] == tuple(ropes.ROPE_TABLES)
    for axis, table in (("norm", norms.NORMS), ("rope_style", ropes.ROPE_STYLES)):
        for entry in table.values():
            for word in (entry.name, *entry.aliases):
                text = (f"family: fused_norm_rope_store\nname: t\nvariants:\n  - name: v\n    {axis}: {word}\n"
                        "    rope_place: head\n")
                if word == entry.name:
                    assert getattr(parse_spec(text, "t.yaml").variant("v"), axis) == entry.name
                    continue
                with pytest.raises(SpecError, match=rf"t.yaml:5:\d+: {axis} '{word}' .*\(did you mean {entry.name}\?\)"):
                    parse_spec(text, "t.yaml")  # another spelling: refused, naming the table's one
            assert short_name(axis, entry.name) == entry.short


def test_the_renderer_writes_each_entrys_enum_and_flags() -> None:
    for kind in norms.NORMS.values():
        source = render_variant(Variant("v", norm=kind.name), check=False)
        assert f"kernelgen::Norm::{kind.enum};" in source
        assert (kind.title in source.splitlines()[4]) if kind.title else "Norm" not in source.splitlines()[4]
    for style in ropes.ROPE_STYLES.values():
        source = render_variant(Variant("v", rope_style=style.name, rope_place="head"), check=False)
        assert f"kNeox = {'true' if style.neox else 'false'};" in source
    for table in ropes.ROPE_TABLES.values():
        source = render_variant(Variant("v", rope_table=table.name), check=False)
        assert f"kRopeHalves = {'true' if table.halves else 'false'};" in source


def _norm(v: Variant, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return reference._norm(v, x, w, None, 1e-6)


def test_the_reference_follows_each_entrys_properties_not_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new norm kind whose properties the reference already knows (here LayerNorm times (1 + w)) is a table
    entry: the reference computes it with no edit; and each shipped kind is what its properties say."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 128, generator=g), torch.randn(128, generator=g)
    v = Variant("v", head_dim=128)
    rms = _norm(v, x, w)
    assert torch.allclose(rms, x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w, rtol=1e-5, atol=1e-5)
    assert torch.equal(_norm(replace(v, norm="none"), x, w), x)
    assert torch.allclose(_norm(replace(v, norm="rms_gemma"), x, w), rms / w * (1 + w), rtol=1e-4, atol=1e-4)
    new = norms.NormKind("layer_1p", "kLayer1p", "ln1p", "LayerNorm x (1 + w)", centered=True, unit_offset=True)
    monkeypatch.setitem(norms.NORMS, new.name, new)
    c = x - x.mean(-1, keepdim=True)
    want = c / torch.sqrt((c * c).mean(-1, keepdim=True) + 1e-6) * (1 + w)
    assert torch.allclose(_norm(replace(v, norm="layer_1p"), x, w), want, rtol=1e-4, atol=1e-4)


def test_rope_pairs_and_tables_are_the_entries_slices() -> None:
    """Interleaved pairs neighbours, neox pairs half a rope apart; a pairs table keeps (cos, sin) side by side,
    a halves table every cos then every sin: the reference rotates by exactly those."""
    assert ropes.ROPE_STYLES["interleaved"].pairs(8) == (slice(0, 8, 2), slice(1, 8, 2))
    assert ropes.ROPE_STYLES["neox"].pairs(8) == (slice(0, 4), slice(4, 8))
    assert ropes.ROPE_TABLES["halves"].cos_sin(8) == (slice(0, 4), slice(4, 8))
    v = Variant("v", head_dim=64, rope_dim=8, rope_place="head", rope_style="neox", rope_table="halves")
    y = torch.arange(1.0, 65.0).reshape(1, 64)
    angles = torch.tensor([0.3, 0.5, 0.7, 1.1])
    freqs = torch.cat([angles.cos(), angles.sin()]).reshape(1, 8)
    out = reference._rope(v, y, freqs, torch.zeros(1, dtype=torch.int32))
    lo, hi = y[0, :4], y[0, 4:8]
    assert torch.allclose(out[0, :4], lo * angles.cos() - hi * angles.sin())
    assert torch.allclose(out[0, 4:8], hi * angles.cos() + lo * angles.sin())
    assert torch.equal(out[0, 8:], y[0, 8:])


def test_page_geometry_is_read_from_its_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """slots, kv_layout and kv_pool: their values, names, the renderer's flags, the layout's page stride and the
    in-page order of records come from spec/pages.py; a pool of three caches would be a table entry."""
    from kernelgen.layout.layout import layout_of
    from kernelgen.spec import pages

    assert AXES["slots"][1] == tuple(pages.SLOT_SOURCES) and AXES["kv_layout"][1] == tuple(pages.RECORD_ORDERS)
    assert AXES["kv_pool"][1] == tuple(pages.POOL_SHARES)
    k = Variant("k", heads=4, page_size=16, rope_dim=0, norm="none", kv_layout="hnd", kv_pool="joint")
    lay = layout_of(k)
    source = render_variant(k, check=False)
    assert "kHnd = true;" in source and "kJointPool = true;" in source and "kTokenSlots = false;" in source
    assert lay.page_stride == 2 * lay.page_bytes and lay.joint
    # record s * heads + h of a heads-major page sits at h * page_size + s
    assert [lay.in_page(r) for r in (0, 1, 4, 5)] == [0, 16, 1, 17]
    assert [layout_of(replace(k, kv_layout="nhd")).in_page(r) for r in (0, 1, 4, 5)] == [0, 1, 4, 5]
    triple = pages.PoolShare("triple", "triple", caches=3, describe="one third of a K/V/extra pool")
    monkeypatch.setitem(pages.POOL_SHARES, "triple", triple)
    third = layout_of(replace(k, kv_pool="triple"))
    assert third.page_stride == 3 * third.page_bytes and third.joint
    assert "one third of a K/V/extra pool" in third.describe()
    assert short_name("slots", "token") == "dense" and short_name("kv_pool", "joint") == "joint"


def test_the_device_encoder_and_global_scale_enums_are_the_format_tables() -> None:
    from kernelgen.spec import formats

    assert _device_enum("Encoder") == list(formats.ENCODER_ORDER)
    assert set(formats.ENCODERS.values()) == set(formats.ENCODER_ORDER)
    assert _device_enum("GlobalScale") == ["kNone", "kTimes", "kTimesReciprocal", "kDivide"]
    assert set(formats.GLOBAL_OPS.values()) == set(_device_enum("GlobalScale"))
    # every part rule of every format has an encoder (its first part's) and the codec and oracle know it
    from kernelgen.layout.codec import RULES
    from kernelgen.measure.oracle import _CHECKERS

    for fmt in formats.FORMATS.values():
        assert fmt.parts[0].rule in formats.ENCODERS, fmt.name
        for part in fmt.parts:
            assert part.rule in RULES and part.rule in _CHECKERS, (fmt.name, part.rule)
