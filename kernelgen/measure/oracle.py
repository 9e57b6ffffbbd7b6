"""Independent float64 oracle of the fused store (textbook math, correct rounding) and its cache-byte checker."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

# Only byte positions come from the library: the arithmetic below is written from the math and
# deliberately shares nothing with measure/reference.py or layout/codec.py (see docs/oracle.md).
from ..layout.layout import Layout, layout_of, row_layout
from ..layout.pages import changed_outside, read_fields, split_heads
from ..spec.formats import Part, format_of
from ..spec.group import Group
from ..spec.norms import NORMS
from ..spec.ropes import ROPE_STYLES, ROPE_TABLES, TEMPERATURES
from ..spec.variant import Variant

if TYPE_CHECKING:
    import torch

U = 2.0 ** -24  # float32 unit roundoff: one correctly rounded float32 op errs by at most U relative
RSQRT_U = 4.0  # 1/sqrt(v) in units of U: sqrt then divide is 2 U, rsqrtf (2 ulp) is 4 U
SAFETY = 2.0  # margin on the first-order bound: dropped O((dU)^2) terms and float64 evaluation error
AMAX_FLOOR = 1e-4
E4M3_MAX = 448.0
E2M1_MAX = 6.0
E4M3_MIN_SCALE = 2.0 ** -9  # the least e4m3 subnormal, the floor of V4.1's fp4 scales
SCALE_FLOOR_EXP = math.ceil(math.log2(1e-4))  # -13: V4.1's UE8M0 scales are at least 1e-4, so at least 2^-13
I8_MAX = 127.0
TOKEN_HEAD_SCALE_FLOOR = 1e-6  # vLLM's per-token-head scales: max(amax / qmax, 1e-6)
QMAX = {"e4m3": E4M3_MAX, "e2m1x2": E2M1_MAX, "i8": I8_MAX}  # by element encoding


@dataclass(frozen=True)
class Grid:
    """A sign-magnitude float format: mant explicit mantissa bits, min_exp the smallest normal exponent."""

    name: str
    mant: int
    min_exp: int
    max: float
    ties_even: bool  # False: ties go toward zero (the fp4 layout's threshold rule)


BF16 = Grid("bf16", 7, -126, math.inf, True)
FP16 = Grid("fp16", 10, -14, math.inf, True)  # past 65504 a cast gives inf, which the checker never accepts
E4M3 = Grid("e4m3", 3, -6, E4M3_MAX, True)
E2M1 = Grid("e2m1", 1, 0, E2M1_MAX, False)
E2M1_RNE = Grid("e2m1", 1, 0, E2M1_MAX, True)  # NVFP4's cvt.rn.satfinite


def _floor_log2(mag: torch.Tensor, min_exp: int) -> torch.Tensor:
    """floor(log2(mag)) exactly (frexp, no log), clamped to min_exp so subnormals share its step."""
    import torch

    _, ex = torch.frexp(mag)
    return (ex.to(torch.int64) - 1).clamp_min(min_exp)


def _pow2(e: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.ldexp(torch.ones_like(e, dtype=torch.float64), e)


def round_to(x: torch.Tensor, g: Grid) -> torch.Tensor:
    """float64 -> nearest value of grid g, computed from the float64 value itself (no double rounding
    through float32), saturating at g.max; the sign survives, so -tiny rounds to -0."""
    import torch

    mag = x.abs()
    step = _pow2(_floor_log2(mag, g.min_exp) - g.mant)
    k = mag / step  # exact: a power-of-two division
    k = torch.round(k) if g.ties_even else torch.ceil(k - 0.5)  # torch.round is half-to-even
    return torch.copysign((k * step).clamp_max(g.max), x)


def rank(x: torch.Tensor, g: Grid) -> torch.Tensor:
    """Signed integer position of grid values (float64 holding integers): adjacent representable
    values differ by 1, +0 and -0 are both 0, non-finite values are NaN (never accepted)."""
    import torch

    mag = x.abs()
    e = _floor_log2(mag, g.min_exp)
    r = (e - g.min_exp).to(torch.float64) * 2 ** g.mant + mag / _pow2(e - g.mant)
    r = torch.where(mag == 0, torch.zeros_like(r), r)
    r = torch.where(torch.isfinite(x), r, torch.full_like(r, math.nan))
    return torch.where(x < 0, -r, r)


def bf16_bits(x: torch.Tensor) -> torch.Tensor:
    """Correctly rounded bf16 bit patterns (int64 0..0xFFFF) of float64 values."""
    import torch

    f32 = round_to(x.to(torch.float64), BF16).to(torch.float32)  # exact: already on the bf16 grid
    return (f32.view(torch.int32).to(torch.int64) >> 16) & 0xFFFF


def ceil_log2(t: torch.Tensor) -> torch.Tensor:
    """Exact ceil(log2(t)) for positive float64 t: frexp gives t = m * 2^ex, m in [0.5, 1)."""
    import torch

    m, ex = torch.frexp(t)
    return ex.to(torch.int64) - (m == 0.5).to(torch.int64)


# ---- decoding stored bytes (bit layouts of the formats, written out here) ----

def _decode_bf16(raw: torch.Tensor) -> torch.Tensor:
    import torch

    half = raw.contiguous().view(torch.int16).to(torch.int32) & 0xFFFF  # little-endian byte pairs
    return (half << 16).view(torch.float32).to(torch.float64)


def _decode_fp16(raw: torch.Tensor) -> torch.Tensor:
    """IEEE binary16 from its bits: sign, 5 exponent bits (bias 15), 10 mantissa bits; subnormals at 2^-24."""
    import torch

    h = raw.contiguous().view(torch.int16).to(torch.int64) & 0xFFFF
    e, m = (h >> 10) & 31, (h & 1023).to(torch.float64)
    mag = torch.where(e == 0, m * 2.0 ** -24, torch.ldexp(1024 + m, (e - 25).to(torch.int32)))
    mag = torch.where(e == 31, torch.where(m == 0, math.inf, math.nan), mag)
    return torch.where((h >> 15) == 1, -mag, mag)


def _decode_e4m3(codes: torch.Tensor) -> torch.Tensor:
    import torch

    b = codes.to(torch.int64)
    e, m = (b >> 3) & 15, b & 7
    mag = torch.where(e == 0, m * 2.0 ** -9, (8 + m) * _pow2(e - 10))  # (1 + m/8) * 2^(e-7)
    mag = torch.where((e == 15) & (m == 7), torch.full_like(mag, math.nan), mag)  # e4m3fn's only NaN
    return torch.where((b >> 7) == 1, -mag, mag)


def _decode_e2m1(packed: torch.Tensor) -> torch.Tensor:
    import torch

    b = packed.to(torch.int64)
    c = torch.stack([b & 15, b >> 4], dim=-1).reshape(b.shape[0], -1)  # low nibble is the even dim
    e, m = (c >> 1) & 3, c & 1
    mag = torch.where(e == 0, m * 0.5, (2 + m) * _pow2(e - 2))  # (1 + m/2) * 2^(e-1)
    return torch.where((c >> 3) == 1, -mag, mag)


def _decode_fp32(raw: torch.Tensor) -> torch.Tensor:
    import torch

    return raw.contiguous().view(torch.float32).to(torch.float64)


# ---- the float64 math, carrying a first-order float32 error bound ----

@dataclass(frozen=True)
class Rows:
    """float64 rows [N, D] and a bound on a float32 evaluation's error: |y32 - value| <= bound().

    common: (direction [N, D], rho [N, 1]) pairs, an error theta * direction with |theta| <= rho
    shared by a whole row (e.g. the rounding of 1/sqrt(var)); linear steps (RoPE, Hadamard) move the
    direction with the values, which keeps the bound tight. local: independent per-element bound."""

    value: torch.Tensor
    local: torch.Tensor
    common: tuple[tuple[torch.Tensor, torch.Tensor], ...] = ()

    def linear(self, fn: Callable[[torch.Tensor], torch.Tensor], local: torch.Tensor) -> Rows:
        return Rows(fn(self.value), local, tuple((fn(c), r) for c, r in self.common))

    def bound(self) -> torch.Tensor:
        total = self.local.clone()
        for direction, rho in self.common:
            total = total + rho * direction.abs()
        return SAFETY * total


def _inv_rel(var: torch.Tensor, var_err: torch.Tensor, eps: float) -> torch.Tensor:
    """Relative error bound of float32 1/sqrt(var + eps), given var's absolute error bound."""
    v = var + eps
    rel_v = (var_err + U * eps) / v + U  # eps itself rounded to float32, then the add
    return rel_v / 2 + RSQRT_U * U


