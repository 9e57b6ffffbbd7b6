"""PyTorch reference of every variant (CPU or GPU), replaying the kernel's arithmetic order.

Reductions follow the kernel's thread mapping (per-thread pairwise trees in register order, then
a butterfly over lanes) and every step is a separately rounded float32 op, so the reference
reproduces the kernel's values bit for bit; the bf16 store is checked for exact equality."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..codegen.launch import geometry, resolve
from ..layout import codec
from ..layout.layout import Layout, layout_of, row_layout
from ..layout.pages import split_heads, write_fields
from ..spec.norms import NORMS
from ..spec.ropes import ROPE_STYLES, ROPE_TABLES, TEMPERATURES
from ..spec.variant import Variant

if TYPE_CHECKING:
    import torch


def _tree_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim as the kernel's pairwise tree (numeric.cuh tree_sum): split at the
    largest power of two below the length, left half first."""
    n = t.shape[-1]
    if n == 1:
        return t[..., 0]
    half = 1 << ((n - 1).bit_length() - 1)
    return _tree_sum(t[..., :half]) + _tree_sum(t[..., half:])


def _lane_sum(v: Variant, t: torch.Tensor) -> torch.Tensor:
    """Row sums [N, 1] in the kernel's order: per lane a pairwise tree over (chunk, element), then
    the lane butterfly."""
    import torch

    g = geometry(v)
    n = t.shape[0]
    per_lane = t.reshape(n, g.chunks, g.threads_per_token, g.vec).permute(0, 2, 1, 3).reshape(n, g.threads_per_token, -1)
    acc = _tree_sum(per_lane)
    lanes = torch.arange(g.threads_per_token, device=t.device)
    m = 1
    while m < g.threads_per_token:
        acc = acc + acc[:, lanes ^ m]
        m *= 2
    return acc[:, :1]


def _norm(v: Variant, y: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
          eps: float, width: int = 0) -> torch.Tensor:
    import torch

    kind = NORMS[v.norm]
    if not kind.normalizes:
        return y
    if v.norm_dims == "nope":  # the roped dims stay out: zeros in the kernel's sums, unscaled after
        span = torch.zeros(v.head_dim, dtype=torch.bool, device=y.device)
        span[:v.norm_width] = True
        full = torch.zeros(v.head_dim, dtype=torch.float32, device=y.device)
        pad = (lambda t: None if t is None else full.index_copy(0, torch.arange(v.norm_width, device=y.device),
                                                                  t.to(torch.float32)))
        normed = _norm(replace(v, norm_dims="all"), torch.where(span, y, torch.zeros_like(y)), pad(weight), pad(bias),
                       eps, v.norm_width)
        return torch.where(span, normed, y)
    d = torch.tensor(float(width or v.head_dim), dtype=torch.float32, device=y.device)
    if kind.centered:
        y = y - _lane_sum(v, y) / d
    eps32 = torch.tensor(eps, dtype=torch.float32, device=y.device)
    mean_sq = _lane_sum(v, y * y) / d
    inv = 1.0 / torch.sqrt(mean_sq + eps32)
    inv = torch.where(torch.isinf(mean_sq), torch.full_like(inv, float("nan")), inv)  # overflow: a NaN row
    assert weight is not None or not kind.weight
    w = weight.to(torch.float32) if kind.weight else torch.ones(1, dtype=torch.float32, device=y.device)
    if kind.unit_offset:  # Gemma: times (1 + w), the sum rounded to float32
        w = 1.0 + w
    y = (y * inv) * w
    if v.norm_bias:
        assert bias is not None
        y = y + bias.to(torch.float32)
    return y


def cos_sin(v: Variant, f: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) of each pair from the freqs rows at the positions ([N, rope_dim], or [3, N, rope_dim] for M-RoPE),
    by the variant's table layout and rope style."""
    return ROPE_STYLES[v.rope_style].gather(ROPE_TABLES[v.rope_table], v.rope_dim, v.rope_sections, f)


