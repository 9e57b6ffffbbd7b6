"""The store-format table: one declarative entry per cache format of the spec language.

An entry says what a token's row becomes (its parts: which dims, which element encoding, which
scale), where a page puts each field (its arrangement), the device code's enum and the guards that
only this format needs. Every stage reads formats from here: the layout arithmetic
(layout/layout.py), the PyTorch codec and the float64 oracle (by the quantization rule of each
part, so two formats that share a rule share its code), the renderer, the launch defaults and the
guard table. Adding a format is an entry here plus, where it brings a new rule, that rule's device
code and its codec and oracle functions; a pure test holds the table to the `StoreKind` literal.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

# variant.py reads this table (short names), so the table does not import it: a Variant, and a name of
# the StoreKind literal (a pure test holds the table's names to that literal).
Variant = Any
StoreKind = str

Dims = Literal["all", "nope", "rope"]  # the whole row, the dims before the roped block, the roped block
ValueEncoding = Literal["bf16", "fp16", "e4m3", "e2m1x2", "i8"]
ScaleKind = Literal["none", "fp32", "fp32_divided", "fp32_pow2", "fp32_pow2_floor", "fp32_scale_floor", "ue8m0",
                    "ue8m0_scale_floor", "ue8m0_ocp", "e4m3", "e4m3_divided"]

E4M3_MAX = 448.0
E2M1_MAX = 6.0
I8_MAX = 127.0
QMAX: dict[str, float] = {"e4m3": E4M3_MAX, "e2m1x2": E2M1_MAX, "i8": I8_MAX}
VALUE_BYTES_X2: dict[str, int] = {"bf16": 4, "fp16": 4, "e4m3": 2, "e2m1x2": 1, "i8": 2}  # bytes per two dims
# How each scale kind is stored: the field's encoding and bytes per scale.
SCALE_STORAGE: dict[str, tuple[str, int]] = {"fp32": ("fp32", 4), "fp32_divided": ("fp32", 4),
                                             "fp32_pow2": ("fp32", 4), "fp32_pow2_floor": ("fp32", 4),
                                             "fp32_scale_floor": ("fp32", 4),
                                             "ue8m0": ("ue8m0", 1),
                                             "ue8m0_scale_floor": ("ue8m0", 1), "ue8m0_ocp": ("ue8m0", 1),
                                             "e4m3": ("e4m3", 1),
                                             "e4m3_divided": ("e4m3", 1)}
# ceil(log2(1e-4)): the least exponent of a "ue8m0_scale_floor" scale (2^-13 >= 1e-4 > 2^-14)
SCALE_FLOOR_EXP = -13
TOKEN_HEAD_SCALE_FLOOR = 1e-6  # the least "fp32_scale_floor" scale (vLLM's per-token-head modes), as float32
E4M3_MIN_SCALE = 2.0 ** -9  # the least e4m3 subnormal: an "e4m3_divided" scale is clamped to [2^-9, 448]


@dataclass(frozen=True)
class Part:
    """Dims of a row stored in one element encoding, with the scale that quantizes them.

    scale "fp32": one float32 scale max(amax, 1e-4) / qmax per token, codes of y * RN(1 / scale).
    scale "fp32_divided" (vLLM's indexer cache): the same scale, codes of y / scale (a correctly
    rounded divide); "fp32_pow2" (vLLM's ue8m0 option): that scale rounded up to a power of two as
    exp2f(ceilf(log2f(scale))), codes of y / scale (exact).
    scale "fp32_pow2_floor" (vLLM's fp8_ds_mla tiles): one float32 scale per `group` dims,
    exp2f(ceilf(log2f(max(RN(amax / qmax), 1e-4)))) as vLLM evaluates it (the floor on the scale), codes of y / scale
    (exact).
    scale "fp32_scale_floor" (vLLM's per-token-head modes): one float32 scale max(RN(amax / qmax), 1e-6) per
    token, codes of y * RN(1 / scale); for "i8" codes that product rounded half away from zero as vLLM does
    (RN(q + 0.5) for q >= 0, else RN(q - 0.5), then truncated), clamped to [-128, 127].
    scale "ue8m0": one power-of-two scale 2^ceil(log2(max(amax, 1e-4) / qmax)) per `group` dims,
    stored as the byte e + 127, codes of y / 2^e.
    scale "ue8m0_scale_floor" (SGLang's V4.1 records): the same, with the 1e-4 floor on the scale instead of
    amax: 2^ceil(log2(max(amax / qmax, 1e-4))), i.e. an exponent of at least -13.
    scale "ue8m0_ocp" (the OCP MX rule, SGLang's MXFP4 KV): one power-of-two scale 2^e per `group` dims with
    e = floor(log2(amax)) - 2 read off amax's float32 exponent bits (-127 for a zero or subnormal amax; no floor), stored
    as the byte e + 127, codes of y / 2^e rounded to nearest even, saturating at 6 (amax / 2^e lies in [4, 8)).
    scale "e4m3" (NVFP4): one e4m3 scale s = RN_sat(amax * RN(1/6)) per `group` dims, codes of
    y * RN(1 / s) (0 where s is 0) rounded to nearest even, saturating at 6.
    scale "e4m3_divided" (SGLang's V4.1 fp4 record): s = RN_e4m3(clamp(RN(amax / 6), 2^-9, 448)) per `group`
    dims (never 0), codes of RN(y / s) rounded to nearest even, saturating at 6 (a negative value that
    rounds to zero keeps its sign: code 8).
    The rule of a part is (encoding, scale): the codec and the oracle implement each rule once."""

    field: str
    dims: Dims
    encoding: ValueEncoding
    what: str  # the field's description; {begin} and {last} are its first and last dim
    scale: ScaleKind = "none"
    group: int = 0  # dims per scale ("ue8m0"); 0 for one scale per token
    scale_field: str = ""
    scale_what: str = ""  # {group} is the group size

    @property
    def rule(self) -> tuple[str, str]:
        return self.encoding, self.scale

    def value_bytes(self, dims: int) -> int:
        return dims * VALUE_BYTES_X2[self.encoding] // 2

    def scale_count(self, dims: int) -> int:
        return 1 if self.group == 0 else max(dims // self.group, 1)

    @property
    def scale_encoding(self) -> str:
        return SCALE_STORAGE[self.scale][0]

    def scale_bytes(self, dims: int) -> int:
        return SCALE_STORAGE[self.scale][1] * self.scale_count(dims) if self.scale != "none" else 0


@dataclass(frozen=True)
class Region:
    """A run of a page holding, for each of the page's tokens in order, one record of these fields
    (back to back, in this order), padded to a multiple of `align` bytes."""

    fields: tuple[str, ...]
    align: int = 1


@dataclass(frozen=True)
class Arrangement:
    """Where a page puts each field: its regions one after the other (so all tokens' values, then
    all tokens' scales, as the DeepSeek layouts do; or one region: one record per token)."""

    name: str
    regions: tuple[Region, ...]
    page_multiple_of: int = -1  # >= 0: page bytes round up to a multiple of that region's record


@dataclass(frozen=True)
class Guard:
    """One unsupported combination: a predicate, the same condition over the generated Cfg constants,
    and one message (identical in the Python precheck and the static_assert). The guard table
    (codegen/guardtable.py) holds the common guards and appends each format's own."""

    id: str
    holds: Callable[[Variant], bool]  # evaluated on a variant whose launch is resolved
    cpp: str
    message: str
    launch: bool = False  # constrains the launch configuration (a tuning-space rule), not the variant
    axes: tuple[str, ...] = ()  # the spec keys it reads, most likely culprit first


@dataclass(frozen=True)
class StoreFormat:
    name: StoreKind
    short: str  # its fragment of generated variant names
    enum: str  # kernelgen::Store::<enum> in the device code
    parts: tuple[Part, ...]
    arrangement: Arrangement
    per_token_doc: str  # docs/layouts.md's summary table
    page_doc: str
    guards: tuple[Guard, ...] = ()
    aliases: tuple[str, ...] = ()  # other spellings, for the parser's "did you mean" (lower case, '_' for '-')
    # A per-tensor scale g, passed at every call as a float32 device tensor [1] (the `scale` argument, so a
    # CUDA graph keeps it live): the row is multiplied by g (one float32 product per value) before its
    # parts are encoded, and decoding divides by g.
    global_scale: bool = False
    # The row is divided by the scale passed (vLLM's scaled_convert: codes of RN(v / s)), and decoding multiplies.
    scale_divides: bool = False
    # The scale passed is a dequantization scale s (vLLM's and FlashInfer's k_scale / v_scale): the row is
    # multiplied by g = RN(1 / s), and decoding multiplies by s (divides by g).
    scale_reciprocal: bool = False

    @property
    def scale_words(self) -> str:
        """What the per-tensor scale passed with each call is, and how the codes use it."""
        if self.scale_divides:
            return "the dequantization scale s (k_scale; codes of RN(v / s))"
        if self.scale_reciprocal:
            return "the dequantization scale s (k_scale / v_scale; codes of v * RN(1 / s))"
        return "the global scale g (codes of v * g)"

    @property
    def cpp_enum(self) -> str:
        return f"kernelgen::Store::{self.enum}"

    @property
    def quantized(self) -> bool:
        """Some part is stored coarser than a 16-bit float (so rounding through bf16 first can change it)."""
        return any(p.encoding not in ("bf16", "fp16") for p in self.parts)

    @property
    def grouped(self) -> Part | None:
        """The part whose scale spans groups of dims (the device code's kScaleGroup), if any."""
        return next((p for p in self.parts if p.group), None)

    @property
    def e2m1_ties_even(self) -> bool:
        """The quantized part's codes are e2m1 rounded to nearest even, saturating at 6 (NVFP4, V4.1's fp4, MXFP4):
        what cvt.rn.satfinite.e2m1x2.f32 computes. The indexer's fp4_e2m1 rounds its ties down."""
        return self.parts[0].rule in E2M1_TIES_EVEN_RULES

    @property
    def load_group(self) -> int:
        """Dims a scale group spans that one load step must hold (1: no grouped scale)."""
        return max([p.group for p in self.parts if p.group], default=1)


# The part rules whose e2m1 codes round to nearest even (the encoders call e2m1_pack<true>, or the hardware's
# cvt.rn.satfinite.e2m1x2.f32 with launch.hw_convert).
E2M1_TIES_EVEN_RULES = frozenset({("e2m1x2", "e4m3"), ("e2m1x2", "e4m3_divided"), ("e2m1x2", "ue8m0_ocp")})

# The device encoder of each part rule (params.cuh Encoder): a format's kernel runs the encoder of its first part's
# rule (its other parts are bf16, placed by the encoder), so a format whose rules are known needs no device code.
ENCODERS: dict[tuple[str, str], str] = {
    ("bf16", "none"): "kHalf", ("fp16", "none"): "kHalf",
    ("e4m3", "fp32"): "kE4m3Token", ("e4m3", "fp32_divided"): "kE4m3Token", ("e4m3", "fp32_pow2"): "kE4m3Token",
    ("e2m1x2", "ue8m0"): "kE2m1Ue8m0", ("e2m1x2", "ue8m0_ocp"): "kE2m1Ue8m0",
    ("e4m3", "ue8m0"): "kE4m3Groups", ("e4m3", "ue8m0_scale_floor"): "kE4m3Groups",
    ("e4m3", "fp32_pow2_floor"): "kE4m3Groups",
    ("e2m1x2", "e4m3"): "kE2m1E4m3", ("e2m1x2", "e4m3_divided"): "kE2m1E4m3",
    ("e4m3", "none"): "kE4m3",
    ("e4m3", "fp32_scale_floor"): "kE4m3TokenHead", ("i8", "fp32_scale_floor"): "kI8TokenHead",
}
ENCODER_ORDER = ("kHalf", "kE4m3Token", "kE2m1Ue8m0", "kE4m3Groups", "kE2m1E4m3", "kE4m3", "kE4m3TokenHead",
                 "kI8TokenHead")  # params.cuh's order
NO_MIN_EXP = -127  # params.cuh kNoMinExp: the exponent of a UE8M0 scale is not floored


def device_constants(fmt: StoreFormat, v: Variant) -> dict[str, object]:
    """What the device encoder reads of the format: its encoder, the quantized dims (the first part's; the rest are
    bf16), the dims per scale, the least UE8M0 exponent, whether codes divide by the scale and whether the UE8M0
    exponent follows the OCP MX rule (floor(log2(amax)) - 2, codes rounded to nearest even)."""
    first = fmt.parts[0]
    begin, end = part_dims(first, v)
    if begin != 0:  # the encoders quantize dims [0, kQuantDims): a format whose first part starts later needs one
        raise ValueError(f"store format {fmt.name}: its first part ({first.field}) must start at dim 0, got {begin}")
    return {"encoder": ENCODERS[first.rule], "quant_dims": end - begin, "scale_group": first.group or 1,
            "scale_min_exp": SCALE_FLOOR_EXP if first.scale == "ue8m0_scale_floor" else NO_MIN_EXP,
            "scale_divided": first.scale == "e4m3_divided",
            "scale_ocp": first.scale == "ue8m0_ocp",
            "scale_fp32": first.scale != "none" and first.scale_encoding == "fp32",
            "global_op": GLOBAL_OPS[(fmt.global_scale, fmt.scale_reciprocal, fmt.scale_divides)]}


# How the kernel applies a format's per-tensor scale s to the row (params.cuh GlobalScale): not at all, times g = s,
# times RN(1 / s) (a dequantization scale), or divided by s.
GLOBAL_OPS: dict[tuple[bool, bool, bool], str] = {(False, False, False): "kNone", (True, False, False): "kTimes",
                                                   (True, True, False): "kTimesReciprocal", (True, False, True): "kDivide"}


def _not(fmt: str) -> str:
    return f"kStore != kernelgen::Store::{fmt}"


def group_span_guard(guard_id: str, name: str, enum: str, group: int) -> Guard:
    """A grouped scale's dims must lie within one load step of the token's threads."""
    return Guard(guard_id, lambda v: v.store != name or v.launch.threads_per_token * v.launch.vec >= group,
                       f"{_not(enum)} || kThreadsPerToken * kVec >= {group}",
                       f"{name} scales {group}-dim groups, which must lie within one load step: "
                       f"make launch.threads_per_token x launch.vec at least {group}", launch=True)


def dsv4_mainkv_guards(prefix: str, name: str, enum: str, group: int) -> tuple[Guard, ...]:
    """A DeepSeek-V4 main-KV layout: head_dim 512 with the 64 roped dims kept apart at the tail. Its
    group-span guard is only needed where values_per_thread does not imply it (groups above 16)."""
    span = (group_span_guard(f"{prefix}_group_span", name, enum, group),) if group > 16 else ()
    return (
        Guard(f"{prefix}_shape", lambda v: v.store != name or (v.head_dim, v.rope_dim, v.rope_place) == (512, 64, "tail"),
              f"{_not(enum)} || (kHeadDim == 512 && kRopeDim == 64 && kRopeBegin == 448)",
              f"{name} is the main-KV layout of head_dim 512 with rope_dim 64 at the tail; "
              "use store fp8_e4m3 or bf16 for other shapes", axes=("store", "head_dim", "rope_dim", "rope_place")),
        Guard(f"{prefix}_no_hadamard", lambda v: v.store != name or not v.hadamard, f"{_not(enum)} || !kHadamard",
              f"{name} keeps the roped dims in bf16, which a Hadamard over all dims would mix; turn hadamard off",
              axes=("hadamard", "store")),
    ) + span


def dsv41_guards(prefix: str, name: str, enum: str, group: int) -> tuple[Guard, ...]:
    """A V4.1 record holds 512 values; its group-span guard only where values_per_thread does not imply it."""
    shape = Guard(f"{prefix}_shape", lambda v: v.store != name or v.head_dim == 512, f"{_not(enum)} || kHeadDim == 512",
                  f"{name} is DeepSeek-V4.1's main-KV record of 512 values; use head_dim 512, or store fp8_e4m3 or "
                  "bf16 for other shapes", axes=("store", "head_dim"))
    return (shape,) + ((group_span_guard(f"{prefix}_group_span", name, enum, group),) if group > 16 else ())


def dsv41_formats() -> tuple[StoreFormat, ...]:
    """SGLang's DeepSeek-V4.1 main-KV records (kv_layout.py KVLayout V41, V41_FP4, V41_NEW, V41_FP4_NEW): every
    one of the 512 dims quantized (the roped ones too), each in two arrangements of a page: all data rows, then
    all scale rows, the page padded to a multiple of the data row (V41, V41_FP4); or each token's scales right
    after its data, unpadded (the _NEW layouts). UNIFORM_FP8 is fp8_scaled (512 e4m3 codes, an external scale)."""
    kinds = (("fp8_v41", "fp8v41", "kFp8V41", "v41", 528,
              Part("values", "all", "e4m3", "e4m3 codes of dims {begin}..{last}", "ue8m0_scale_floor", V41_GROUP,
                   "scales", "UE8M0 scales 2^ceil(log2(max(amax / 448, 1e-4))), one per {group} dims"),
              f"e4m3 codes of the 512 dims (the roped ones too), then 16 UE8M0 scales, one per {V41_GROUP} dims"),
             ("fp4_v41", "fp4v41", "kFp4V41", "v41_fp4", 288,
              Part("values", "all", "e2m1x2", "e2m1 pairs of dims {begin}..{last} (low nibble = even dim)",
                   "e4m3_divided", V41_FP4_GROUP, "scales", "e4m3 scales max(amax / 6, 2^-9), one per {group} dims"),
              f"e2m1 pairs of the 512 dims (256 B, low nibble = even dim), then 32 e4m3 scales, one per "
              f"{V41_FP4_GROUP} dims"))
    out: list[StoreFormat] = []
    for name, short, enum, sglang, record, part, what in kinds:
        data = part.value_bytes(512)
        split = Arrangement(f"{data}-B data rows, then {record - data}-B scale rows",
                            (Region(("values",)), Region(("scales",))), page_multiple_of=0)
        out.append(StoreFormat(name, short, enum, (part,), split,
                               f"{record} B (SGLang's {sglang.upper()}): {what}; a page's data rows, then its scale rows",
                               f"page_size x {record} rounded up to a multiple of {data}",
                               dsv41_guards(short, name, enum, part.group),
                               aliases=(sglang, f"dsv41_{sglang.removeprefix('v41').strip('_') or 'fp8'}")))
        out.append(StoreFormat(f"{name}_interleaved", f"{short}i", f"{enum}Interleaved", (part,),
                               Arrangement(f"{record}-B records", (Region(("values", "scales")),)),
                               f"{record} B (SGLang's {sglang.upper()}_NEW): the {name} bytes, each token's scales "
                               "right after its data", f"page_size x {record}, unpadded",
                               dsv41_guards(f"{short}i", f"{name}_interleaved", f"{enum}Interleaved", part.group),
                               aliases=(f"{sglang}_new", f"{sglang}_interleaved")))
    return tuple(out)


FP4_GROUP = 32  # dims per UE8M0 scale on the fp4 path
V41_GROUP = 32  # dims per UE8M0 scale of the V4.1 fp8 record
V41_FP4_GROUP = 16  # dims per e4m3 scale of the V4.1 fp4 record
DS_MLA_GROUP = 128  # dims per fp32 scale of vLLM's fp8_ds_mla record
NVFP4_GROUP = 16  # dims per e4m3 scale on the NVFP4 paths
MX_GROUP = 32  # dims per UE8M0 scale of an OCP MX block (MXFP4)
FLASHMLA_GROUP = 64  # dims per UE8M0 scale on the main-KV fp8 path
SPLIT = Arrangement("values, then scales", (Region(("values",)), Region(("scale", "scales"))))
RECORD = Arrangement("one record per token", (Region(("values",)),))


def token_head_formats() -> tuple[StoreFormat, ...]:
    """vLLM's per-token-head modes (kv_cache_dtype fp8_per_token_head, int8_per_token_head): each (slot, head) record
    holds the head's codes, then its float32 scale (triton_attn.py's [K | K scale | V | V scale] cell, the pad after
    each half is one float32); in vLLM's packed pool (kv_pool: packed) K's record, then V's."""
    out = []
    for name, short, enum, encoding, what, aliases in (
            ("fp8_per_token_head", "fp8pth", "kFp8PerTokenHead", "e4m3", "e4m3 codes of v * RN(1 / scale)",
             ("fp8_pth", "fp8_token_head", "fp8_per_head")),
            ("int8_per_token_head", "i8pth", "kInt8PerTokenHead", "i8",
             "int8 codes of v * RN(1 / scale), rounded half away from zero", ("int8_pth", "int8", "i8",
                                                                             "int8_token_head", "int8_per_head"))):
        qmax = int(QMAX[encoding])
        out.append(StoreFormat(
            name, short, enum,
            (Part("values", "all", encoding, what, "fp32_scale_floor", 0, "scale",
                  f"fp32 scale max(amax / {qmax}, 1e-6)"),),
            Arrangement("one record per (slot, head): codes, then the scale", (Region(("values", "scale")),)),
            f"head_dim {what.split(' ')[0]} codes of v * RN(1 / scale), then the head's fp32 scale = "
            f"max(amax / {qmax}, 1e-6) (vLLM's {name}: head_dim + 4 B)",
            "page_size x (head_dim + 4)", aliases=aliases))
    return tuple(out)


def ds_mla_guards() -> tuple[Guard, ...]:
    """vLLM's fp8_ds_mla: the MLA shape (which with the launch table's guards leaves only launches whose load steps
    tile a 128-dim scale group within one warp: the encoder asserts it), no Hadamard (implied: 576 is no power of 2)."""
    name, enum = "fp8_ds_mla", "kFp8DsMla"
    return (
        Guard("fp8dsmla_shape", lambda v: v.store != name or (v.head_dim, v.rope_dim, v.rope_place) == (576, 64, "tail"),
              f"{_not(enum)} || (kHeadDim == 576 && kRopeDim == 64 && kRopeBegin == 512)",
              f"{name} is the MLA record of 512 latent dims and 64 roped dims at the tail; use head_dim 576, "
              "rope_dim 64, rope_place tail", axes=("store", "head_dim", "rope_dim", "rope_place")),
    )


FORMATS: dict[str, StoreFormat] = {f.name: f for f in (
    StoreFormat("bf16", "bf16", "kBf16",
                (Part("values", "all", "bf16", "bf16 values"),),
                RECORD,
                "head_dim bf16 values (2 x head_dim B)", "page_size x 2 x head_dim", aliases=("bfloat16",)),
    StoreFormat("fp8_e4m3", "fp8", "kFp8E4m3",
                (Part("values", "all", "e4m3", "e4m3 codes", "fp32", 0, "scale", "fp32 scale (amax/448)"),),
                SPLIT,
                "head_dim e4m3 codes, then (after all the page's codes) one fp32 scale = max(amax, 1e-4) / 448",
                "page_size x (head_dim + 4)",
                aliases=("fp8", "e4m3", "fp8e4m3", "float8_e4m3fn", "float8_e4m3")),
    StoreFormat("fp4_e2m1", "fp4", "kFp4E2m1",
                (Part("values", "all", "e2m1x2", "e2m1 pairs (low nibble = even dim)", "ue8m0", FP4_GROUP,
                      "scales", "UE8M0 scales, one per {group} dims"),),
                SPLIT,
                f"head_dim / 2 bytes of e2m1 pairs (low nibble = even dim), then one UE8M0 scale per {FP4_GROUP} dims",
                f"page_size x (head_dim / 2 + head_dim / {FP4_GROUP})",
                guards=(group_span_guard("fp4_group_span", "fp4_e2m1", "kFp4E2m1", FP4_GROUP),),
                aliases=("fp4", "e2m1", "fp4e2m1", "float4_e2m1fn_x2")),
    StoreFormat("fp8_flashmla", "fp8mla", "kFp8FlashMla",
                (Part("nope", "nope", "e4m3", "e4m3 codes of dims {begin}..{last}", "ue8m0", FLASHMLA_GROUP,
                      "scales", "UE8M0 scales, one per {group} nope dims"),
                 Part("rope", "rope", "bf16", "bf16 roped dims {begin}..{last}")),
                Arrangement("576-B slots, then scales", (Region(("nope", "rope")), Region(("scales",), align=8)),
                            page_multiple_of=0),
                "a 576-B slot: e4m3 codes of the 448 nope dims, then the 64 roped dims as bf16; then one UE8M0 "
                f"scale per {FLASHMLA_GROUP} nope dims, padded to 8 B",
                "page_size x 584 rounded up to a multiple of 576",
                guards=dsv4_mainkv_guards("flashmla", "fp8_flashmla", "kFp8FlashMla", FLASHMLA_GROUP),
                aliases=("fp8mla", "flashmla")),
    StoreFormat("fp8_vllm", "fp8vllm", "kFp8Vllm",
                (Part("values", "all", "e4m3", "e4m3 codes of v / scale", "fp32_divided", 0, "scale",
                      "fp32 scale (amax/448)"),),
                SPLIT,
                "as fp8_e4m3 (vLLM's [num_blocks, block_size, head_dim + 4] indexer cache); codes of v / scale",
                "page_size x (head_dim + 4)", aliases=("vllm_fp8", "vllm")),
    StoreFormat("fp8_vllm_ue8m0", "fp8vllmue8m0", "kFp8VllmUe8m0",
                (Part("values", "all", "e4m3", "e4m3 codes of v / scale", "fp32_pow2", 0, "scale",
                      "fp32 scale 2^ceil(log2(amax/448))"),),
                SPLIT,
                "as fp8_vllm with vLLM's ue8m0 option: the fp32 scale is exp2f(ceilf(log2f(amax/448)))",
                "page_size x (head_dim + 4)", aliases=("ue8m0", "vllm_ue8m0", "fp8_ue8m0")),
    StoreFormat("nvfp4_dsv4", "nvfp4", "kNvfp4Dsv4",
                (Part("nope", "nope", "e2m1x2", "e2m1 pairs of dims {begin}..{last} (low nibble = even dim)", "e4m3",
                      NVFP4_GROUP, "scales", "e4m3 scales (amax/6), one per {group} nope dims"),
                 Part("rope", "rope", "bf16", "bf16 roped dims {begin}..{last}")),
                Arrangement("352-B records, then 32-B scale records",
                            (Region(("nope", "rope")), Region(("scales",), align=32))),
                "352 B: e2m1 pairs of the 448 nope dims (224 B), then the 64 roped dims as bf16 (128 B); then 32 B: "
                f"one e4m3 scale per {NVFP4_GROUP} nope dims (28 B, 4 B never written)",
                "page_size x 384 (FlashInfer's DeepSeek-V4 NVFP4 record)",
                guards=dsv4_mainkv_guards("nvfp4_dsv4", "nvfp4_dsv4", "kNvfp4Dsv4", NVFP4_GROUP),
                aliases=("flashinfer_nvfp4",)),
    StoreFormat("nvfp4", "nvfp4g", "kNvfp4",
                (Part("values", "all", "e2m1x2", "e2m1 pairs of v * g (low nibble = even dim)", "e4m3", NVFP4_GROUP,
                      "scales", "e4m3 scales (amax of v * g / 6), one per {group} dims"),),
                SPLIT,
                f"head_dim / 2 bytes of e2m1 pairs of v * g (low nibble = even dim), then one e4m3 scale per "
                f"{NVFP4_GROUP} dims; g is the per-tensor global scale passed with each call (v = code * scale / g)",
                f"page_size x (head_dim / 2 + head_dim / {NVFP4_GROUP})",
                guards=(group_span_guard("nvfp4_group_span", "nvfp4", "kNvfp4", NVFP4_GROUP),),
                aliases=("fp4_nvfp4", "nv_fp4", "nvfp4_global", "nvfp4_e2m1"), global_scale=True),
    StoreFormat("fp8_scaled", "fp8s", "kFp8Scaled",
                (Part("values", "all", "e4m3", "e4m3 codes of v * RN(1 / s)"),),
                RECORD,
                "head_dim e4m3 codes of v * RN(1 / s), saturating at 448; s is the per-tensor scale passed with "
                "each call (vLLM's and FlashInfer's k_scale / v_scale: v = code * s), no scale stored",
                "page_size x head_dim",
                aliases=("fp8_static", "fp8_per_tensor", "fp8_kv", "fp8_kvscale", "fp8_e4m3_scaled", "fp8_kv_scale",
                         "uniform_fp8"),
                global_scale=True, scale_reciprocal=True),
    StoreFormat("fp16", "fp16", "kFp16",
                (Part("values", "all", "fp16", "fp16 values"),),
                RECORD,
                "head_dim fp16 values (2 x head_dim B; a value past 65504 rounds to inf, as a cast does)",
                "page_size x 2 x head_dim", aliases=("float16", "half", "f16")),
    *dsv41_formats(),
    StoreFormat("fp8_scaled_divided", "fp8sd", "kFp8ScaledDivided",
                (Part("values", "all", "e4m3", "e4m3 codes of RN(v / s)"),),
                RECORD,
                "head_dim e4m3 codes of RN(v / s), saturating at 448; s is the per-tensor scale passed with each call "
                "(vLLM's concat_and_cache_mla and reshape_and_cache_flash divide by k_scale: v = code * s), no scale "
                "stored", "page_size x head_dim",
                aliases=("fp8_divided", "vllm_fp8_kv", "fp8_vllm_kv", "concat_and_cache_mla", "fp8_mla"),
                global_scale=True, scale_divides=True),
    StoreFormat("fp8_ds_mla", "fp8dsmla", "kFp8DsMla",
                (Part("nope", "nope", "e4m3", "e4m3 codes of dims {begin}..{last}", "fp32_pow2_floor", DS_MLA_GROUP,
                      "scales", "fp32 scales 2^ceil(log2(max(amax / 448, 1e-4))), one per {group} nope dims"),
                 Part("rope", "rope", "bf16", "bf16 roped dims {begin}..{last}")),
                Arrangement("656-B records", (Region(("nope", "scales", "rope")),)),
                "656 B (vLLM's FlashMLA-sparse fp8_ds_mla): e4m3 codes of the 512 latent dims, 4 fp32 scales (one per "
                f"{DS_MLA_GROUP} dims, a power of two), then the 64 roped dims as bf16",
                "page_size x 656",
                guards=ds_mla_guards(),
                aliases=("ds_mla", "fp8dsmla", "flashmla_sparse", "dsmla")),
    *token_head_formats(),
    StoreFormat("mxfp4", "mxfp4", "kMxfp4",
                (Part("values", "all", "e2m1x2", "e2m1 pairs (low nibble = even dim)", "ue8m0_ocp", MX_GROUP, "scales",
                      "UE8M0 scales 2^(floor(log2(amax)) - 2), one per {group} dims"),),
                SPLIT,
                f"head_dim / 2 bytes of e2m1 pairs (low nibble = even dim, ties to even), then one UE8M0 scale per "
                f"{MX_GROUP} dims with the OCP MX exponent floor(log2(amax)) - 2 (SGLang's MXFP4 KV)",
                f"page_size x (head_dim / 2 + head_dim / {MX_GROUP})",
                guards=(group_span_guard("mxfp4_group_span", "mxfp4", "kMxfp4", MX_GROUP),),
                aliases=("mx_fp4", "fp4_mx", "mxfp4_e2m1", "ocp_mxfp4", "mxfp4_kv")),
    StoreFormat("nvfp4_kv", "nvfp4kv", "kNvfp4Kv",
                (Part("values", "all", "e2m1x2", "e2m1 pairs of v * RN(1 / s) (low nibble = even dim)", "e4m3",
                      NVFP4_GROUP, "scales", "e4m3 scales (amax of v * RN(1 / s) / 6), one per {group} dims"),),
                SPLIT,
                "as nvfp4, with FlashInfer's and vLLM's per-tensor scale: s is the dequantization scale k_scale / "
                "v_scale passed with each call (v = code * scale * s), the row multiplied by RN(1 / s) first",
                f"page_size x (head_dim / 2 + head_dim / {NVFP4_GROUP})",
                guards=(group_span_guard("nvfp4_kv_group_span", "nvfp4_kv", "kNvfp4Kv", NVFP4_GROUP),),
                aliases=("flashinfer_nvfp4_kv", "nvfp4_kv_cache", "fp4_kv"), global_scale=True,
                scale_reciprocal=True),
)}


def format_of(v: Variant) -> StoreFormat:
    return FORMATS[v.store]


def part_dims(part: Part, v: Variant) -> tuple[int, int]:
    """[begin, end) of the row's dims that a part stores (the row after RoPE and Hadamard)."""
    if part.dims == "all":
        return 0, v.head_dim
    nope = v.head_dim - v.rope_dim
    return (0, nope) if part.dims == "nope" else (nope, v.head_dim)