def _norm(v: Variant, rows: Rows, w: torch.Tensor | None, b: torch.Tensor | None, eps: float) -> Rows:
    """The norm over the dims it spans (norm_dims); the others go on as they were."""
    import torch

    if v.norm_dims == "all" or not NORMS[v.norm].normalizes:
        return _norm_rows(v, rows, w, b, eps)
    span, rest = slice(0, v.norm_width), slice(v.norm_width, None)  # the roped block is at the tail (a guard)
    part = _norm_rows(v, Rows(rows.value[:, span], rows.local[:, span], tuple((c[:, span], r) for c, r in rows.common)),
                      w, b, eps)
    zeros = torch.zeros_like(rows.value[:, rest])
    return Rows(torch.cat([part.value, rows.value[:, rest]], 1),
                torch.cat([part.local, rows.bound()[:, rest] / SAFETY], 1),
                tuple((torch.cat([c, zeros], 1), r) for c, r in part.common))


def _norm_rows(v: Variant, rows: Rows, w: torch.Tensor | None, b: torch.Tensor | None, eps: float) -> Rows:
    """The norm of rows whose float32 evaluation already errs by up to rows' bound (0 for the inputs themselves;
    the rotated rows with norm_order: rope_then_norm): first order, an input error e_i moves the mean square by
    2/d sum |x_i| e_i (into 1/sqrt's bound) and the output by e_i * inv * |w_i|."""
    import torch

    x = rows.value
    kind = NORMS[v.norm]
    if not kind.normalizes:
        return rows
    if not kind.weight:  # an unweighted RMSNorm: times 1
        w = torch.ones(1, dtype=torch.float64)
    assert w is not None
    d = x.shape[1]
    e = rows.bound() / SAFETY  # the input's error bound (SAFETY is applied once, at the end)
    if not kind.centered:
        ms = (x * x).mean(-1, keepdim=True)
        # sum of d non-negative rounded squares, any order: gamma_d; then the divide by d
        inv = 1.0 / torch.sqrt(ms + eps)
        gemma = kind.unit_offset
        scale = (1.0 + w) if gemma else w
        n = x * inv * scale
        ms_in = 2 * (x.abs() * e).mean(-1, keepdim=True)
        common = ((n, _inv_rel(ms, (d + 1) * U * ms + ms_in, eps)),)
        local = (3 if gemma else 2) * U * n.abs() + e * inv * scale.abs()  # x*inv, *w (and Gemma's 1 + w)
    else:
        m = x.mean(-1, keepdim=True)
        c = x - m
        var = (c * c).mean(-1, keepdim=True)
        inv = 1.0 / torch.sqrt(var + eps)
        n = c * inv * w
        e_c = e + e.mean(-1, keepdim=True)  # an input error moves its c_i and, through the mean, every c
        # mean: a d-term sum (gamma_d * sum|x|) then a divide; it shifts every c_i by the same nu
        mu = d * U * x.abs().mean(-1, keepdim=True) + U * m.abs()
        # var: sum c = 0 so nu enters only squared; 2U from rounding each c_i, gamma_d summing, U dividing
        var_err = (d + 3) * U * var + mu * mu + 2 * (c.abs() * e_c).mean(-1, keepdim=True)
        common = ((n, _inv_rel(var, var_err, eps)), (inv * w.expand_as(x), mu))
        local = 3 * U * n.abs() + e_c * inv * w.abs()  # x - m, *inv, *w
    if v.norm_bias:
        assert b is not None
        return Rows(n + b, local + U * (n + b).abs(), common)
    return Rows(n, local, common)


