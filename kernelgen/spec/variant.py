"""The frozen, typed description of one kernel variant and its launch configuration."""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field, fields, make_dataclass, replace
from typing import Literal, get_args

from .formats import FORMATS
from .norms import NORMS
from .pages import POOL_SHARES, RECORD_ORDERS, SCALE_ORDERS, SLOT_SOURCES
from .ropes import ROPE_STYLES, ROPE_TABLES, TEMPERATURES
from .launchparams import ID_EXAMPLE, ID_FLAGS, ID_NUMBERS, ID_OPTIONAL, LAUNCH_PARAMS, OPTIONS

NormKind = str  # a name of the norm table (spec/norms.py NORMS)
RopePlace = Literal["head", "tail"]
RopeStyle = str  # a name of spec/ropes.py ROPE_STYLES
TemperatureKind = str  # a name of spec/ropes.py TEMPERATURES
RopeTable = str  # a name of spec/ropes.py ROPE_TABLES: (cos, sin) of pair j at 2j, 2j+1, or cos of all pairs, then sin
Slots = str  # a name of spec/pages.py SLOT_SOURCES: out_loc (a paged cache) or token (a dense output)
KvLayout = str  # a name of spec/pages.py RECORD_ORDERS: [page_size, heads, record] (nhd) or [heads, page_size, record]
NormOrder = Literal["norm_then_rope", "rope_then_norm"]  # rope_then_norm: the norm runs on the rotated row
NormDims = Literal["all", "nope"]  # nope: the norm spans the dims outside the roped block (MLA's kv_a_layernorm)
KvPool = str  # a name of spec/pages.py POOL_SHARES: a cache of its own, or one half (K or V) of [num_pages, 2, page]
ScaleOrderKind = str  # a name of spec/pages.py SCALE_ORDERS: a record's scales back to back, or 4 records' interleaved
Dtype = Literal["bf16", "fp16", "fp32"]
WeightDtype = Literal["fp32", "bf16"]
StoreKind = Literal["fp8_e4m3", "bf16", "fp4_e2m1", "fp8_flashmla", "fp8_vllm", "fp8_vllm_ue8m0", "nvfp4_dsv4",
                    "nvfp4", "fp8_scaled", "fp16", "fp8_v41", "fp8_v41_interleaved", "fp4_v41",
                    "fp4_v41_interleaved", "fp8_scaled_divided", "fp8_ds_mla",
                    "fp8_per_token_head", "int8_per_token_head", "mxfp4", "nvfp4_kv"]

FAMILY = "fused_norm_rope_store"
DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4}
TORCH_DTYPES: dict[str, str] = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


class _LaunchMethods:
    """What a launch configuration says of itself, read off the launch table (Launch below has its fields)."""

    def describe(self) -> str:
        numbers = " ".join(f"{p.name}={getattr(self, p.name)}" for p in ID_NUMBERS)
        return (numbers + "".join(f" {p.name}" for p in ID_FLAGS if getattr(self, p.name))
                + "".join(f" {p.name}={getattr(self, p.name)}" for p in ID_OPTIONAL if getattr(self, p.name)))

    @property
    def id(self) -> str:
        """A short stable name, e.g. 't8.b8.v8' or 't32.b2.v4.pf.pdl' (tuning records use it as a key); an
        optional number follows the flags where it is set ('t8.b8.v8.pdl.mb2')."""
        return (".".join(f"{p.token}{getattr(self, p.name)}" for p in ID_NUMBERS)
                + "".join(f".{p.token}" for p in ID_FLAGS if getattr(self, p.name))
                + "".join(f".{p.token}{getattr(self, p.name)}" for p in ID_OPTIONAL if getattr(self, p.name)))

    @property
    def instance(self) -> Launch:
        """The compiled template instance this launch runs: every launch option (PDL) reset. The host sets
        launch options per launch, so launches that differ only in them are one compiled configuration."""
        return replace(self, **{p.name: p.default for p in OPTIONS})

    @classmethod
    def from_id(cls, text: str) -> Launch:
        parts = text.split(".")
        numbers = {p.name: _id_number(part, p.token) for p, part in zip(ID_NUMBERS, parts)}
        by_token = {p.token: p.name for p in ID_FLAGS}
        rest = parts[len(ID_NUMBERS):]
        flags = {part for part in rest if part in by_token}
        optional = {p.name: n for part in rest if part not in by_token for p in ID_OPTIONAL
                    if (n := _id_number(part, p.token)) is not None and n > 0}
        if len(numbers) < len(ID_NUMBERS) or None in numbers.values() or len(flags) + len(optional) != len(rest):
            raise ValueError(f"'{text}' is not a launch id like {ID_EXAMPLE}")
        return cls(**numbers, **{name: token in flags for token, name in by_token.items()}, **optional)


def _id_number(part: str, token: str) -> int | None:
    """The number of one part of a launch id ('t8' with token 't': 8), None if it is not one."""
    try:
        return int(part[len(token):]) if part.startswith(token) else None
    except ValueError:
        return None


