"""Quantization arithmetic in PyTorch, bit-for-bit the rules the kernels follow."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..spec.formats import (E2M1_MAX, E4M3_MAX, E4M3_MIN_SCALE, FORMATS, I8_MAX, QMAX, SCALE_FLOOR_EXP,
                            TOKEN_HEAD_SCALE_FLOOR, Part)
from .layout import Layout

if TYPE_CHECKING:
    import torch

AMAX_FLOOR = 1e-4
# e2m1 magnitude codes 0..7 and the thresholds between them; a value strictly above a
# threshold takes the larger code (the serving layout's rule), which is not round-to-nearest-even.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E2M1_THRESHOLDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


def _f32(value: float, like: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.tensor(value, dtype=torch.float32, device=like.device)


def bf16_round(y: torch.Tensor) -> torch.Tensor:
    import torch

    return y.to(torch.bfloat16).to(torch.float32)


def ceil_log2(v: torch.Tensor) -> torch.Tensor:
    """Exact ceil(log2(v)) for positive normal float32 v (int32), as the kernel's bit test does."""
    import torch

    bits = v.contiguous().view(torch.int32)
    exponent = ((bits >> 23) & 0xFF) - 127
    return exponent + ((bits & 0x7FFFFF) != 0).to(torch.int32)


def pow2(e: torch.Tensor) -> torch.Tensor:
    import torch

    return ((e + 127).to(torch.int32) << 23).view(torch.float32)


def e4m3_encode(q: torch.Tensor) -> torch.Tensor:
    import torch

    return q.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)


def e4m3_decode(codes: torch.Tensor) -> torch.Tensor:
    import torch

    return codes.contiguous().view(torch.float8_e4m3fn).to(torch.float32)


def e2m1_encode(q: torch.Tensor) -> torch.Tensor:
    """Codes 0..15: magnitude index from the thresholds, sign in bit 3 (set for negative inputs)."""
    import torch

    mag = torch.zeros_like(q, dtype=torch.uint8)
    for t in E2M1_THRESHOLDS:
        mag += (q.abs() > t).to(torch.uint8)
    return mag | (torch.signbit(q).to(torch.uint8) << 3)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    import torch

    table = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=codes.device)
    mag = table[(codes & 7).long()]
    return torch.where((codes & 8) != 0, -mag, mag)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """[N, B] bytes -> [N, 2B] codes: low nibble first (even dim), then high nibble."""
    import torch

    return torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(packed.shape[0], 2 * packed.shape[1])


def _group_scale_exponent(y: torch.Tensor, group: int, qmax: float, floor_on_scale: bool = False) -> torch.Tensor:
    """Per-group power-of-two exponent: ceil(log2(max(amax, 1e-4) / qmax)), shape [N, D/group]; floor_on_scale
    (V4.1): ceil(log2(max(amax / qmax, 1e-4))), which is the same exponent floored at -13."""
    import torch

    amax = y.abs().reshape(y.shape[0], -1, group).amax(dim=-1)
    e = ceil_log2(torch.maximum(amax, _f32(AMAX_FLOOR, y)) / _f32(qmax, y))
    return e.clamp_min(SCALE_FLOOR_EXP) if floor_on_scale else e


def _bytes(t: torch.Tensor) -> torch.Tensor:
    import torch

    # Little-endian bytes [N, row bytes] by shifts of a same-size integer view: a view to a narrower
    # dtype needs a unit last stride, and under torch.compile a [N, 1] (or [1]) tensor may carry any
    # stride on a size-1 dim (inductor gave N, and 0 at N = 1), which breaks that view in lowering.
    rows = t.reshape(t.shape[0], -1)
    size = t.element_size()
    if size == 1:
        return rows.view(torch.uint8)
    ints = rows.view({2: torch.int16, 4: torch.int32}[size])
    parts = [((ints >> (8 * i)) & 0xFF).to(torch.uint8) for i in range(size)]
    return torch.stack(parts, dim=-1).reshape(t.shape[0], -1)


