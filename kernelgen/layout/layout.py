"""Byte layouts of the paged caches (pure arithmetic): one source of truth for Python, the kernels and the docs."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from ..spec.formats import Part, StoreFormat, format_of, part_dims
from ..spec.pages import POOL_SHARES, RECORD_ORDERS, SCALE_ORDERS
from ..spec.variant import Variant

Encoding = Literal["bf16", "fp16", "e4m3", "fp32", "e2m1x2", "ue8m0", "i8"]


@dataclass(frozen=True)
class Field:
    """One per-token record inside a page: token `off` owns bytes [base + off*stride, +size); with an interleave
    g > 1 (scale_order, spec/pages.py SCALE_ORDERS) runs of g records share g * stride bytes, byte j of record off
    at base + (off // g) * g * stride + j * g + off % g."""

    name: str
    encoding: Encoding
    base: int
    stride: int
    size: int
    what: str
    interleave: int = 1

    def offset(self, off: int) -> int:
        """The address of record off's first byte."""
        return self.byte(off, 0)

    def byte(self, off: Any, j: Any) -> Any:
        """The address of byte j of record off (ints or broadcasting tensors)."""
        g = self.interleave
        if g == 1:
            return self.base + off * self.stride + j
        return self.base + (off // g) * (g * self.stride) + j * g + off % g

    def address(self, record: str = "off") -> str:
        """Field.byte in words, for record `record` and its byte j."""
        g = self.interleave
        if g == 1:
            return f"{self.base} + {record}*{self.stride} + j"
        return f"{self.base} + ({record} // {g})*{g * self.stride} + {g}*j + {record} % {g}"


@dataclass(frozen=True)
class Segment:
    """A part of the store format placed on a row: dims [begin, end) of the stored row."""

    part: Part
    begin: int
    end: int


@dataclass(frozen=True)
class Layout:
    variant_name: str
    store: str
    head_dim: int
    page_size: int
    bytes_per_token: int
    page_bytes: int
    fields: tuple[Field, ...]
    segments: tuple[Segment, ...] = ()  # how the row's dims map onto the value fields (codec and oracle)
    heads: int = 1  # records per token: head h of the token in slot s is record s * heads + h
    hnd_heads: int = 0  # a heads-major record order with this many heads (spec/pages.py RECORD_ORDERS), else 0
    order: str = "nhd"  # the page's record order (kv_layout, spec/pages.py RECORD_ORDERS)
    pool: str = "separate"  # how many caches share the pages (kv_pool, spec/pages.py POOL_SHARES)
    pool_page: int = 0  # bytes from one page of the cache to the next where others share the pool (0: page_bytes)
    pool_record: int = 0  # a packed pool's record bytes: the next cache's record starts this far after this one's

    @property
    def page_stride(self) -> int:
        """Bytes from one page of the cache to the next (a joint pool interleaves the K and V pages, a packed one
        their records: a page spans page_bytes of its pool page)."""
        return self.pool_page or self.page_bytes

    @property
    def joint(self) -> bool:
        """The cache is one part of a shared pool (kv_pool: joint or packed): a view whose pages are page_stride
        bytes apart."""
        return POOL_SHARES[self.pool].joint

    @property
    def hnd(self) -> bool:
        return self.hnd_heads > 0

    def in_page(self, record: Any) -> Any:
        """The position in its page of a record (counted from the page's first record; an int or a tensor)."""
        if not self.hnd:
            return record
        return RECORD_ORDERS[self.order].in_page(record, self.records_per_page // self.hnd_heads, self.hnd_heads)

    @property
    def records_per_page(self) -> int:
        """Records a page holds (one per (token, head)); fields' strides and offsets count records."""
        return self.page_size * self.heads

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

        value_fields = [f for f in self.fields if f.encoding in ("bf16", "fp16", "e4m3", "e2m1x2", "i8")]
        return min([16, low_bit(self.page_bytes), low_bit(self.page_stride), low_bit(self.pool_record)]
                   + [min(low_bit(f.base), low_bit(f.stride)) for f in value_fields])

    @property
    def written_bytes_per_token(self) -> int:
        return sum(f.size for f in self.fields) * self.heads

    def pool_words(self) -> str:
        """The tensor a pool allocator makes for this cache, in words (its own, or its part of a shared pool)."""
        share = POOL_SHARES[self.pool]
        if share.packed:
            return (f"the first {self.page_bytes} B of each page of a packed pool uint8 [num_pages, {self.page_stride}]"
                    f" (K's view; V's starts {self.pool_record} B later)")
        if share.joint:
            return f"one half of a joint pool uint8 [num_pages, {share.caches}, {self.page_bytes}]"
        return f"uint8 [num_pages, {self.page_bytes}]"

    def describe(self) -> str:
        order = RECORD_ORDERS[self.order].label if self.hnd else ""
        heads = f" ({self.heads} heads{', ' + order if order else ''})" if self.heads > 1 else ""
        joint = f", {POOL_SHARES[self.pool].describe}" if self.joint else ""
        return f"{self.bytes_per_token} B/token{heads} x {self.page_size}{joint}"

    def byte_map(self) -> list[tuple[int, int, str]]:
        """(start, end, description) spans of one page in address order, padding included."""
        spans: list[tuple[int, int, str]] = []
        n = self.records_per_page
        for f in self.fields:
            end = f.base + f.stride * (n - 1) + f.size
            every = "" if f.stride == f.size else f" every {f.stride} B"
            if f.interleave > 1:
                every += f", {f.interleave} records' scales interleaved byte by byte (byte j of record r at " \
                         f"{f.address('r')})"
            count = (f"{self.heads} x {self.page_size}" if self.hnd else f"{self.page_size} x {self.heads}") \
                if self.heads > 1 else f"{n}"
            spans.append((f.base, end, f"{f.name}: {count} x {f.size} B {f.what}{every}"))
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


@dataclass(frozen=True)
class _Sized:
    name: str
    encoding: Encoding
    size: int
    what: str


def _sized_fields(v: Variant, fmt: StoreFormat) -> list[_Sized]:
    """The format's fields for v with their sizes: every part's values, then every part's scales."""
    values, scales = [], []
    for part in fmt.parts:
        begin, end = part_dims(part, v)
        what = part.what.format(begin=begin, last=end - 1)
        values.append(_Sized(part.field, part.encoding, part.value_bytes(end - begin), what))
        if part.scale != "none":
            scales.append(_Sized(part.scale_field, part.scale_encoding, part.scale_bytes(end - begin),  # type: ignore[arg-type]
                                 part.scale_what.format(group=part.group)))
    return values + scales


def layout_of(v: Variant) -> Layout:
    """Place the format's fields in a page by its arrangement: regions one after another, each a
    record per token (per (token, head) with several heads, token-major) of its fields back to back."""
    if v.heads > 1:
        rows = layout_of(v.row_variant)
        return replace(rows, variant_name=v.name, page_size=v.page_size, heads=v.heads,
                       bytes_per_token=rows.bytes_per_token * v.heads, hnd_heads=hnd_heads(v), order=v.kv_layout)
    fmt, p = format_of(v), v.page_size
    sized = {f.name: f for f in _sized_fields(v, fmt)}
    placed: dict[str, Field] = {}
    cursor, bytes_per_token, records = 0, 0, []
    for region in fmt.arrangement.regions:
        members = [sized[name] for name in region.fields if name in sized]
        record = _round_up(sum(f.size for f in members), region.align)
        inner = 0
        for f in members:
            placed[f.name] = Field(f.name, f.encoding, cursor + inner, record, f.size, f.what)
            inner += f.size
        records.append(record)
        cursor += record * p
        bytes_per_token += record
    unplaced = set(sized) - set(placed)
    if unplaced:
        raise ValueError(f"store format {fmt.name}: fields {sorted(unplaced)} are in no region of its arrangement")
    page_bytes = cursor
    if fmt.arrangement.page_multiple_of >= 0:
        page_bytes = _round_up(cursor, records[fmt.arrangement.page_multiple_of])
    fields = tuple(placed[f.name] for f in sized.values())
    segments = tuple(Segment(part, *part_dims(part, v)) for part in fmt.parts)
    share = POOL_SHARES[v.kv_pool]
    span, stride, factor = share.place(page_bytes, records[0])
    if factor > 1:  # a packed pool: the caches' records alternate (a guard keeps it to one-region formats)
        fields = tuple(replace(f, stride=f.stride * factor) for f in fields)
    interleave = SCALE_ORDERS[v.scale_order].interleave
    if interleave > 1:  # the grouped scales' bytes (a guard keeps it to one-byte scales in a region of their own)
        scale_fields = {part.scale_field for part in fmt.parts if part.scale != "none"}
        fields = tuple(replace(f, interleave=interleave) if f.name in scale_fields else f for f in fields)
    return Layout(v.name, v.store, v.head_dim, p, bytes_per_token, span, fields, segments, pool=v.kv_pool,
                  pool_page=stride if share.joint else 0, pool_record=records[0] if share.packed else 0)


def hnd_heads(v: Variant) -> int:
    """The heads of an HND variant (the in-page permutation of its records), else 0."""
    return v.heads if RECORD_ORDERS[v.kv_layout].heads_major and v.heads > 1 else 0


def row_layout(v: Variant) -> Layout:
    """The layout of v's one-head rows (v.row_variant), keeping v's arrangement of records in a page: the
    reference, the comparison and the oracle work on rows and write or read them through this."""
    rows = layout_of(v.row_variant)
    return replace(rows, hnd_heads=hnd_heads(v), order=v.kv_layout) if hnd_heads(v) else rows
