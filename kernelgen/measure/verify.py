"""Compare a kernel's cache writes with the reference: exact where exact, counted where rounding may differ."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable

from ..codegen.render import members
from ..layout import codec
from ..layout.layout import Layout, layout_of, row_layout
from ..layout.pages import Pages, changed_outside, read_fields, split_heads
from ..spec.group import Group
from ..spec.variant import Variant
from . import reference
from .inputs import call_inputs, group_inputs, member_inputs

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Report:
    variant: str
    tokens: int
    written_rows: int
    skipped_rows: int
    bf16_mismatches: int  # 16-bit float values (bf16, fp16) that differ: must be 0
    code_mismatches: int  # e4m3 / e2m1 codes that differ: must be 0
    code_far: int  # codes that differ by more than one step (a diagnosis: far means a logic error)
    codes_total: int
    scale_max_ulp: int  # fp32 scales: largest distance in ulps: must be 0
    ue8m0_mismatches: int  # power-of-two scale bytes that differ: must be 0
    outside_changed: int  # bytes outside written slots that differ from the poison: must be 0
    rel_err: float  # ||decode(kernel) - rows|| / ||rows|| over written rows

    @property
    def ok(self) -> bool:
        """Exact means exact: the reference replays the kernel's arithmetic, so every byte must agree."""
        return (self.bf16_mismatches == 0 and self.code_mismatches == 0 and self.scale_max_ulp == 0
                and self.ue8m0_mismatches == 0 and self.outside_changed == 0)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _code_rank(codes: torch.Tensor, encoding: str) -> torch.Tensor:
    """Monotone integer rank of sign-magnitude codes, so adjacent representable values differ by 1."""
    import torch

    if encoding == "i8":  # two's complement: the integer itself
        return codes.contiguous().view(torch.int8).to(torch.int32)
    bits = 7 if encoding == "e4m3" else 3
    mag = (codes & ((1 << bits) - 1)).to(torch.int32)
    neg = ((codes >> bits) & 1).bool()
    return torch.where(neg, -mag, mag)


def compare(v: Variant, got: torch.Tensor, want: torch.Tensor, poison: torch.Tensor, inputs: dict[str, Any],
            layout: Layout | None = None) -> Report:
    import torch

    if v.heads > 1:  # rows of (token, head): the report counts rows
        rv, rows_in = split_heads(v, inputs)
        return compare(rv, got, want, poison, rows_in, row_layout(v))
    layout = layout or layout_of(v)
    keep = reference.written_rows(v, inputs["out_loc"], inputs["positions"], inputs["freqs"], got)
    loc = torch.where(keep, inputs["out_loc"].long(), -1)
    outside = changed_outside(layout, got, poison, loc)
    fg, fw = read_fields(layout, got, loc[keep]), read_fields(layout, want, loc[keep])
    bf16_bad = code_bad = code_far = codes = ue8m0_bad = 0
    scale_ulp = 0
    for f in layout.fields:
        a, b = fg[f.name], fw[f.name]
        if f.encoding in ("bf16", "fp16"):
            bf16_bad += int((a != b).sum())
        elif f.encoding in ("e4m3", "e2m1x2", "i8"):
            if f.encoding == "e2m1x2":
                a, b = codec.unpack_nibbles(a), codec.unpack_nibbles(b)
            ra, rb = _code_rank(a, f.encoding), _code_rank(b, f.encoding)
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
    decoded = Pages.of(layout).decode(got, loc, inputs.get("scale"))[keep]
    rel = float((decoded - rows[keep]).norm() / rows[keep].norm().clamp_min(1e-30))
    return Report(v.name, int(loc.numel()), int(keep.sum()), int((~keep).sum()), bf16_bad, code_bad, code_far, codes,
                  scale_ulp, ue8m0_bad, outside, rel)


def expected(v: Variant, inputs: dict[str, Any], eps: float = 1e-6) -> torch.Tensor:
    """The cache the reference writes from inputs (a copy; inputs["kvcache"] is left alone)."""
    want = inputs["kvcache"].clone()
    reference.store(v, inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"], inputs["out_loc"], want,
                    eps, inputs["bias"], scale=inputs.get("scale"))
    return want


def verify(v: Variant, run: Callable[..., None], num_tokens: int, num_pages: int, device: str, seed: int) -> Report:
    """verify_group for a variant whose `run` takes the family's tensors as a variant's op does: run(x, weight, freqs,
    positions, out_loc, kvcache, eps=, bias=, scale=) (out_loc the token slots of a slots: token variant)."""
    def by_family(eps: float, **tensors: Any) -> None:
        t = member_inputs(v, "", tensors)
        run(t["x"], t["weight"], t["freqs"], t["positions"], t["out_loc"], t["kvcache"], eps=eps, bias=t["bias"],
            scale=t["scale"])

    [report] = verify_group(v, by_family, num_tokens, num_pages, device, seed)
    return report


def verify_group(k: Variant | Group, run: Callable[..., None], num_tokens: int, num_pages: int, device: str,
                 seed: int) -> list[Report]:
    """Run `run(**tensors, eps=)` (the kernel symbol's arguments by name: a variant's the family's, a launch group's
    q, k_cache, ...) once and every member's reference on the same poisoned outputs; one Report per member (its
    variant under the kernel's launch; a variant is a launch group of one member)."""
    inputs = group_inputs(k, num_tokens, num_pages, device, seed)
    ms = members(k)
    wanted, poisons = {}, {}
    for m in ms:
        mine = member_inputs(k, m.role, inputs)
        poisons[m.role] = mine["kvcache"].clone()
        wanted[m.role] = expected(m.variant, mine)
    run(**call_inputs(inputs), eps=1e-6)
    return [compare(m.variant, inputs[m.names["kvcache"]], wanted[m.role], poisons[m.role],
                    member_inputs(k, m.role, inputs)) for m in ms]