# Rows that are not all finite are stored as canonical NaNs, the same bytes the kernels write.
NAN_BYTES = {"bf16": b"\xc0\x7f", "fp16": b"\x00\x7e", "e4m3": b"\x7f", "fp32": b"\x00\x00\xc0\x7f", "ue8m0": b"\xff", "e2m1x2": b"\x00",
             "i8": b"\x00"}


def encode(layout: Layout, y: torch.Tensor, round_through_bf16: bool = False,
           global_scale: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """float32 rows [N, D] -> the bytes of each layout field for each row. A row holding NaN or inf
    becomes canonical NaN bytes in every field (bf16 0x7FC0, fp16 0x7E00, e4m3 0x7F, fp32 NaN, UE8M0 0xFF, e2m1 0).
    A format with a global scale multiplies the rows by g (global_scale, float32 [1]) first."""
    import torch

    if round_through_bf16:
        y = bf16_round(y)
    g = _global_scale(layout, global_scale)
    if g is not None:
        y = y / g if FORMATS[layout.store].scale_divides else y * g
    fields = _encode_finite(layout, torch.nan_to_num(y, nan=0.0, posinf=0.0, neginf=0.0))
    bad = ~torch.isfinite(y).all(dim=-1, keepdim=True)  # a select, not a branch: no host sync, one graph
    for f in layout.fields:
        fields[f.name] = torch.where(bad, _nan_row(f.encoding, f.size, str(y.device)), fields[f.name])
    return fields


def _global_scale(layout: Layout, g: torch.Tensor | None) -> torch.Tensor | None:
    """g as a float32 [1, 1] on the rows' side, for a format with a global scale (None otherwise)."""
    import torch

    if not FORMATS[layout.store].global_scale:
        return None
    if g is None or g.numel() != 1:
        raise ValueError(f"{layout.variant_name}: store {layout.store} needs its global scale g: pass scale=, "
                         "a float32 [1] tensor")
    g = g.to(torch.float32).reshape(1, 1)
    # RN(1 / s) in float32: the float64 quotient rounded once more cannot differ (53 >= 2 * 24 + 2 bits)
    return (1.0 / g.double()).float() if FORMATS[layout.store].scale_reciprocal else g


def _nan_row(encoding: str, size: int, device: str) -> torch.Tensor:
    """A field's canonical NaN bytes: made once per device in eager calls (no host-to-device copy per call); a
    constant of the graph under torch.compile, which then never sees the cache (Dynamo warns at a cached call)."""
    import torch

    if torch.compiler.is_compiling():
        return _make_nan_row(encoding, size, device)
    return _cached_nan_row(encoding, size, device)


def _make_nan_row(encoding: str, size: int, device: str) -> torch.Tensor:
    import torch

    return torch.tensor(list(NAN_BYTES[encoding] * (size // len(NAN_BYTES[encoding]))), dtype=torch.uint8,
                        device=device)


def _encode_finite(layout: Layout, y: torch.Tensor) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for seg in layout.segments:
        out.update(RULES[seg.part.rule].encode(seg.part, y[:, seg.begin:seg.end]))
    return out


def _half_dtype(encoding: str) -> torch.dtype:
    """The torch dtype of a 16-bit float encoding (round to nearest even, as the kernels' conversions)."""
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}[encoding]


def _encode_plain_half(part: Part, y: torch.Tensor) -> dict[str, torch.Tensor]:
    return {part.field: _bytes(y.to(_half_dtype(part.encoding)))}


def _encode_e4m3_token_scale(part: Part, y: torch.Tensor) -> dict[str, torch.Tensor]:
    scale = _token_scale(y)
    # Codes of y * RN(1 / scale), as the kernel computes them (one multiply per value, not a
    # divide). The float64 quotient rounded to float32 is RN(1 / scale): 53 >= 2 * 24 + 2 bits,
    # so rounding twice cannot differ from rounding once.
    inv_scale = (1.0 / scale.double()).float()
    return {part.field: e4m3_encode(y * inv_scale), part.scale_field: _bytes(scale)}


def _token_scale(y: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.maximum(y.abs().amax(dim=-1, keepdim=True), _f32(AMAX_FLOOR, y)) / _f32(E4M3_MAX, y)


def _encode_e4m3_divided(part: Part, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """vLLM's indexer writer: codes of y / scale (correctly rounded float32 divides)."""
    scale = _token_scale(y)
    return {part.field: e4m3_encode(y / scale), part.scale_field: _bytes(scale)}


def _encode_e4m3_pow2_scale(part: Part, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """vLLM's ue8m0 option: scale = exp2(ceil(log2(scale))) kept as fp32; y / scale is exact."""
    import torch

    scale = torch.exp2(torch.ceil(torch.log2(_token_scale(y))))
    return {part.field: e4m3_encode(y / scale), part.scale_field: _bytes(scale)}


def _encode_e4m3_pow2_tiles(part: Part, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """vLLM's fp8_ds_mla: a float32 scale exp2f(ceilf(log2f(max(RN(amax / 448), 1e-4)))) per group (the expression
    vLLM evaluates, a power of two), codes of y / scale (exact)."""
    import torch

    amax = y.abs().reshape(y.shape[0], -1, part.group).amax(dim=-1)
    scale = torch.exp2(torch.ceil(torch.log2(torch.maximum(amax / _f32(E4M3_MAX, y), _f32(AMAX_FLOOR, y)))))
    codes = e4m3_encode(y / scale.repeat_interleave(part.group, dim=-1))
    return {part.field: codes, part.scale_field: _bytes(scale)}


def _decode_e4m3_fp32_tiles(part: Part, fields: dict[str, torch.Tensor]) -> torch.Tensor:
    import torch

    scale = fields[part.scale_field].contiguous().view(torch.float32).repeat_interleave(part.group, dim=-1)
    return e4m3_decode(fields[part.field]) * scale


def _encode_e4m3_plain(part: Part, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """Codes of y itself (a per-tensor scale already applied), saturating at 448."""
    return {part.field: e4m3_encode(y)}


def ocp_exponent(y: torch.Tensor, group: int) -> torch.Tensor:
    """The OCP MX block exponent per group, [N, D/group]: floor(log2(amax)) - 2 read off amax's float32 exponent bits,
    -127 for a zero or subnormal amax (SGLang's MXFP4 writer)."""
    import torch

    amax = y.abs().reshape(y.shape[0], -1, group).amax(dim=-1).to(torch.float32)
    field = (amax.view(torch.int32) >> 23) & 0xFF
    return torch.where(field == 0, torch.full_like(field, -127), field - 129)


def _encode_pow2_groups(part: Part, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """UE8M0 exponent per group, then codes of y / 2^e (exact: a power of two); the OCP MX rule rounds the e2m1
    codes to nearest even."""
    import torch

    ocp = part.scale == "ue8m0_ocp"
    e = ocp_exponent(y, part.group) if ocp else \
        _group_scale_exponent(y, part.group, QMAX[part.encoding], part.scale == "ue8m0_scale_floor")
    # times 2^-e where e may be -127 (2^-127 is no normal float: pow2 reads it as 0); both are exact
    q = y * pow2(-e).repeat_interleave(part.group, dim=-1) if ocp else y / pow2(e).repeat_interleave(part.group, dim=-1)
    if part.encoding == "e4m3":
        codes = e4m3_encode(q)
    else:
        nibbles = e2m1_encode_rne(q) if ocp else e2m1_encode(q)
        codes = nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)
    return {part.field: codes, part.scale_field: (e + 127).to(torch.uint8)}


def e2m1_encode_rne(q: torch.Tensor) -> torch.Tensor:
    """Codes 0..15 rounded to nearest, ties to the even code, saturating at 6 (cvt.rn.satfinite.e2m1x2):
    a tie at 0.75, 1.75 or 3.5 goes up, at 0.25, 1.25, 2.5 or 5 down. Sign in bit 3."""
    import torch

    a = q.abs()
    mag = torch.zeros_like(q, dtype=torch.uint8)
    for t, up in zip(E2M1_THRESHOLDS, (False, True, False, True, False, True, False)):
        mag += ((a >= t) if up else (a > t)).to(torch.uint8)
    return mag | (torch.signbit(q).to(torch.uint8) << 3)


def _encode_e4m3_groups(part: Part, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """NVFP4: an e4m3 scale RN_sat(amax * RN(1/6)) per group, codes of y * RN(1 / scale) (0 for a zero scale)."""
    import torch

    amax = y.abs().reshape(y.shape[0], -1, part.group).amax(dim=-1)
    scale_codes = e4m3_encode(amax * _f32(1.0 / E2M1_MAX, y))
    scale = e4m3_decode(scale_codes)
    inv = torch.where(scale == 0, torch.zeros_like(scale), (1.0 / scale.double()).float())
    nibbles = e2m1_encode_rne(y * inv.repeat_interleave(part.group, dim=-1))
    return {part.field: nibbles[:, 0::2] | (nibbles[:, 1::2] << 4), part.scale_field: scale_codes}


def _encode_e4m3_groups_divided(part: Part, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """DeepSeek-V4.1's fp4 record: an e4m3 scale RN(clamp(RN(amax / 6), 2^-9, 448)) per group (never 0), codes of
    RN(y / scale) rounded to nearest even (a float32 divide, as SGLang's writer)."""
    amax = y.abs().reshape(y.shape[0], -1, part.group).amax(dim=-1)
    scale_codes = e4m3_encode((amax / _f32(E2M1_MAX, y)).clamp(E4M3_MIN_SCALE, E4M3_MAX))
    scale = e4m3_decode(scale_codes).repeat_interleave(part.group, dim=-1)
    nibbles = e2m1_encode_rne(y / scale)
    return {part.field: nibbles[:, 0::2] | (nibbles[:, 1::2] << 4), part.scale_field: scale_codes}




_cached_nan_row = functools.cache(_make_nan_row)


def decode(layout: Layout, fields: dict[str, torch.Tensor], valid: torch.Tensor,
           global_scale: torch.Tensor | None = None) -> torch.Tensor:
    """Field bytes -> float32 [N, D]; rows that are not valid slots become NaN. A format with a global
    scale divides the decoded values by g (global_scale)."""
    import torch

    y = _decode_values(layout, fields)
    g = _global_scale(layout, global_scale)
    if g is not None:
        y = y * g.to(y.device) if FORMATS[layout.store].scale_divides else y / g.to(y.device)
    return torch.where(valid.to(y.device)[:, None], y, torch.full_like(y, float("nan")))


def _decode_values(layout: Layout, fields: dict[str, torch.Tensor]) -> torch.Tensor:
    import torch

    segments = sorted(layout.segments, key=lambda seg: seg.begin)
    return torch.cat([RULES[seg.part.rule].decode(seg.part, fields) for seg in segments], dim=-1)


def _decode_plain_half(part: Part, fields: dict[str, torch.Tensor]) -> torch.Tensor:
    import torch

    return fields[part.field].contiguous().view(_half_dtype(part.encoding)).to(torch.float32)


def _decode_e4m3_token_scale(part: Part, fields: dict[str, torch.Tensor]) -> torch.Tensor:
    import torch

    return e4m3_decode(fields[part.field]) * fields[part.scale_field].contiguous().view(torch.float32)


def _decode_e4m3_plain(part: Part, fields: dict[str, torch.Tensor]) -> torch.Tensor:
    return e4m3_decode(fields[part.field])


def _decode_pow2_groups(part: Part, fields: dict[str, torch.Tensor]) -> torch.Tensor:
    import torch

    byte = fields[part.scale_field].to(torch.int32)
    scale = torch.where(byte == 0, 2.0 ** -127, pow2(byte - 127)).repeat_interleave(part.group, dim=-1)  # byte 0: 2^-127
    codes = fields[part.field]
    values = e4m3_decode(codes) if part.encoding == "e4m3" else e2m1_decode(unpack_nibbles(codes))
    return values * scale


def _decode_e4m3_groups(part: Part, fields: dict[str, torch.Tensor]) -> torch.Tensor:
    scale = e4m3_decode(fields[part.scale_field]).repeat_interleave(part.group, dim=-1)
    return e2m1_decode(unpack_nibbles(fields[part.field])) * scale


def i8_encode(q: torch.Tensor) -> torch.Tensor:
    """int8 codes (as uint8 bytes) of float32 q rounded half away from zero as vLLM's per-token-head writer does:
    RN(q + 0.5) for q >= 0 (-0 too), else RN(q - 0.5) (float32 adds: 0.5 - 2^-25 rounds up), clamped to
    [-128, 127], truncated toward zero."""
    import torch

    half = _f32(0.5, q)
    h = torch.where(q >= 0, q + half, q - half)
    return h.clamp(-128.0, I8_MAX).trunc().to(torch.int8).view(torch.uint8)


def i8_decode(codes: torch.Tensor) -> torch.Tensor:
    import torch

    return codes.contiguous().view(torch.int8).to(torch.float32)


def _encode_token_head(part: Part, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """vLLM's per-token-head modes: scale = max(RN(amax / qmax), 1e-6) (float32), codes of y * RN(1 / scale)."""
    import torch

    amax = y.abs().amax(dim=-1, keepdim=True)
    scale = torch.maximum(amax / _f32(QMAX[part.encoding], y), _f32(TOKEN_HEAD_SCALE_FLOOR, y))
    q = y * (1.0 / scale.double()).float()  # RN(1 / scale): see _encode_e4m3_token_scale
    codes = e4m3_encode(q) if part.encoding == "e4m3" else i8_encode(q)
    return {part.field: codes, part.scale_field: _bytes(scale)}


def _decode_token_head(part: Part, fields: dict[str, torch.Tensor]) -> torch.Tensor:
    import torch

    codes = fields[part.field]
    values = e4m3_decode(codes) if part.encoding == "e4m3" else i8_decode(codes)
    return values * fields[part.scale_field].contiguous().view(torch.float32)


@dataclass(frozen=True)
class Rule:
    """How one part rule (element encoding, scale kind) of the format table turns rows into bytes and back."""

    encode: Callable[[Part, torch.Tensor], dict[str, torch.Tensor]]
    decode: Callable[[Part, dict[str, torch.Tensor]], torch.Tensor]


RULES: dict[tuple[str, str], Rule] = {
    ("bf16", "none"): Rule(_encode_plain_half, _decode_plain_half),
    ("fp16", "none"): Rule(_encode_plain_half, _decode_plain_half),
    ("e4m3", "none"): Rule(_encode_e4m3_plain, _decode_e4m3_plain),
    ("e4m3", "fp32"): Rule(_encode_e4m3_token_scale, _decode_e4m3_token_scale),
    ("e4m3", "fp32_divided"): Rule(_encode_e4m3_divided, _decode_e4m3_token_scale),
    ("e4m3", "fp32_pow2"): Rule(_encode_e4m3_pow2_scale, _decode_e4m3_token_scale),
    ("e4m3", "fp32_pow2_floor"): Rule(_encode_e4m3_pow2_tiles, _decode_e4m3_fp32_tiles),
    ("e4m3", "ue8m0"): Rule(_encode_pow2_groups, _decode_pow2_groups),
    ("e4m3", "ue8m0_scale_floor"): Rule(_encode_pow2_groups, _decode_pow2_groups),
    ("e2m1x2", "ue8m0"): Rule(_encode_pow2_groups, _decode_pow2_groups),
    ("e2m1x2", "ue8m0_ocp"): Rule(_encode_pow2_groups, _decode_pow2_groups),
    ("e2m1x2", "e4m3"): Rule(_encode_e4m3_groups, _decode_e4m3_groups),
    ("e2m1x2", "e4m3_divided"): Rule(_encode_e4m3_groups_divided, _decode_e4m3_groups),
    ("e4m3", "fp32_scale_floor"): Rule(_encode_token_head, _decode_token_head),
    ("i8", "fp32_scale_floor"): Rule(_encode_token_head, _decode_token_head),
}
