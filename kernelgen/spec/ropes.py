"""The RoPE tables: one declarative entry per value of the `rope_style` axis (which dims a rotation pairs) and
of the `rope_table` axis (where a freqs row keeps each pair's cos and sin).

Every stage reads these axes from here: the spec language (values and other spellings, e.g. `rotate_half`),
generated variant names, the guards, the renderer (the device flags kNeox and kRopeHalves), the PyTorch
reference, the float64 oracle and the benchmark's freqs tables. Partial rotary is the `rope_dim` and
`rope_place` axes (the rope may cover a head's first or last rope_dim dims). Adding a value is an entry here
plus its device code (templates/kernelgen/rope.cuh); tests/test_axis_tables.py holds every stage to the
tables. A kind with several position streams (multimodal RoPE's sections) would be a RopeStyle whose
`streams` is above 1: none ships yet (its arguments and device code are its own work).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RopeStyle:
    """Which dims a rotation pairs: dim j of the rope with j + 1 (interleaved, GPT-J) or with j + rope_dim/2
    (neox, rotate-half)."""

    name: str
    short: str
    neox: bool  # the device flag kNeox: partners half the rope apart (else neighbours)
    aliases: tuple[str, ...] = ()
    streams: int = 1  # position streams a token's rotation reads (multimodal sections would take several)

    def pairs(self, rope_dim: int) -> tuple[slice, slice]:
        """(first, second) element of every rotated pair, as slices over the rope's dims; pair j is rotated by
        the angle of frequency j."""
        if self.neox:
            return slice(0, rope_dim // 2), slice(rope_dim // 2, rope_dim)
        return slice(0, rope_dim, 2), slice(1, rope_dim, 2)


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


ROPE_STYLES: dict[str, RopeStyle] = {s.name: s for s in (
    RopeStyle("interleaved", "ilv", neox=False, aliases=("gptj", "gpt_j", "interleave")),
    RopeStyle("neox", "neox", neox=True, aliases=("gpt_neox", "rotate_half")),
)}
ROPE_TABLES: dict[str, RopeTableLayout] = {t.name: t for t in (
    RopeTableLayout("pairs", "pairs", halves=False, header="", describe="(cos, sin) of pair j at columns 2j, 2j+1"),
    RopeTableLayout("halves", "cossin", halves=True, header=" (cos|sin table)",
                    describe="cos of pair j at column j, sin at rope_dim / 2 + j (a cos_sin_cache)"),
)}
