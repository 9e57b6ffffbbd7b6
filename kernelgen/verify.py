"""Compare a kernel's cache writes with the reference: exact where exact, counted where rounding may differ."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable

from . import codec, reference
from .launch import resolve
from .layout import Layout, layout_of, read_fields, slot_columns, split_slots
from .variant import TORCH_DTYPES, Variant

if TYPE_CHECKING:
    import torch



@dataclass(frozen=True)
class Report:
    variant: str
    tokens: int
    written_rows: int
    skipped_rows: int
    bf16_mismatches: int  # must be 0
    code_mismatches: int  # e4m3 / e2m1 codes that differ (rounding-boundary cases)
    code_far: int  # codes that differ by more than one step: must be 0
    codes_total: int
    scale_max_ulp: int  # fp32 scales: largest distance in ulps (at most 1)
    ue8m0_mismatches: int  # power-of-two scale bytes that differ: must be 0
    outside_changed: int  # bytes outside written slots that differ from the poison: must be 0
    rel_err: float  # ||decode(kernel) - rows|| / ||rows|| over written rows

    @property
    def ok(self) -> bool:
        return (self.bf16_mismatches == 0 and self.code_far == 0 and self.scale_max_ulp <= 1
                and self.ue8m0_mismatches == 0 and self.outside_changed == 0 and self.code_mismatches <= max(4, self.codes_total // 10000))

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def make_inputs(v: Variant, num_tokens: int, num_pages: int, device: str, seed: int,
                max_pos: int = 4096) -> dict[str, Any]:
    """Random, never-zero inputs. About 1 row in 8 is padding (out_loc = -1), 1 in 32 points past the
    pool and (with RoPE) 1 in 32 has a position past freqs: the kernel must skip all of those."""
    import torch

    v = resolve(v)
    g = torch.Generator(device="cpu").manual_seed(seed)
    dtype = getattr(torch, TORCH_DTYPES[v.input_dtype])
    wdtype = getattr(torch, TORCH_DTYPES[v.weight_dtype])
    x = (torch.randn(num_tokens, v.head_dim, generator=g) * 3 + 0.5).to(dtype)
    weight = (1 + 0.25 * torch.randn(v.head_dim, generator=g)).to(wdtype)
    bias = (0.1 * torch.randn(v.head_dim, generator=g)).to(wdtype)
    half = max(v.rope_dim // 2, 1)
    inv_freq = 10000.0 ** (-torch.arange(half, dtype=torch.float64) / half)
    angles = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv_freq[None, :]
    freqs = torch.stack([angles.cos(), angles.sin()], dim=-1).reshape(max_pos, -1)[:, :v.rope_dim].float()
    positions = torch.randint(0, max_pos, (num_tokens,), generator=g)
    num_pages = max(num_pages, -(-num_tokens * 3 // (2 * v.page_size)) + 1)  # room to spare: unwritten slots
    slots = num_pages * v.page_size
    out_loc = torch.randperm(slots, generator=g)[:num_tokens]
    draw = torch.rand(num_tokens, generator=g)
    out_loc = torch.where(draw < 0.125, -1, out_loc)
    out_loc = torch.where((draw >= 0.125) & (draw < 0.15625), slots + torch.arange(num_tokens), out_loc)
    if v.rope_dim:
        far = torch.rand(num_tokens, generator=g) < 0.03125
        positions = torch.where(far, max_pos + torch.arange(num_tokens), positions)
    cache = torch.randint(0, 256, (num_pages, layout_of(v).page_bytes), generator=g, dtype=torch.uint8)
    tensors = dict(x=x, weight=weight, bias=bias if v.norm_bias else None, freqs=freqs if v.rope_dim else None,
                   positions=positions if v.rope_dim else None, out_loc=out_loc, kvcache=cache)
    return {k: (t.to(device) if t is not None else None) for k, t in tensors.items()}


def _written_mask(layout: Layout, cache: torch.Tensor, out_loc: torch.Tensor) -> torch.Tensor:
    import torch

    mask = torch.zeros_like(cache, dtype=torch.bool)
    valid, page, off = split_slots(layout, out_loc, cache.shape[0])
    page, off = page[valid], off[valid]
    for f in layout.fields:
        mask[page[:, None], slot_columns(f, off)] = True
    return mask


def _code_rank(codes: torch.Tensor, encoding: str) -> torch.Tensor:
    """Monotone integer rank of sign-magnitude codes, so adjacent representable values differ by 1."""
    import torch

    bits = 7 if encoding == "e4m3" else 3
    mag = (codes & ((1 << bits) - 1)).to(torch.int32)
    neg = ((codes >> bits) & 1).bool()
    return torch.where(neg, -mag, mag)


def compare(v: Variant, got: torch.Tensor, want: torch.Tensor, poison: torch.Tensor, inputs: dict[str, Any]) -> Report:
    import torch

    layout = layout_of(v)
    max_pos = inputs["freqs"].shape[0] if inputs["freqs"] is not None else 0
    keep = reference.written_rows(v, inputs["out_loc"], inputs["positions"], got.shape[0] * v.page_size, max_pos)
    loc = torch.where(keep, inputs["out_loc"].long(), -1)
    mask = _written_mask(layout, got, loc)
    outside = int(((got != poison) & ~mask).sum())
    fg, fw = read_fields(layout, got, loc[keep]), read_fields(layout, want, loc[keep])
    bf16_bad = code_bad = code_far = codes = ue8m0_bad = 0
    scale_ulp = 0
    for f in layout.fields:
        a, b = fg[f.name], fw[f.name]
        if f.encoding == "bf16":
            bf16_bad += int((a != b).sum())
        elif f.encoding in ("e4m3", "e2m1x2"):
            if f.encoding == "e2m1x2":
                a, b = codec.unpack_nibbles(a), codec.unpack_nibbles(b)
            encoding = f.encoding[:4]  # e4m3 or e2m1
            ra, rb = _code_rank(a, encoding), _code_rank(b, encoding)
            diff = (ra - rb).abs()
            code_bad += int((a != b).sum())
            code_far += int((diff > 1).sum())
            codes += a.numel()
        elif f.encoding == "fp32":
            ia, ib = a.contiguous().view(torch.int32), b.contiguous().view(torch.int32)
            scale_ulp = max(scale_ulp, int((ia - ib).abs().max()) if ia.numel() else 0)
        else:  # ue8m0
            ue8m0_bad += int((a != b).sum())
    rows = reference.rows(v, inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"], 1e-6, inputs["bias"])
    decoded = layout.decode(got, loc)[keep]
    rel = float((decoded - rows[keep]).norm() / rows[keep].norm().clamp_min(1e-30))
    return Report(v.name, int(loc.numel()), int(keep.sum()), int((~keep).sum()), bf16_bad, code_bad, code_far, codes,
                  scale_ulp, ue8m0_bad, outside, rel)


def expected(v: Variant, inputs: dict[str, Any], eps: float = 1e-6) -> torch.Tensor:
    """The cache the reference writes from inputs (a copy; inputs["kvcache"] is left alone)."""
    want = inputs["kvcache"].clone()
    reference.store(v, inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"], inputs["out_loc"], want,
                    eps, inputs["bias"])
    return want


def verify(v: Variant, run: Callable[..., None], num_tokens: int, num_pages: int, device: str, seed: int) -> Report:
    """Run `run(x, weight, freqs, positions, out_loc, kvcache, eps=, bias=)` and the reference on the
    same poisoned cache and compare."""
    inputs = make_inputs(v, num_tokens, num_pages, device, seed)
    poison = inputs["kvcache"].clone()
    want = expected(v, inputs)
    run(inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"], inputs["out_loc"], inputs["kvcache"],
        eps=1e-6, bias=inputs["bias"])
    return compare(v, inputs["kvcache"], want, poison, inputs)