_LAUNCH_DOC = """One launch configuration: how threads map onto tokens, plus launch options. An int left at 0
means "derive a default from the variant" (codegen.launch.resolve). A variant's build may hold several.
Its fields are the launch table's entries, in its order (spec/launchparams.py says what each one is)."""
Launch = make_dataclass("Launch", [(p.name, p.kind, p.default) for p in LAUNCH_PARAMS], bases=(_LaunchMethods,),
                        frozen=True, namespace={"__module__": __name__, "__doc__": _LAUNCH_DOC})


@dataclass(frozen=True)
class Variant:
    name: str
    head_dim: int = 128
    heads: int = 1  # rows of head_dim per token (e.g. a layer's K heads), each normed, rotated and stored on its own
    # elements from one head of x to the next (0: head_dim, heads packed): 2 x head_dim reads the first half of each
    # head of a gated projection (Qwen3-Next's [q | gate] per head), leaving the gate in place
    x_head_stride: int = 0
    rope_dim: int = 64
    rope_place: RopePlace = "tail"
    rope_style: RopeStyle = "interleaved"
    rope_table: RopeTable = "pairs"  # freqs rows: (cos, sin) of pair j at 2j, 2j+1; or cos of all pairs, then sin
    # M-RoPE (a rope_style of 3 position streams): pairs per stream (temporal, height, width), the config's
    # mrope_section; () for every other style
    rope_sections: tuple[int, ...] = ()
    temperature: TemperatureKind = "none"  # a position-dependent factor on the row (spec/ropes.py TEMPERATURES)
    norm: NormKind = "rms"
    norm_bias: bool = False
    norm_order: NormOrder = "norm_then_rope"
    # "nope": the norm's statistics, weight and bias span only the dims outside the roped block (DeepSeek MLA's
    # kv_a_layernorm over the 512 latent dims of [kv_c | k_pe]); the roped dims are rotated, never normed
    norm_dims: NormDims = "all"
    hadamard: bool = False
    input_dtype: Dtype = "bf16"
    weight_dtype: WeightDtype = "fp32"
    store: StoreKind = "bf16"
    page_size: int = 64
    round_through_bf16: bool = False
    # the normed row rounded to bf16 before RoPE (the unfused norm kernel's bf16 output, which SGLang's V4.1 writers
    # rotate): with round_through_bf16, the row quantized is bf16(RoPE(bf16(norm(x))))
    round_norm_bf16: bool = False
    slots: Slots = "out_loc"  # "token": token t's heads go to row t of a dense [N, heads * record] output (no out_loc)
    kv_layout: KvLayout = "nhd"  # with several heads: a page is [page_size, heads, record] or, "hnd", [heads, page_size, record]
    # "joint": the cache is one half of a joint K/V pool [num_pages, 2, page] (pool[:, 0] or pool[:, 1], FlashInfer's
    # single paged_kv_cache tensor): page p starts 2 * page_bytes after page p - 1
    kv_pool: KvPool = "separate"
    # "token4": the scales of 4 consecutive records of a page interleaved byte by byte (trtllm-gen's NVFP4 V scales)
    scale_order: ScaleOrderKind = "linear"
    launch: Launch = field(default_factory=Launch)
    spec_name: str = field(default="", compare=False)
    origin: str = field(default="", compare=False)  # file:line:col of its definition
    origins: tuple[tuple[str, str], ...] = field(default=(), compare=False)  # axis -> file:line:col of its value
    # Launch-table fields whose other values rest on a promise the variant's spec made (LaunchParam.promise): not
    # part of the math (nor of the content key), they say which tuning-record choices may run it
    promises: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        # a list axis read back from JSON (a manifest, a record) is the same value as the spec's tuple
        if not isinstance(self.rope_sections, tuple):
            object.__setattr__(self, "rope_sections", tuple(self.rope_sections))

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.input_dtype]

    @property
    def hadamard_scale(self) -> float:
        """1/sqrt(head_dim) rounded to float32: the orthonormal Walsh-Hadamard factor."""
        return struct.unpack("f", struct.pack("f", 1.0 / math.sqrt(self.head_dim)))[0]

    @property
    def norm_width(self) -> int:
        """Dims the norm spans (its weight's length): the row, or the dims outside the roped block."""
        return self.head_dim - self.rope_dim if self.norm_dims == "nope" else self.head_dim

    @property
    def x_width(self) -> int:
        """Columns of x per token: heads of x_head_stride elements (head_dim where it is 0)."""
        return self.heads * (self.x_head_stride or self.head_dim)

    @property
    def reads_positions(self) -> bool:
        """The row's math reads its token's position: RoPE, or a position-dependent temperature."""
        return self.rope_dim > 0 or TEMPERATURES[self.temperature].on

    @property
    def position_streams(self) -> int:
        """Rows of positions the kernel reads per token: M-RoPE's three ([3, N]) where it rotates, else one ([N]); a
        temperature alone reads one position per token whatever the rope_style (the device code reads the streams
        only where kRopeDim > 0)."""
        return ROPE_STYLES[self.rope_style].streams if self.rope_dim else 1

    @property
    def rope_begin(self) -> int:
        return 0 if self.rope_place == "head" else self.head_dim - self.rope_dim

    @property
    def row_variant(self) -> Variant:
        """The one-head variant whose rows and slots are this variant's (token, head) pairs: head h of the
        token in slot s is row s * heads + h of a pool of page_size * heads rows per page (NHD for a
        one-record-per-token format). Layout, reference and oracle reduce a multi-head variant to it."""
        return replace(self, heads=1, page_size=self.page_size * self.heads)

    def with_launch(self, launch: Launch) -> Variant:
        return replace(self, launch=launch)

    def math_fields(self) -> dict[str, object]:
        """The math and the layout: the spec axes, i.e. every field but the name, the launch configuration
        and provenance (tests/test_spec.py holds AXES to that)."""
        return {axis: getattr(self, axis) for axis in AXES}

    def content_key(self) -> str:
        """Hash of math_fields() that differ from their defaults: what a tuning record or an export is keyed by.
        One rule for every axis, so a new axis at its default leaves every key as it was."""
        import hashlib
        import json

        fields = {k: v for k, v in self.math_fields().items() if _AXIS_DEFAULTS[k] != v}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:24]