def _rope_pairs(v: Variant) -> tuple[list[int], list[int]]:
    """Dim indices (first, second) of each rotated pair j."""
    dims = range(v.rope_begin, v.rope_begin + v.rope_dim)
    first, second = ROPE_STYLES[v.rope_style].pairs(v.rope_dim)
    return list(dims[first]), list(dims[second])


def _rope(v: Variant, rows: Rows, freqs: torch.Tensor, positions: torch.Tensor) -> Rows:
    if not v.rope_dim:
        return rows
    f = freqs[positions.long()]
    # pair j's columns (spec/ropes.py), from the row of its position stream's position (M-RoPE)
    cos, sin = ROPE_STYLES[v.rope_style].gather(ROPE_TABLES[v.rope_table], v.rope_dim, v.rope_sections, f)
    ia, ic = _rope_pairs(v)

    def rotate(t: torch.Tensor) -> torch.Tensor:
        out = t.clone()
        a, c = t[:, ia], t[:, ic]
        out[:, ia] = a * cos - c * sin
        out[:, ic] = a * sin + c * cos
        return out

    a, c, ea, ec = rows.value[:, ia], rows.value[:, ic], rows.local[:, ia], rows.local[:, ic]
    local = rows.local.clone()
    # two rounded products and a rounded add: 2U * (|first product| + |second product|)
    local[:, ia] = ea * cos.abs() + ec * sin.abs() + 2 * U * ((a * cos).abs() + (c * sin).abs())
    local[:, ic] = ea * sin.abs() + ec * cos.abs() + 2 * U * ((a * sin).abs() + (c * cos).abs())
    return rows.linear(rotate, local)


@lru_cache(maxsize=8)
def sylvester(d: int) -> torch.Tensor:
    """Orthonormal Walsh-Hadamard matrix in Sylvester order: H[i, j] = (-1)^popcount(i & j) / sqrt(d)."""
    import torch

    if d < 1 or d & (d - 1):
        raise ValueError(f"Walsh-Hadamard needs a power-of-two head_dim, got {d}")
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / math.sqrt(d)


def _hadamard(v: Variant, rows: Rows) -> Rows:
    import torch

    if not v.hadamard:
        return rows
    d = rows.value.shape[1]
    h = sylvester(d)
    # A fast transform sums each output over a depth-log2(d) tree: every input sits under log2(d)
    # rounded adds, each bounded by U * sum|y|. Input errors pass with weight 1/sqrt(d) each.
    spread = (rows.local.sum(-1, keepdim=True) + math.log2(d) * U * rows.value.abs().sum(-1, keepdim=True))
    out = rows.linear(lambda t: t @ h, spread.expand_as(rows.value) / math.sqrt(d))
    # times 1/sqrt(d) held in float32: one common relative error U, plus the multiply's rounding
    return Rows(out.value, out.local + U * out.value.abs(), out.common + ((out.value, torch.full_like(spread, U)),))


