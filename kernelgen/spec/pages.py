"""The page-geometry tables: how a token's records map onto a cache's pages, one entry per value of the
`slots`, `kv_layout` and `kv_pool` axes.

A stored record is head h of the token in slot s (record s * heads + h). Three choices place it, each an entry
here: where slots come from (`slots`: a paged cache addressed by out_loc, or a dense output whose row t is token
t's), how a page orders its records (`kv_layout`: [page_size, heads, record] NHD or [heads, page_size, record]
HND), and how many caches share a page's address range (`kv_pool`: a cache of its own, or one half of a joint
K/V pool [num_pages, 2, page] whose pages are two pages apart). Every stage reads these axes from here: the
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
    """How many caches share the pages' address range (`kv_pool`)."""

    name: str
    short: str
    caches: int  # the caches whose pages alternate: page p of one is `caches` pages after page p - 1
    describe: str  # the layout's words for it ("" for a cache of its own)

    @property
    def joint(self) -> bool:
        """The device flag kJointPool: the cache is one of `caches` halves of a pool [num_pages, caches, page]."""
        return self.caches > 1

    def pool_shape(self, num_pages: int, page_bytes: int) -> tuple[int, ...]:
        """The shape of the uint8 tensor holding the pool."""
        return (num_pages, self.caches, page_bytes) if self.joint else (num_pages, page_bytes)


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
)}
