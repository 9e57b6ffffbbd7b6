"""Byte layouts of the paged caches (pure arithmetic): one source of truth for Python, the kernels and the docs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..spec.variant import Variant

Encoding = Literal["bf16", "e4m3", "fp32", "e2m1x2", "ue8m0"]

FLASHMLA_GROUP = 64  # dims per UE8M0 scale on the main-KV fp8 path
FP4_GROUP = 32  # dims per UE8M0 scale on the fp4 path


@dataclass(frozen=True)
class Field:
    """One per-token record inside a page: token `off` owns bytes [base + off*stride, +size)."""

    name: str
    encoding: Encoding
    base: int
    stride: int
    size: int
    what: str

    def offset(self, off: int) -> int:
        return self.base + off * self.stride


@dataclass(frozen=True)
class Layout:
    variant_name: str
    store: str
    head_dim: int
    page_size: int
    bytes_per_token: int
    page_bytes: int
    fields: tuple[Field, ...]

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.variant_name} ({self.store}) has no field '{name}'; it has "
                       f"{', '.join(f.name for f in self.fields)}")

    @property
    def store_align(self) -> int:
        """Widest access (4..16 B) every value-field address of this layout is aligned to."""
        def low_bit(n: int) -> int:
            return n & -n if n else 16

        value_fields = [f for f in self.fields if f.encoding in ("bf16", "e4m3", "e2m1x2")]
        return min([16, low_bit(self.page_bytes)] + [min(low_bit(f.base), low_bit(f.stride)) for f in value_fields])

    @property
    def written_bytes_per_token(self) -> int:
        return sum(f.size for f in self.fields)

    def describe(self) -> str:
        return f"{self.bytes_per_token} B/token x {self.page_size}"

    def byte_map(self) -> list[tuple[int, int, str]]:
        """(start, end, description) spans of one page in address order, padding included."""
        spans: list[tuple[int, int, str]] = []
        for f in self.fields:
            end = f.base + f.stride * (self.page_size - 1) + f.size
            every = "" if f.stride == f.size else f" every {f.stride} B"
            spans.append((f.base, end, f"{f.name}: {self.page_size} x {f.size} B {f.what}{every}"))
        spans.sort()
        out: list[tuple[int, int, str]] = []
        cursor = 0
        for start, end, text in spans:
            if start > cursor:
                out.append((cursor, start, "padding (never written)"))
            out.append((start, end, text))
            cursor = max(cursor, end)
        if cursor < self.page_bytes:
            out.append((cursor, self.page_bytes, "padding (never written)"))
        return _merge_interleaved(out)

def _merge_interleaved(spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    # Interleaved fields (e.g. nope and rope inside one 576-byte slot) overlap as spans; show them once.
    out: list[tuple[int, int, str]] = []
    for start, end, text in spans:
        if out and start < out[-1][1]:
            prev = out[-1]
            out[-1] = (prev[0], max(prev[1], end), f"{prev[2]}; {text}")
        else:
            out.append((start, end, text))
    return out


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def layout_of(v: Variant) -> Layout:
    d, p = v.head_dim, v.page_size
    if v.store == "bf16":
        fields = (Field("values", "bf16", 0, 2 * d, 2 * d, "bf16 values"),)
        return Layout(v.name, v.store, d, p, 2 * d, 2 * d * p, fields)
    if v.store == "fp8_e4m3":
        fields = (
            Field("values", "e4m3", 0, d, d, "e4m3 codes"),
            Field("scale", "fp32", d * p, 4, 4, "fp32 scale (amax/448)"),
        )
        return Layout(v.name, v.store, d, p, d + 4, (d + 4) * p, fields)
    if v.store == "fp4_e2m1":
        groups = max(d // FP4_GROUP, 1)
        fields = (
            Field("values", "e2m1x2", 0, d // 2, d // 2, "e2m1 pairs (low nibble = even dim)"),
            Field("scales", "ue8m0", d // 2 * p, groups, groups, f"UE8M0 scales, one per {FP4_GROUP} dims"),
        )
        return Layout(v.name, v.store, d, p, d // 2 + groups, (d // 2 + groups) * p, fields)
    return _flashmla_layout(v)


def _flashmla_layout(v: Variant) -> Layout:
    d, r, p = v.head_dim, v.rope_dim, v.page_size
    nope = d - r
    slot = nope + 2 * r  # e4m3 nope codes, then the roped dims as bf16
    groups = max(nope // FLASHMLA_GROUP, 1)
    scale_stride = _round_up(groups, 8)
    fields = (
        Field("nope", "e4m3", 0, slot, nope, f"e4m3 codes of dims 0..{nope - 1}"),
        Field("rope", "bf16", nope, slot, 2 * r, f"bf16 roped dims {nope}..{d - 1}"),
        Field("scales", "ue8m0", slot * p, scale_stride, groups, f"UE8M0 scales, one per {FLASHMLA_GROUP} nope dims"),
    )
    bytes_per_token = slot + scale_stride
    return Layout(v.name, v.store, d, p, bytes_per_token, _round_up(bytes_per_token * p, slot), fields)
