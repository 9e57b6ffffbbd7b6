"""The RoPE tables: one declarative entry per value of the `rope_style` axis (which dims a rotation pairs) and
of the `rope_table` axis (where a freqs row keeps each pair's cos and sin).

Every stage reads these axes from here: the spec language (values and other spellings, e.g. `rotate_half`),
generated variant names, the guards, the renderer (the device flags kNeox and kRopeHalves), the PyTorch
reference, the float64 oracle and the benchmark's freqs tables. Partial rotary is the `rope_dim` and
`rope_place` axes (the rope may cover a head's first or last rope_dim dims). Adding a value is an entry here
plus its device code (templates/kernelgen/rope.cuh); tests/test_axis_tables.py holds every stage to the
tables. A style with several position streams is multimodal RoPE (M-RoPE: Qwen2-VL, Qwen2.5-VL, Qwen3-VL): the
positions are [3, N] (temporal, height, width) and each rotated pair takes its angle from one stream, by the
`rope_sections` axis (pairs per stream, as the model config's mrope_section) and the style's order of them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RopeStyle:
    """Which dims a rotation pairs: dim j of the rope with j + 1 (interleaved, GPT-J) or with j + rope_dim/2
    (neox, rotate-half)."""

    name: str
    short: str
    neox: bool  # the device flag kNeox: partners half the rope apart (else neighbours)
    aliases: tuple[str, ...] = ()
    streams: int = 1  # position streams a token's rotation reads: 3 for M-RoPE (positions [3, N])
    interleaved_streams: bool = False  # M-RoPE's pair -> stream order: sections one after another, or T H W T H W...

    def pairs(self, rope_dim: int) -> tuple[slice, slice]:
        """(first, second) element of every rotated pair, as slices over the rope's dims; pair j is rotated by
        the angle of frequency j."""
        if self.neox:
            return slice(0, rope_dim // 2), slice(rope_dim // 2, rope_dim)
        return slice(0, rope_dim, 2), slice(1, rope_dim, 2)

    def pair_streams(self, rope_dim: int, sections: tuple[int, ...]) -> list[int]:
        """The position stream each pair j of the rope takes its angle from (all 0 for a one-stream style). M-RoPE
        (vLLM's mrope.py): contiguous sections, pairs [0, t) stream 0, [t, t + h) stream 1, the rest stream 2; or
        interleaved (apply_interleaved_rope): pair j is stream 1 where j % 3 == 1 and j < 3h, stream 2 where
        j % 3 == 2 and j < 3w, else stream 0."""
        pairs = rope_dim // 2
        if self.streams == 1:
            return [0] * pairs
        t, h, w = sections
        if self.interleaved_streams:
            return [1 if j % 3 == 1 and j < 3 * h else 2 if j % 3 == 2 and j < 3 * w else 0 for j in range(pairs)]
        return [0 if j < t else 1 if j < t + h else 2 for j in range(pairs)]


    def gather(self, table: RopeTableLayout, rope_dim: int, sections: tuple[int, ...], f: Any) -> tuple[Any, Any]:
        """(cos, sin) [N, rope_dim / 2] of every pair from freqs rows f gathered at the positions: [N, rope_dim]
        (one stream) or [3, N, rope_dim] (M-RoPE: positions [3, N]; pair j takes stream pair_streams[j]'s row).
        f is a torch tensor; only its indexing is used."""
        cos_at, sin_at = table.cos_sin(rope_dim)
        if self.streams == 1:
            return f[:, cos_at], f[:, sin_at]
        import torch

        streams = torch.tensor(self.pair_streams(rope_dim, sections), device=f.device)
        pairs = torch.arange(rope_dim // 2, device=f.device)
        # [3, N, P] indexed [stream(j), :, j] for each pair j: [P, N], transposed to [N, P]
        return f[..., cos_at][streams, :, pairs].T, f[..., sin_at][streams, :, pairs].T


@dataclass(frozen=True)
class RopeTableLayout:
    """Where a freqs row keeps the (cos, sin) of pair j."""

    name: str
    short: str
    halves: bool  # the device flag kRopeHalves: cos of every pair, then every sin (a cos_sin_cache)
    header: str  # the generated header's note ("" for the default)
    describe: str  # for an export's abi notes

    def cos_sin(self, rope_dim: int) -> tuple[slice, slice]:
        """The columns of a freqs row holding the cos and the sin of pairs 0, 1, ..."""
        if self.halves:
            return slice(0, rope_dim // 2), slice(rope_dim // 2, rope_dim)
        return slice(0, rope_dim, 2), slice(1, rope_dim, 2)


@dataclass(frozen=True)
class Temperature:
    """A query temperature from each token's position (the `temperature` axis): the row is multiplied by
    t = RN_f32(log(floor((pos + 1) / floor_scale) + 1) * attn_scale + 1), evaluated in float64 with separately
    rounded operations (Llama-4's attn_temperature_tuning on its NoPE layers: vLLM 0.34 llama4.py _get_attn_scale
    computes the same expression in float32), after RoPE and the norm. A row whose position is negative is not
    written."""

    name: str
    short: str
    floor_scale: float = 0.0
    attn_scale: float = 0.0
    aliases: tuple[str, ...] = ()

    @property
    def on(self) -> bool:
        return self.floor_scale > 0

    @staticmethod
    def positions_read(positions: Any) -> Any:
        """The positions the temperature reads: the token's position, the first (temporal) row of M-RoPE's [3, N]
        (the device code's f.pos)."""
        return positions[0] if positions.dim() > 1 else positions

    def factor(self, positions: Any) -> Any:
        """t for each position (a torch integer tensor): float32, from float64 arithmetic."""
        import torch

        k = torch.floor((positions.to(torch.float64) + 1.0) / self.floor_scale)
        return (torch.log(k + 1.0) * self.attn_scale + 1.0).to(torch.float32)


TEMPERATURES: dict[str, Temperature] = {t.name: t for t in (
    Temperature("none", "notemp"),
    Temperature("llama4", "llama4temp", 8192.0, 0.1, aliases=("attn_temperature_tuning", "llama_4", "llama4_nope")),
)}


ROPE_STYLES: dict[str, RopeStyle] = {s.name: s for s in (
    RopeStyle("interleaved", "ilv", neox=False, aliases=("gptj", "gpt_j", "interleave")),
    RopeStyle("neox", "neox", neox=True, aliases=("gpt_neox", "rotate_half")),
    RopeStyle("mrope", "mrope", neox=True, aliases=("m_rope", "multimodal", "mrope_contiguous", "qwen2_vl"),
              streams=3),
    RopeStyle("mrope_interleaved", "mropei", neox=True, aliases=("interleaved_mrope", "imrope", "qwen3_vl"),
              streams=3, interleaved_streams=True),
)}
ROPE_TABLES: dict[str, RopeTableLayout] = {t.name: t for t in (
    RopeTableLayout("pairs", "pairs", halves=False, header="", describe="(cos, sin) of pair j at columns 2j, 2j+1"),
    RopeTableLayout("halves", "cossin", halves=True, header=" (cos|sin table)",
                    describe="cos of pair j at column j, sin at rope_dim / 2 + j (a cos_sin_cache)"),
)}