def oracle_rows(v: Variant, x: torch.Tensor, weight: torch.Tensor | None, freqs: torch.Tensor | None,
                positions: torch.Tensor | None, eps: float = 1e-6, bias: torch.Tensor | None = None) -> Rows:
    """norm -> RoPE (RoPE -> norm with norm_order: rope_then_norm) -> Walsh-Hadamard in float64 from the
    definitions, with the float32 error bound."""
    import torch

    def f64(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.to(torch.float64)

    x64 = x.to(torch.float64)
    rows = Rows(x64, torch.zeros_like(x64))
    rope_first = v.norm_order == "rope_then_norm"
    if not rope_first:
        rows = _round_bf16_if(v.round_norm_bf16, _norm(v, rows, f64(weight), f64(bias), eps))
    if v.rope_dim:
        assert freqs is not None and positions is not None
        rows = _rope(v, rows, freqs.to(torch.float64), positions)
    if rope_first:
        rows = _round_bf16_if(v.round_norm_bf16, _norm(v, rows, f64(weight), f64(bias), eps))
    if TEMPERATURES[v.temperature].on:
        assert positions is not None
        rows = _temper(v, rows, positions)
    return _hadamard(v, rows)


def _temper(v: Variant, rows: Rows, positions: torch.Tensor) -> Rows:
    """The row times t = log(floor((pos + 1) / floor_scale) + 1) * attn_scale + 1 (float64 math); the kernel's t is
    that rounded to float32 (a common relative error U per row, over float64's own few ulps) and each product
    rounds once more."""
    import torch

    kind = TEMPERATURES[v.temperature]
    k = torch.floor((kind.positions_read(positions).to(torch.float64) + 1.0) / kind.floor_scale)
    t = (torch.log1p(k) * kind.attn_scale + 1.0)[:, None]
    out = rows.linear(lambda m: m * t, rows.local * t)
    return Rows(out.value, out.local + U * out.value.abs(), out.common + ((out.value, torch.full_like(t, 2 * U)),))


def _round_bf16_if(rounded: bool, rows: Rows) -> Rows:
    """round_norm_bf16: the float32 row rounded to bf16. Rounding is monotone, so the window [value -+ bound] maps
    onto [bf16(lo), bf16(hi)] and the exact value onto bf16(value): the rows go on from bf16(value), their bound the
    larger distance to either end."""
    import torch

    if not rounded:
        return rows
    width = rows.bound()
    mid, lo, hi = (round_to(t, BF16) for t in (rows.value, rows.value - width, rows.value + width))
    return Rows(mid, torch.maximum(hi - mid, mid - lo) / SAFETY)


# ---- checking stored fields ----

@dataclass(frozen=True)
class FieldCheck:
    """One field's verdict. exact: the correctly rounded value; near: its neighbour, the window crossing
    one boundary; wide: two or more steps away, accepted only because the window itself spans them
    (outputs of cancellation, far smaller than their row, whose float32 error exceeds a step)."""

    name: str
    checked: int
    exact: int
    near: int
    wide: int
    violations: int


@dataclass(frozen=True)
class OracleReport:
    variant: str
    rows: int  # written rows checked
    fields: tuple[FieldCheck, ...]
    outside_changed: int  # bytes outside written slots that differ from the poison (0 when none given)
    window: float  # largest acceptance half-width relative to its row's amax
    scale_tol: float  # largest relative tolerance applied to an fp32 scale (0 without one)

    @property
    def violations(self) -> dict[str, int]:
        return {f.name: f.violations for f in self.fields} | {"outside": self.outside_changed}

    @property
    def near(self) -> int:
        return sum(f.near for f in self.fields)

    @property
    def wide(self) -> int:
        return sum(f.wide for f in self.fields)

    @property
    def checked(self) -> int:
        return sum(f.checked for f in self.fields)

    @property
    def ok(self) -> bool:
        return self.rows > 0 and not any(self.violations.values())

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


@dataclass(frozen=True)
class _Span:
    """A quantity's float64 value and the interval a float32 evaluation may land in."""

    mid: torch.Tensor
    lo: torch.Tensor
    hi: torch.Tensor

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> _Span:
        """Apply a monotone non-decreasing fn (a rounding) to all three."""
        return _Span(fn(self.mid), fn(self.lo), fn(self.hi))

    def cols(self, sl: slice) -> _Span:
        return _Span(self.mid[:, sl], self.lo[:, sl], self.hi[:, sl])


def _count(name: str, good: torch.Tensor, steps: torch.Tensor) -> FieldCheck:
    """Tally a field: good says accepted, steps how far (in codes) the stored value is from the oracle's."""
    return FieldCheck(name, good.numel(), int((good & (steps == 0)).sum()), int((good & (steps == 1)).sum()),
                      int((good & (steps > 1)).sum()), int((~good).sum()))


def _verdict(name: str, stored: torch.Tensor, span: _Span, g: Grid) -> FieldCheck:
    """Accept a code the window [lo, hi] reaches: rounding is monotone, so those are the codes from
    round(lo) to round(hi). A window narrower than a step makes that the correctly rounded value, or
    its neighbour when the float64 value lies within the window of a boundary."""
    s, lo, hi, mid = (rank(t, g) for t in (stored, round_to(span.lo, g), round_to(span.hi, g), round_to(span.mid, g)))
    return _count(name, (s >= lo) & (s <= hi), (s - mid).abs())


def _group_amax(span: _Span, group: int) -> _Span:
    """Per-group amax with its interval: the smallest and largest |y| each element's window allows."""
    import torch

    n = span.mid.shape[0]
    crosses = (span.lo <= 0) & (span.hi >= 0)
    low = torch.where(crosses, torch.zeros_like(span.lo), torch.minimum(span.lo.abs(), span.hi.abs()))
    high = torch.maximum(span.lo.abs(), span.hi.abs())

    def amax(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(n, -1, group).amax(-1)

    return _Span(amax(span.mid.abs()), amax(low), amax(high))


def _times(span: _Span, g: float) -> _Span:
    """span * g (g > 0) in float32: the window widens by one product's rounding."""
    slack = SAFETY * U
    lo, hi = span.lo * g, span.hi * g
    return _Span(span.mid * g, lo - slack * lo.abs(), hi + slack * hi.abs())


def _scale_span(amax: _Span, qmax: float) -> _Span:
    """max(amax, 1e-4) / qmax; float32 adds the divide's rounding and the rounded 1e-4 constant."""
    slack = SAFETY * 2 * U
    return _Span(amax.mid.clamp_min(AMAX_FLOOR) / qmax, amax.lo.clamp_min(AMAX_FLOOR) / qmax * (1 - slack),
                 amax.hi.clamp_min(AMAX_FLOOR) / qmax * (1 + slack))


def _check_fp8_e4m3(part: Part, values: _Span, raw: dict[str, torch.Tensor]) -> tuple[list[FieldCheck], float]:
    import torch

    scale = _scale_span(_group_amax(values, values.mid.shape[1]), E4M3_MAX)  # [N, 1]
    got = _decode_fp32(raw[part.scale_field])
    ok = (got >= scale.lo) & (got <= scale.hi)
    exact = got == scale.mid.to(torch.float32).to(torch.float64)
    scale_check = _count(part.scale_field, ok, (~exact).to(torch.int64))  # inside the tolerance counts as near
    quotients = [a / b for a in (values.lo, values.hi) for b in (scale.lo, scale.hi)]
    q_lo, q_hi = torch.stack(quotients).amin(0), torch.stack(quotients).amax(0)
    slack = SAFETY * 2 * U  # the kernel's v * RN(1 / scale): two roundings
    q = _Span(values.mid / scale.mid, q_lo - slack * q_lo.abs(), q_hi + slack * q_hi.abs())
    codes = _verdict(part.field, _decode_e4m3(raw[part.field]), q, E4M3)
    tol = float(torch.maximum(scale.hi - scale.mid, scale.mid - scale.lo).div(scale.mid).max()) if got.numel() else 0.0
    return [codes, scale_check], tol


def _check_pow2_group(name: str, scale_name: str, values: _Span, codes: torch.Tensor, scales: torch.Tensor, group: int,
                      g: Grid, qmax: float, min_exp: int | None = None) -> list[FieldCheck]:
    """UE8M0 exponent = ceil(log2(max(amax, 1e-4) / qmax)) (at least min_exp where given), then codes of y / 2^e
    on grid g."""
    t = _scale_span(_group_amax(values, group), qmax)
    want = _Span(ceil_log2(t.mid), ceil_log2(t.lo), ceil_log2(t.hi))
    if min_exp is not None:
        want = want.map(lambda e: e.clamp_min(min_exp))
    return _judge_pow2_group(name, scale_name, values, codes, scales, group, g, want)


def _judge_pow2_group(name: str, scale_name: str, values: _Span, codes: torch.Tensor, scales: torch.Tensor,
                      group: int, g: Grid, want: _Span) -> list[FieldCheck]:
    """UE8M0 bytes e + 127 against the exponent window `want` (within one of its middle), then codes of y / 2^e
    on grid g: the kernel's codes follow its own exponent, so where that exponent is accepted they are judged by it."""
    import torch

    got = scales.to(torch.int64)[:, :want.mid.shape[1]] - 127
    ok = (got >= want.lo) & (got <= want.hi) & ((got - want.mid).abs() <= 1)
    scale_check = _count(scale_name, ok, (got - want.mid).abs())
    step = _pow2(torch.where(ok, got, want.mid).repeat_interleave(group, dim=-1))
    q = _Span(values.mid / step, values.lo / step, values.hi / step)  # exact: powers of two
    return [_verdict(name, codes, q, g), scale_check]


def _ocp_exponent(amax: torch.Tensor) -> torch.Tensor:
    """floor(log2(amax)) - 2, or -127 below the least normal float32 (a zero or subnormal amax): the OCP MX rule."""
    import torch

    return torch.where(amax < 2.0 ** -126, torch.full_like(amax, -127, dtype=torch.int64),
                       _floor_log2(amax.clamp_min(2.0 ** -126), -126) - 2)


def _check_ocp_groups(part: Part, values: _Span, raw: dict[str, torch.Tensor]) -> tuple[list[FieldCheck], float]:
    """MXFP4 (the OCP MX rule): exponent floor(log2(amax)) - 2 per group, no floor (-127 for a zero or subnormal
    amax); codes of y / 2^e rounded to nearest even, saturating at 6. The exponent's window comes from the amax
    window; where the kernel's exponent is accepted, its codes are judged by it."""
    group = min(part.group, values.mid.shape[1])
    amax = _group_amax(values, group)
    want = _Span(_ocp_exponent(amax.mid), _ocp_exponent(amax.lo), _ocp_exponent(amax.hi))
    return _judge_pow2_group(part.field, part.scale_field, values, _decode_e2m1(raw[part.field]),
                             raw[part.scale_field], group, E2M1_RNE, want), 0.0


def _check_fields(layout: Layout, values: _Span, raw: dict[str, torch.Tensor]) -> tuple[list[FieldCheck], float]:
    """Each part of the format judged by its rule; the largest relative fp32-scale tolerance applied."""
    checks: list[FieldCheck] = []
    tol = 0.0
    for seg in layout.segments:
        part_checks, part_tol = _CHECKERS[seg.part.rule](seg.part, values.cols(slice(seg.begin, seg.end)), raw)
        checks += part_checks
        tol = max(tol, part_tol)
    return checks, tol


def _check_plain_bf16(part: Part, values: _Span, raw: dict[str, torch.Tensor]) -> tuple[list[FieldCheck], float]:
    return [_verdict(part.field, _decode_bf16(raw[part.field]), values, BF16)], 0.0


def _check_plain_fp16(part: Part, values: _Span, raw: dict[str, torch.Tensor]) -> tuple[list[FieldCheck], float]:
    return [_verdict(part.field, _decode_fp16(raw[part.field]), values, FP16)], 0.0


def _check_e4m3_plain(part: Part, values: _Span, raw: dict[str, torch.Tensor]) -> tuple[list[FieldCheck], float]:
    """Codes of the (already scaled) values on the e4m3 grid, saturating at 448."""
    return [_verdict(part.field, _decode_e4m3(raw[part.field]), values, E4M3)], 0.0


def _check_pow2_groups(part: Part, values: _Span, raw: dict[str, torch.Tensor]) -> tuple[list[FieldCheck], float]:
    codes = _decode_e4m3(raw[part.field]) if part.encoding == "e4m3" else _decode_e2m1(raw[part.field])
    grid = E4M3 if part.encoding == "e4m3" else E2M1
    group = min(part.group, values.mid.shape[1])
    return _check_pow2_group(part.field, part.scale_field, values, codes, raw[part.scale_field], group, grid,
                             QMAX[part.encoding], SCALE_FLOOR_EXP if part.scale == "ue8m0_scale_floor" else None), 0.0


def _check_e4m3_pow2_scale(part: Part, values: _Span, raw: dict[str, torch.Tensor]) -> tuple[list[FieldCheck], float]:
    """vLLM's ue8m0 option: an fp32 scale 2^ceil(log2(max(amax, 1e-4) / 448)), codes of y / scale (exact).
    log2f errs by up to 2 ulps, so a scale a few ulps above a power of two may keep that power."""
    import torch

    scale = _scale_span(_group_amax(values, values.mid.shape[1]), E4M3_MAX)
    want = _Span(ceil_log2(scale.mid), ceil_log2(scale.lo * (1 - 8 * U)), ceil_log2(scale.hi))
    got = _decode_fp32(raw[part.scale_field])
    m, e = torch.frexp(got)
    is_pow2 = (m == 0.5) & torch.isfinite(got)
    got_e = e.to(torch.int64) - 1
    ok = is_pow2 & (got_e >= want.lo) & (got_e <= want.hi)
    scale_check = _count(part.scale_field, ok, (got_e - want.mid).abs())
    step = _pow2(torch.where(ok, got_e, want.mid))
    codes = _verdict(part.field, _decode_e4m3(raw[part.field]), _Span(values.mid / step, values.lo / step,
                                                                        values.hi / step), E4M3)
    return [codes, scale_check], 0.0


def _check_e4m3_groups(part: Part, values: _Span, raw: dict[str, torch.Tensor]) -> tuple[list[FieldCheck], float]:
    """NVFP4: e4m3 scale = RN(amax * RN(1/6)) per group, then codes of y * RN(1 / scale) on the e2m1 grid."""
    import torch

    slack = SAFETY * 2 * U  # float32 products: amax * RN(1/6), y * RN(1/s)
    sixth = float(torch.tensor(1.0 / E2M1_MAX, dtype=torch.float32))
    amax = _group_amax(values, part.group)
    want = _Span(amax.mid * sixth, amax.lo * sixth * (1 - slack), amax.hi * sixth * (1 + slack))
    got = _decode_e4m3(raw[part.scale_field])[:, :want.mid.shape[1]]
    s, lo, hi, mid = (rank(t, E4M3) for t in (got, round_to(want.lo, E4M3), round_to(want.hi, E4M3),
                                                round_to(want.mid, E4M3)))
    ok = (s >= lo) & (s <= hi)
    scale_check = _count(part.scale_field, ok, (s - mid).abs())
    # The kernel's codes follow its own scale; where that scale is accepted, judge codes by it.
    scale = torch.where(ok, got, round_to(want.mid, E4M3))
    inv = torch.where(scale == 0, torch.zeros_like(scale), 1.0 / scale).repeat_interleave(part.group, dim=-1)
    q_lo, q_hi = values.lo * inv, values.hi * inv  # inv >= 0 keeps the order
    q = _Span(values.mid * inv, q_lo - slack * q_lo.abs(), q_hi + slack * q_hi.abs())
    codes = _verdict(part.field, _decode_e2m1(raw[part.field]), q, E2M1_RNE)
    return [codes, scale_check], 0.0


def _check_e4m3_pow2_tiles(part: Part, values: _Span, raw: dict[str, torch.Tensor]) -> tuple[list[FieldCheck], float]:
    """vLLM's fp8_ds_mla: a float32 scale 2^ceil(log2(max(amax / 448, 1e-4))) per group, codes of y / scale (exact).
    vLLM evaluates it as exp2f(ceilf(log2f(.))), and log2f errs by ulps: a quotient a few ulps above a power of two
    may keep that power."""
    import torch

    amax = _group_amax(values, part.group)
    slack = SAFETY * U  # amax / 448, one divide
    lo, mid, hi = ((t / E4M3_MAX).clamp_min(AMAX_FLOOR) for t in (amax.lo * (1 - slack), amax.mid, amax.hi * (1 + slack)))
    want = _Span(ceil_log2(mid), ceil_log2(lo * (1 - 8 * U)), ceil_log2(hi))
    got = _decode_fp32(raw[part.scale_field])[:, :want.mid.shape[1]]
    m, e = torch.frexp(got)
    got_e = e.to(torch.int64) - 1
    ok = (m == 0.5) & torch.isfinite(got) & (got_e >= want.lo) & (got_e <= want.hi)
    scale_check = _count(part.scale_field, ok, (got_e - want.mid).abs())
    step = _pow2(torch.where(ok, got_e, want.mid)).repeat_interleave(part.group, dim=-1)
    codes = _verdict(part.field, _decode_e4m3(raw[part.field]), _Span(values.mid / step, values.lo / step,
                                                                        values.hi / step), E4M3)
    return [codes, scale_check], 0.0


def _check_e4m3_groups_divided(part: Part, values: _Span, raw: dict[str, torch.Tensor]) -> tuple[list[FieldCheck], float]:
    """DeepSeek-V4.1 fp4: e4m3 scale = RN(clamp(amax / 6, 2^-9, 448)) per group, then codes of y / scale on the
    e2m1 grid (ties to even)."""
    import torch

    slack = SAFETY * U  # one float32 divide each: amax / 6, y / s
    amax = _group_amax(values, part.group)

    def clamp(t: torch.Tensor) -> torch.Tensor:
        return t.clamp(E4M3_MIN_SCALE, E4M3_MAX)

    want = _Span(clamp(amax.mid / E2M1_MAX), clamp(amax.lo / E2M1_MAX * (1 - slack)),
                 clamp(amax.hi / E2M1_MAX * (1 + slack)))
    got = _decode_e4m3(raw[part.scale_field])[:, :want.mid.shape[1]]
    s, lo, hi, mid = (rank(t, E4M3) for t in (got, round_to(want.lo, E4M3), round_to(want.hi, E4M3),
                                                round_to(want.mid, E4M3)))
    ok = (s >= lo) & (s <= hi)
    scale_check = _count(part.scale_field, ok, (s - mid).abs())
    scale = torch.where(ok, got, round_to(want.mid, E4M3)).repeat_interleave(part.group, dim=-1)
    q_lo, q_hi = values.lo / scale, values.hi / scale  # scale > 0 keeps the order
    q = _Span(values.mid / scale, q_lo - slack * q_lo.abs(), q_hi + slack * q_hi.abs())
    codes = _verdict(part.field, _decode_e2m1(raw[part.field]), q, E2M1_RNE)
    return [codes, scale_check], 0.0


def _round_half_away(q: torch.Tensor) -> torch.Tensor:
    """int8 codes of float64 q: nearest integer, ties away from zero, clamped to [-128, 127] (vLLM's int8 rule)."""
    import torch

    return (torch.sign(q) * torch.floor(q.abs() + 0.5)).clamp(-128, I8_MAX)


def _check_token_head(part: Part, values: _Span, raw: dict[str, torch.Tensor]) -> tuple[list[FieldCheck], float]:
    """vLLM's per-token-head modes: a float32 scale max(amax / qmax, 1e-6) per (token, head), codes of
    y * RN(1 / scale): e4m3 to nearest even, int8 half away from zero after a float32 add of 0.5."""
    import torch

    qmax = QMAX[part.encoding]
    amax = _group_amax(values, values.mid.shape[1])  # [N, 1]
    slack = SAFETY * U  # amax / qmax, one divide; the floor is the float32 1e-6, within U of 1e-6
    floor = TOKEN_HEAD_SCALE_FLOOR
    scale = _Span((amax.mid / qmax).clamp_min(floor), (amax.lo / qmax * (1 - slack)).clamp_min(floor * (1 - slack)),
                  (amax.hi / qmax * (1 + slack)).clamp_min(floor * (1 + slack)))
    got = _decode_fp32(raw[part.scale_field])
    ok = (got >= scale.lo) & (got <= scale.hi)
    exact = got == scale.mid.to(torch.float32).to(torch.float64)
    scale_check = _count(part.scale_field, ok, (~exact).to(torch.int64))
    quotients = [a / b for a in (values.lo, values.hi) for b in (scale.lo, scale.hi)]
    q_lo, q_hi = torch.stack(quotients).amin(0), torch.stack(quotients).amax(0)
    q_slack = SAFETY * 3 * U  # y * RN(1 / scale): two roundings; int8 adds RN(q +- 0.5)
    q = _Span(values.mid / scale.mid, q_lo - q_slack * q_lo.abs() - U, q_hi + q_slack * q_hi.abs() + U)
    if part.encoding == "e4m3":
        codes = _verdict(part.field, _decode_e4m3(raw[part.field]), q, E4M3)
    else:
        stored = raw[part.field].contiguous().view(torch.int8).to(torch.float64)
        lo, hi, mid = (_round_half_away(t) for t in (q.lo, q.hi, q.mid))
        codes = _count(part.field, (stored >= lo) & (stored <= hi), (stored - mid).abs())
    tol = float(torch.maximum(scale.hi - scale.mid, scale.mid - scale.lo).div(scale.mid).max()) if got.numel() else 0.0
    return [codes, scale_check], tol


_CHECKERS: dict[tuple[str, str], Callable[[Part, _Span, dict[str, torch.Tensor]], tuple[list[FieldCheck], float]]] = {
    ("bf16", "none"): _check_plain_bf16,
    ("fp16", "none"): _check_plain_fp16,
    ("e4m3", "none"): _check_e4m3_plain,
    ("e4m3", "fp32"): _check_fp8_e4m3,
    ("e4m3", "fp32_divided"): _check_fp8_e4m3,  # the window's slack covers a divide as a multiply
    ("e4m3", "fp32_pow2"): _check_e4m3_pow2_scale,
    ("e4m3", "fp32_pow2_floor"): _check_e4m3_pow2_tiles,
    ("e4m3", "ue8m0"): _check_pow2_groups,
    ("e4m3", "ue8m0_scale_floor"): _check_pow2_groups,
    ("e2m1x2", "ue8m0"): _check_pow2_groups,
    ("e2m1x2", "ue8m0_ocp"): _check_ocp_groups,
    ("e2m1x2", "e4m3"): _check_e4m3_groups,
    ("e2m1x2", "e4m3_divided"): _check_e4m3_groups_divided,
    ("e4m3", "fp32_scale_floor"): _check_token_head,
    ("i8", "fp32_scale_floor"): _check_token_head,
}


def written(v: Variant, out_loc: torch.Tensor, positions: torch.Tensor | None, num_slots: int,
            max_pos: int) -> torch.Tensor:
    """Rows the op must write: a slot inside the pool and, with RoPE, a position inside freqs."""
    keep = (out_loc >= 0) & (out_loc < num_slots)
    if TEMPERATURES[v.temperature].on:
        assert positions is not None
        keep = keep & (TEMPERATURES[v.temperature].positions_read(positions) >= 0)
    if v.rope_dim:
        assert positions is not None
        inside = (positions >= 0) & (positions < max_pos)
        keep = keep & (inside.all(0) if inside.dim() > 1 else inside)  # M-RoPE: every stream's position
    return keep


def check_against_oracle(v: Variant, cache: torch.Tensor, inputs: dict[str, Any], eps: float = 1e-6,
                         poison: torch.Tensor | None = None, layout: Layout | None = None) -> OracleReport:
    """Hold every stored value of the written rows to the oracle; with poison (the cache before the
    write), also count bytes changed outside the written slots."""
    import torch

    def cpu(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.cpu()

    if v.heads > 1:  # rows of (token, head)
        rv, rows_in = split_heads(v, inputs)
        return check_against_oracle(rv, cache, rows_in, eps, poison, row_layout(v))
    layout = layout or layout_of(v)
    cache = cache.cpu()
    freqs, positions = inputs["freqs"], cpu(inputs["positions"])
    out_loc = inputs["out_loc"].cpu().long()
    max_pos = freqs.shape[0] if freqs is not None else 0
    keep = written(v, out_loc, positions, cache.shape[0] * v.page_size, max_pos)
    rows = oracle_rows(v, inputs["x"].cpu()[keep], cpu(inputs["weight"]), cpu(freqs),
                       None if positions is None else positions[..., keep], eps, cpu(inputs["bias"]))
    width = rows.bound()
    values = _Span(rows.value, rows.value - width, rows.value + width)
    if v.round_through_bf16:  # the stored math is defined on the bf16-rounded row
        values = values.map(lambda t: round_to(t, BF16))
    if format_of(v).global_scale:  # the row times g: one more float32 product
        s = inputs["scale"].double().cpu()
        g = (1.0 / s).float().double() if format_of(v).scale_reciprocal else s  # g = RN(1 / s) for a k_scale
        g = 1.0 / s if format_of(v).scale_divides else g  # RN(v / s): one rounding of v x (1 / s)
        values = _times(values, float(g))
    checks, scale_tol = _check_fields(layout, values, read_fields(layout, cache, out_loc[keep]))
    outside = 0 if poison is None else changed_outside(layout, cache, poison, torch.where(keep, out_loc, -1))
    amax = rows.value.abs().amax(-1).clamp_min(1e-30)
    window = float((width.amax(-1) / amax).max()) if keep.any() else 0.0
    return OracleReport(v.name, int(keep.sum()), tuple(checks), outside, window, scale_tol)


def check_group_against_oracle(g: Group, inputs: dict[str, Any], eps: float = 1e-6,
                               poisons: dict[str, torch.Tensor] | None = None) -> list[OracleReport]:
    """check_against_oracle for every member of a launch group: inputs are the group's (its symbol's names, as
    measure.inputs.group_inputs makes them), each member's output read from its own argument."""
    from .inputs import member_inputs

    return [check_against_oracle(v, inputs[g.names(role)["kvcache"]], member_inputs(g, role, inputs), eps,
                                 None if poisons is None else poisons[role]) for role, v in g.members]
