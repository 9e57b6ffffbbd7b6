"""Pure tier: the store-format table is the one home of every format, and no shipped byte moved."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Callable, get_args

import pytest
import torch

from kernelgen.layout import codec
from kernelgen.layout.doc import layout_json
from kernelgen.layout.layout import layout_of
from kernelgen.measure import oracle
from kernelgen.spec.formats import FORMATS
from kernelgen.spec.parse import shipped_variants
from kernelgen.spec.variant import DTYPE_BYTES, StoreKind

pytestmark = pytest.mark.pure
ROOT = Path(__file__).resolve().parents[1]


def test_table_covers_exactly_the_spec_languages_formats() -> None:
    assert set(FORMATS) == set(get_args(StoreKind))
    assert all(name == fmt.name for name, fmt in FORMATS.items())
    assert len({fmt.short for fmt in FORMATS.values()}) == len(FORMATS)  # variant names stay distinct


def test_every_part_has_a_codec_and_an_oracle_rule() -> None:
    rules = {part.rule for fmt in FORMATS.values() for part in fmt.parts}
    assert rules <= set(codec.RULES) and rules <= set(oracle._CHECKERS)


def test_device_enum_matches_the_table() -> None:
    header = (ROOT / "templates" / "kernelgen" / "params.cuh").read_text()
    enums = re.search(r"enum class Store \{([^}]*)\}", header)
    assert enums is not None
    assert [e.strip() for e in enums.group(1).split(",")] == [fmt.enum for fmt in FORMATS.values()]


def test_every_field_lies_in_one_region_of_its_arrangement() -> None:
    for fmt in FORMATS.values():
        names = [p.field for p in fmt.parts] + [p.scale_field for p in fmt.parts if p.scale != "none"]
        placed = [n for region in fmt.arrangement.regions for n in region.fields if n in names]
        assert sorted(placed) == sorted(names), fmt.name


def test_no_module_but_the_table_names_a_format() -> None:
    """Formats are data: a chain of `if store == ...` elsewhere would hand a new format another's bytes."""
    # bf16 and fp16 are also dtype names (input_dtype, weight_dtype): quoted, they mostly mean the dtype
    quoted = re.compile("|".join(f"[\"']{re.escape(name)}[\"']" for name in FORMATS if name not in DTYPE_BYTES))
    offenders = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "kernelgen").rglob("*.py"))
                 if path.name not in ("formats.py", "variant.py") and quoted.search(path.read_text())]
    # the default studies name the stores they compare: recall the indexer's, fidelity a GQA model's K/V stores
    assert offenders == ["kernelgen/fidelity.py", "kernelgen/recall.py"]


def shipped_bytes() -> dict[str, dict[str, object]]:
    """Every shipped variant's byte map and the reference bytes of a fixed awkward input."""
    out: dict[str, dict[str, object]] = {}
    for v in shipped_variants():
        lay = layout_of(v)
        gen = torch.Generator().manual_seed(7)
        y = torch.randn(6, v.head_dim, generator=gen) * torch.tensor([1e-3, 1.0, 40.0, 1e4, 0.0, 1.0])[:, None]
        y[5, 3] = float("nan")
        g = torch.tensor([37.25]) if FORMATS[v.store].global_scale else None
        fields = codec.encode(lay, y, v.round_through_bf16, g)
        out[v.name] = {"layout": layout_json(lay),
                       "bytes": {k: hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()[:16]
                                 for k, t in sorted(fields.items())}}
    return out


def test_shipped_page_bytes_byte_maps_and_reference_bytes_are_unchanged(golden: Callable[[str, Any], None]) -> None:
    """tests/golden/shipped_bytes.json: regenerate with `python -m pytest tests/test_formats.py --update-goldens`
    only for a change that moves bytes on purpose."""
    golden("shipped_bytes.json", shipped_bytes())