# Axes a spec may set, with the closed set of values where there is one.
AXES: dict[str, tuple[type, tuple[object, ...] | None]] = {
    "head_dim": (int, None),
    "heads": (int, None),
    "x_head_stride": (int, None),
    "rope_dim": (int, None),
    "rope_place": (str, get_args(RopePlace)),
    "rope_style": (str, tuple(ROPE_STYLES)),
    "rope_table": (str, tuple(ROPE_TABLES)),
    "rope_sections": (tuple, None),
    "temperature": (str, tuple(TEMPERATURES)),
    "norm": (str, tuple(NORMS)),
    "norm_bias": (bool, None),
    "norm_order": (str, get_args(NormOrder)),
    "norm_dims": (str, get_args(NormDims)),
    "hadamard": (bool, None),
    "input_dtype": (str, get_args(Dtype)),
    "weight_dtype": (str, get_args(WeightDtype)),
    "store": (str, get_args(StoreKind)),
    "page_size": (int, None),
    "round_through_bf16": (bool, None),
    "round_norm_bf16": (bool, None),
    "slots": (str, tuple(SLOT_SOURCES)),
    "kv_layout": (str, tuple(RECORD_ORDERS)),
    "kv_pool": (str, tuple(POOL_SHARES)),
    "scale_order": (str, tuple(SCALE_ORDERS)),
}
# Each axis's default (Variant's field default): an axis at it does not enter content_key().
_AXIS_DEFAULTS: dict[str, object] = {f.name: f.default for f in fields(Variant) if f.name in AXES}
LAUNCH_KEYS: tuple[str, ...] = tuple(p.name for p in LAUNCH_PARAMS)  # a spec's `launch:` keys
LAUNCH_FLAGS: tuple[str, ...] = tuple(p.name for p in LAUNCH_PARAMS if p.kind is bool)  # the boolean ones



def short_name(axis: str, value: object) -> str:
    """The readable fragment an axis value contributes to a generated variant name."""
    if axis == "store":
        return FORMATS[str(value)].short
    if axis == "page_size":
        return f"p{value}"
    if axis == "head_dim":
        return f"d{value}"
    if axis == "heads":
        return f"h{value}"
    if axis == "x_head_stride":
        return f"xs{value}"
    if axis == "rope_dim":
        return f"r{value}" if value else "norope"
    if axis == "rope_style":
        return ROPE_STYLES[str(value)].short
    if axis == "rope_table":
        return ROPE_TABLES[str(value)].short
    if axis == "temperature":
        return TEMPERATURES[str(value)].short
    if axis == "rope_sections":
        return "sec" + "x".join(map(str, value)) if value else "nosec"  # type: ignore[union-attr]
    if axis == "norm":
        return NORMS[str(value)].short
    if axis == "slots":
        return SLOT_SOURCES[str(value)].short
    if axis == "kv_layout":
        return RECORD_ORDERS[str(value)].short
    if axis == "kv_pool":
        return POOL_SHARES[str(value)].short
    if axis == "scale_order":
        return SCALE_ORDERS[str(value)].short
    if axis == "norm_dims":
        return "normnope" if value == "nope" else "normall"
    if axis == "norm_order":
        return "ropefirst" if value == "rope_then_norm" else "normfirst"
    if axis in ("input_dtype", "weight_dtype"):
        return f"{'in' if axis == 'input_dtype' else 'w'}{value}"
    if isinstance(value, bool):
        tag = {"hadamard": "had", "norm_bias": "bias", "round_through_bf16": "bfround",
               "round_norm_bf16": "normbf"}[axis]
        return tag if value else f"no{tag}"
    return str(value)