def _rope(v: Variant, y: torch.Tensor, freqs: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    if not v.rope_dim:
        return y
    f = freqs[positions.long()]
    cos, sin = cos_sin(v, f)
    first, second = ROPE_STYLES[v.rope_style].pairs(v.rope_dim)
    rope = y[:, v.rope_begin:v.rope_begin + v.rope_dim]
    a, c = rope[:, first].clone(), rope[:, second].clone()
    y = y.clone()
    rope = y[:, v.rope_begin:v.rope_begin + v.rope_dim]
    rope[:, first] = a * cos - c * sin
    rope[:, second] = c * cos + a * sin
    return y


def _hadamard(v: Variant, y: torch.Tensor) -> torch.Tensor:
    import torch

    if not v.hadamard:
        return y
    n, d = y.shape
    m = 1
    while m < d:
        pairs = y.reshape(n, d // (2 * m), 2, m)
        a, b = pairs[:, :, 0, :], pairs[:, :, 1, :]
        y = torch.stack([a + b, a - b], dim=2).reshape(n, d)
        m *= 2
    return y * torch.tensor(v.hadamard_scale, dtype=torch.float32, device=y.device)


def rows(v: Variant, x: torch.Tensor, weight: torch.Tensor | None, freqs: torch.Tensor | None,
         positions: torch.Tensor | None, eps: float = 1e-6, bias: torch.Tensor | None = None) -> torch.Tensor:
    """norm -> RoPE (RoPE -> norm with norm_order: rope_then_norm) -> Hadamard in float32: [N, D], before
    quantization."""
    import torch

    v = resolve(v)
    y = x.to(torch.float32)
    rope_first = v.norm_order == "rope_then_norm"
    if not rope_first:
        y = _norm(v, y, weight, bias, eps)
        y = codec.bf16_round(y) if v.round_norm_bf16 else y
    if v.rope_dim:
        assert freqs is not None and positions is not None
        safe = positions.long().clamp(0, freqs.shape[0] - 1)
        y = _rope(v, y, freqs, safe)
    if rope_first:
        y = _norm(v, y, weight, bias, eps)
        y = codec.bf16_round(y) if v.round_norm_bf16 else y
    temperature = TEMPERATURES[v.temperature]
    if temperature.on:  # the row times t(pos), a float32 (negative positions are not written: any t will do)
        assert positions is not None
        at = temperature.positions_read(positions)  # M-RoPE: its temporal row, as the device code reads it
        y = y * temperature.factor(at.long().clamp_min(0)).to(y.device)[:, None]
    return _hadamard(v, y)


def written_rows(v: Variant, out_loc: torch.Tensor, positions: torch.Tensor | None, freqs: torch.Tensor | None,
                 kvcache: torch.Tensor) -> torch.Tensor:
    """Which rows the kernel writes into kvcache: a valid slot, and (with RoPE) a position inside freqs (with a
    temperature, a position of at least 0)."""
    keep = (out_loc >= 0) & (out_loc < kvcache.shape[0] * v.page_size)
    if TEMPERATURES[v.temperature].on and positions is not None:
        keep &= TEMPERATURES[v.temperature].positions_read(positions) >= 0
    if v.rope_dim and positions is not None:
        max_pos = freqs.shape[0] if freqs is not None else 0
        inside = (positions >= 0) & (positions < max_pos)
        keep &= inside.all(0) if inside.dim() > 1 else inside  # M-RoPE: every stream's position
    return keep


def store(v: Variant, x: torch.Tensor, weight: torch.Tensor | None, freqs: torch.Tensor | None,
          positions: torch.Tensor | None, out_loc: torch.Tensor, kvcache: torch.Tensor, eps: float = 1e-6,
          bias: torch.Tensor | None = None, all_valid: bool = False, scale: torch.Tensor | None = None,
          layout: Layout | None = None) -> None:
    """What the kernel does, into kvcache in place. all_valid: the caller guarantees every row is
    written (valid slot, position inside freqs), so no row mask is built (see pages.write_fields).
    scale: the global scale g of a format that has one (nvfp4). layout: where rows go (a multi-head
    variant's rows: row_layout)."""
    import torch

    if v.heads > 1:
        rv, r = split_heads(v, dict(x=x, positions=positions, out_loc=out_loc))
        return store(rv, r["x"], weight, freqs, r["positions"], r["out_loc"], kvcache, eps, bias, all_valid, scale,
                     row_layout(v))
    layout = layout or layout_of(v)
    y = rows(v, x, weight, freqs, positions, eps, bias)
    fields = codec.encode(layout, y, v.round_through_bf16, scale)
    if all_valid:
        write_fields(layout, kvcache, out_loc.long(), fields, all_valid=True)
    else:
        keep = written_rows(v, out_loc, positions, freqs, kvcache)
        write_fields(layout, kvcache, torch.where(keep, out_loc.long(), -1), fields)
