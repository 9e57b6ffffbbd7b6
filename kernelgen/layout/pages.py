"""Torch page I/O over a Layout: allocate pools, gather and scatter per-token fields, decode stored rows."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from ..spec.pages import POOL_SHARES
from ..spec.variant import Variant
from . import codec
from .layout import Field, Layout, layout_of

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Pages(Layout):
    """A Layout that can also allocate a pool and read stored rows back (what `op.layout` is)."""

    @classmethod
    def of(cls, layout: Layout) -> Pages:
        return cls(**{f.name: getattr(layout, f.name) for f in fields(Layout)})

    def allocate(self, num_pages: int, device: object = "cpu") -> torch.Tensor:
        """A zeroed pool of num_pages pages: uint8 [num_pages, page_bytes]; for a joint K/V pool (kv_pool: joint)
        [num_pages, 2, page_bytes], for a packed one (kv_pool: packed) [num_pages, page_stride]: its halves
        (`halves(pool)`) are the K and V caches."""
        import torch

        return torch.zeros(POOL_SHARES[self.pool].pool_shape(num_pages, self.page_bytes, self.page_stride),
                           dtype=torch.uint8, device=device)

    def halves(self, pool: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The K and V caches of a shared pool of any dtype, as uint8 views (never copies): a joint pool's
        pool[:, 0] and pool[:, 1] (pool_halves); a packed pool's (vLLM's [num_blocks, block_size, heads,
        2 x head_size]) two views of its pages, the V one starting one record after the K one."""
        if not POOL_SHARES[self.pool].packed:
            return pool_halves(pool)
        import torch

        if not isinstance(pool, torch.Tensor) or pool.dim() < 2:
            got = f"{list(pool.shape)}" if isinstance(pool, torch.Tensor) else type(pool).__name__
            raise ValueError(f"a packed K/V pool must be a tensor [num_pages, ...] ({self.page_stride} B a page), "
                             f"got {got}")
        try:
            rows = pool.view(pool.shape[0], -1).view(torch.uint8)
        except RuntimeError as e:
            raise ValueError(f"a packed K/V pool's pages must each be contiguous (viewed, never copied), got strides "
                             f"{list(pool.stride())}") from e
        if rows.shape[1] != self.page_stride:
            raise ValueError(f"a packed K/V pool's pages are {self.page_stride} B ({self.describe()}), got "
                             f"{rows.shape[1]} B pages ({list(pool.shape)} {pool.dtype})")
        record = self.pool_record
        return rows[:, :self.page_bytes], rows[:, record:record + self.page_bytes]

    def foreign(self, cache: torch.Tensor) -> torch.Tensor | None:
        """bool, shaped like cache (this cache's view of a packed pool): the bytes of the other caches' records
        that the view spans (None where it spans none of theirs)."""
        if not POOL_SHARES[self.pool].packed:
            return None
        import torch

        cols = torch.arange(cache.shape[-1], device=cache.device)
        mine = (cols % (self.page_stride // (self.page_size * self.heads))) < self.pool_record
        return (~mine).expand_as(cache)

    def field_view(self, cache: torch.Tensor, name: str) -> torch.Tensor:
        """One field of every record of a cache, as a strided uint8 view (never a copy): [num_pages, page_size,
        heads, size] (NHD), [num_pages, heads, page_size, size] (HND), [num_pages, page_size, size] with one head.
        A format whose page holds all values, then all scales gives the two tensors the engines allocate apart:
        FlashInfer's NVFP4 K data [pages, page_size, H, D/2] and scales [pages, page_size, H, D/16], SGLang's
        MXFP4 k_buffer [slots, H, D/2] and k_scale_buffer [slots, H, D/32] (page_size 1). Their readers index
        through the tensors' strides, so they read these views as they are. Interleaved scales (scale_order
        token4: trtllm-gen's NVFP4 V scales) view as [num_pages, heads, page_size / 4, size, 4]: element
        [p, h, t // 4, b, t % 4] is scale b of token t."""
        import torch

        f = self.field(name)
        if not isinstance(cache, torch.Tensor) or cache.dtype != torch.uint8 or cache.dim() != 2 or \
                (cache.shape[0] > 1 and cache.stride(0) != self.page_stride) or cache.stride(1) != 1 or \
                cache.shape[1] != self.page_bytes:
            got = f"{cache.dtype} {list(cache.shape)} strides {list(cache.stride())}" \
                if isinstance(cache, torch.Tensor) else type(cache).__name__
            raise ValueError(f"{self.variant_name}: field_view needs this cache as uint8 [num_pages, {self.page_bytes}] "
                             f"with pages {self.page_stride} B apart, got {got}")
        pages, size, heads = cache.shape[0], f.size, self.heads
        per_page = self.page_size
        g = f.interleave
        if g > 1:  # runs of g records (one head's tokens: a guard) transposed: [..., page_size / g, size, g]
            run = (per_page // g, size, g)
            if heads == 1:
                shape, strides = (pages, *run), (self.page_stride, g * f.stride, g, 1)
            else:
                shape, strides = (pages, heads, *run), (self.page_stride, f.stride * per_page, g * f.stride, g, 1)
        elif heads == 1:
            shape, strides = (pages, per_page, size), (self.page_stride, f.stride, 1)
        elif self.hnd:  # record of (slot s, head h) at h * page_size + s
            shape, strides = (pages, heads, per_page, size), (self.page_stride, f.stride * per_page, f.stride, 1)
        else:  # record s * heads + h
            shape, strides = (pages, per_page, heads, size), (self.page_stride, f.stride * heads, f.stride, 1)
        return cache.as_strided(shape, strides, cache.storage_offset() + f.base)

    def decode(self, cache: torch.Tensor, out_loc: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        """Stored rows at slots out_loc back to float32 [N, head_dim], or [N, heads, head_dim] with several
        heads (NaN where out_loc is not a slot of cache). scale: the global scale g the rows were stored
        with (formats with one, e.g. nvfp4)."""
        rows = head_slots(out_loc.to(cache.device), self.heads)
        valid, _, _ = split_slots(self, rows, cache.shape[0])
        decoded = codec.decode(self, read_fields(self, cache, rows), valid, scale)
        return decoded if self.heads == 1 else decoded.reshape(out_loc.shape[0], self.heads, self.head_dim)


def pool_halves(pool: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The K and V caches of a joint pool [num_pages, 2, ...] of any dtype (FlashInfer's paged_kv_cache, e.g.
    bf16 [num_pages, 2, page_size, heads, head_dim]): pool[:, 0] and pool[:, 1] as uint8 [num_pages, page bytes]
    views (never copies; a pool whose pages are not contiguous raises here)."""
    import torch

    if not isinstance(pool, torch.Tensor) or pool.dim() < 3 or pool.shape[1] != 2:
        got = f"{list(pool.shape)}" if isinstance(pool, torch.Tensor) else type(pool).__name__
        raise ValueError(f"a joint K/V pool must be a tensor [num_pages, 2, ...] (K pages, V pages), got {got}")
    try:
        k, v = (pool[:, i].view(pool.shape[0], -1).view(torch.uint8) for i in range(2))
    except RuntimeError as e:
        raise ValueError(f"a joint K/V pool's pages must each be contiguous (viewed, never copied), got strides "
                         f"{list(pool.stride())}") from e
    return k, v


def pages_of(v: Variant) -> Pages:
    """The layout of v with torch page I/O attached."""
    return Pages.of(layout_of(v))


def head_slots(out_loc: torch.Tensor, heads: int) -> torch.Tensor:
    """Record slots [N * heads] of token slots out_loc [N]: head h of slot s is record s * heads + h
    (negative slots stay negative). With one head, out_loc itself."""
    import torch

    if heads == 1:
        return out_loc
    loc = out_loc.long()[:, None]
    return torch.where(loc >= 0, loc * heads + torch.arange(heads, device=loc.device), -1).reshape(-1)


def split_heads(v: Variant, inputs: dict[str, Any]) -> tuple[Variant, dict[str, Any]]:
    """The one-head problem that a multi-head call is (v.row_variant): x [N, heads * head_dim] as rows
    [N * heads, head_dim], each row with its token's position and the record slot of its head
    (head_slots). With one head, v and inputs themselves."""
    if v.heads == 1:
        return v, inputs
    x, positions = inputs["x"], inputs["positions"]
    if v.x_head_stride:  # each head's first head_dim elements of its x_head_stride (a gated projection's q)
        x = x.reshape(x.shape[0], v.heads, v.x_head_stride)[:, :, :v.head_dim]
    rows = dict(inputs, x=x.reshape(x.shape[0] * v.heads, v.head_dim),
                positions=None if positions is None else positions.repeat_interleave(v.heads, dim=-1),
                out_loc=head_slots(inputs["out_loc"], v.heads))
    return v.row_variant, rows


def slot_columns(f: Field, off: torch.Tensor) -> torch.Tensor:
    """Byte columns [N, f.size] of field f for in-page offsets off [N] (Field.byte: interleaved scales too)."""
    import torch

    return f.byte(off[:, None], torch.arange(f.size, device=off.device))


def split_slots(layout: Layout, out_loc: torch.Tensor, num_pages: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(valid, page, off) for record slots out_loc (token slots with one head; head_slots() otherwise);
    invalid slots (<0 or past the pool) map to page 0, off 0."""
    import torch

    loc = out_loc.to(dtype=torch.int64)
    per_page = layout.records_per_page
    valid = (loc >= 0) & (loc < num_pages * per_page)
    safe = torch.where(valid, loc, torch.zeros_like(loc))
    page, off = safe // per_page, safe % per_page
    return valid, page, layout.in_page(off)  # the page's record order (HND permutes the offsets)


def written_mask(layout: Layout, cache: torch.Tensor, out_loc: torch.Tensor) -> torch.Tensor:
    """bool, shaped like cache: the bytes of every field of the valid slots in out_loc."""
    import torch

    mask = torch.zeros_like(cache, dtype=torch.bool)
    valid, page, off = split_slots(layout, out_loc, cache.shape[0])
    page, off = page[valid], off[valid]
    for f in layout.fields:
        mask[page[:, None], slot_columns(f, off)] = True
    return mask


def changed_outside(layout: Layout, cache: torch.Tensor, poison: torch.Tensor, out_loc: torch.Tensor) -> int:
    """Bytes of cache that differ from poison outside the records written at out_loc's valid slots (a packed
    pool's view also spans the other cache's records: theirs to check, so they are left out here)."""
    mask = written_mask(layout, cache, out_loc)
    foreign = Pages.of(layout).foreign(cache)
    if foreign is not None:
        mask = mask | foreign
    return int(((cache != poison.to(cache.device)) & ~mask).sum())


def read_fields(layout: Layout, cache: torch.Tensor, out_loc: torch.Tensor) -> dict[str, torch.Tensor]:
    """Gather each field's bytes for the given slots: name -> uint8 [N, size] (invalid slots read as zeros)."""
    import torch

    valid, page, off = split_slots(layout, out_loc.to(cache.device), cache.shape[0])
    return {f.name: torch.where(valid[:, None], cache[page[:, None], slot_columns(f, off)], 0) for f in layout.fields}


def write_fields(layout: Layout, cache: torch.Tensor, out_loc: torch.Tensor, fields: dict[str, torch.Tensor],
                 all_valid: bool = False) -> None:
    """Scatter per-token field bytes into the cache for rows whose out_loc is a valid slot. With
    all_valid the caller guarantees every slot is valid: no mask, so no data-dependent shape (one
    torch.compile graph, no host sync)."""
    import torch

    if all_valid:  # no validity mask to build: every slot is in the pool
        loc = out_loc.to(device=cache.device, dtype=torch.int64)
        page, off = loc // layout.records_per_page, layout.in_page(loc % layout.records_per_page)
    else:
        valid, page, off = split_slots(layout, out_loc.to(cache.device), cache.shape[0])
        page, off = page[valid], off[valid]
    for f in layout.fields:
        data = fields[f.name] if all_valid else fields[f.name][valid.to(fields[f.name].device)]
        cache[page[:, None], slot_columns(f, off)] = data.to(cache.device)
