"""The page-geometry tables: how a token's records map onto a cache's pages, one entry per value of the
`slots`, `kv_layout` and `kv_pool` axes.

A stored record is head h of the token in slot s (record s * heads + h). Four choices place it, each an entry
here: where slots come from (`slots`: a paged cache addressed by out_loc, or a dense output whose row t is token
t's), how a page orders its records (`kv_layout`: [page_size, heads, record] NHD or [heads, page_size, record]
HND), and how many caches share a page's address range (`kv_pool`: a cache of its own, one half of a joint
K/V pool [num_pages, 2, page] whose pages are two pages apart, or one half of a packed pool whose cells hold a
K record then a V record, vLLM's [num_blocks, block_size, heads, 2 x head_size]), and how a page orders the
bytes of its grouped scales (`scale_order`: each record's scales back to back, or four records' scales interleaved
byte by byte, the V scales trtllm-gen reads on SM100). Every stage reads these axes from here: the
spec language's values, generated variant names, the layout arithmetic and the torch page I/O
(layout/layout.py, layout/pages.py), the layout docs, the argument checks, the renderer's device flags, the
launch group's argument names and the test inputs. Adding a value is an entry here plus the device code that
reads its flag (templates/kernelgen/kernel.cuh store_row) and tests; tests/test_axis_tables.py holds the
stages to the tables.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SlotSource:
    """Where a token's slot comes from (`slots`)."""

    name: str
    short: str  # its part of a generated variant name
    dense: bool  # the device flag kTokenSlots: token t to row t of a dense output (no out_loc; page_size 1)
    output: str  # what a launch group calls the member's written tensor: <role>_cache or <role>_out

    @property
    def reads_out_loc(self) -> bool:
        return not self.dense


@dataclass(frozen=True)
class RecordOrder:
    """How a page orders the records of its slots' heads (`kv_layout`)."""

    name: str
    short: str
    heads_major: bool  # the device flag kHnd: [heads, page_size, record] (with several heads)
    shape: str  # a page as the engines write its shape
    label: str  # the layout docs' name for it ("" for the default)

    def in_page(self, record: int, page_size: int, heads: int) -> int:
        """The position in its page of a record (s * heads + h, counted from the page's first record)."""
        if not self.heads_major or heads == 1:
            return record
        return (record % heads) * page_size + record // heads


@dataclass(frozen=True)
class PoolShare:
    """How many caches share the pages' address range (`kv_pool`), and at what grain they alternate: whole
    pages (a joint pool [num_pages, 2, page], FlashInfer's paged_kv_cache) or records (a packed pool whose every
    (slot, head) cell holds the K record, then the V record: vLLM's [num_blocks, block_size, heads, 2 x head_size])."""

    name: str
    short: str
    caches: int  # the caches sharing the pool
    describe: str  # the layout's words for it ("" for a cache of its own)
    grain: str = "page"  # "page": page p of one cache is `caches` pages after page p - 1; "record": cells alternate

    @property
    def joint(self) -> bool:
        """The cache is one of `caches` parts of a pool (the device reads pages page_stride bytes apart)."""
        return self.caches > 1

    @property
    def packed(self) -> bool:
        """The caches alternate record by record inside each page (their records are `caches` records apart)."""
        return self.joint and self.grain == "record"

    def place(self, page_bytes: int, record: int) -> tuple[int, int, int]:
        """(page bytes one cache's page spans, bytes from page to page, record stride factor) for a cache of
        page_bytes-byte pages of `record`-byte records laid out alone (pure)."""
        if not self.joint:
            return page_bytes, page_bytes, 1
        if not self.packed:
            return page_bytes, page_bytes * self.caches, 1
        stride = page_bytes * self.caches
        return stride - (self.caches - 1) * record, stride, self.caches

    def pool_shape(self, num_pages: int, page_bytes: int, page_stride: int) -> tuple[int, ...]:
        """The shape of the uint8 tensor holding the pool."""
        if self.packed:
            return (num_pages, page_stride)
        return (num_pages, self.caches, page_bytes) if self.joint else (num_pages, page_bytes)


@dataclass(frozen=True)
class ScaleOrder:
    """How a page orders the bytes of its grouped scales (`scale_order`): record r's scale b sits at
    (r // interleave) * interleave * S + b * interleave + r % interleave in the scale region (S scales a record;
    layout/layout.py Field.byte applies it): with interleave 1, a record's S scales back to back; with 4, each run
    of 4 records' S x 4 bytes transposed to S x 4 (vLLM's NVFP4 V scales for trtllm-gen on SM100, TensorRT-LLM's
    quantizeAndWriteFP4KVCache)."""

    name: str
    short: str
    interleave: int  # records whose scales interleave byte by byte (the device constant kScaleInterleave)


SLOT_SOURCES: dict[str, SlotSource] = {s.name: s for s in (
    SlotSource("out_loc", "paged", dense=False, output="cache"),
    SlotSource("token", "dense", dense=True, output="out"),
)}
RECORD_ORDERS: dict[str, RecordOrder] = {o.name: o for o in (
    RecordOrder("nhd", "nhd", heads_major=False, shape="[page_size, heads, record]", label=""),
    RecordOrder("hnd", "hnd", heads_major=True, shape="[heads, page_size, record]", label="HND"),
)}
POOL_SHARES: dict[str, PoolShare] = {p.name: p for p in (
    PoolShare("separate", "separate", caches=1, describe=""),
    PoolShare("joint", "joint", caches=2, describe="one half of a joint K/V pool"),
    PoolShare("packed", "packed", caches=2, describe="one half of a packed K/V pool (each cell K then V)",
              grain="record"),
)}
SCALE_ORDERS: dict[str, ScaleOrder] = {o.name: o for o in (
    ScaleOrder("linear", "sclin", interleave=1),
    ScaleOrder("token4", "sc4", interleave=4),  # trtllm-gen's NVFP4 V scales
)}
