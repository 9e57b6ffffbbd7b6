"""The launch parameters as one table: every stage that names a launch parameter reads it from here.

Launch's fields (spec/variant.py), its id and parser, the spec's `launch:` and `tune:` keys
(spec/settings.py), the search space and its tie order (tune/space.py, tune/search.py) and the
configuration struct of the generated code (codegen/render.py and the template) are all read off
LAUNCH_PARAMS. Adding a parameter is one entry here plus the device code that reads its constant
(templates/kernelgen/*.cuh); tests/test_launch_table.py holds every stage to the table.

A parameter is either compiled code (a constant of the configuration struct: one template instance
per value) or a launch option (PDL: set per launch on the host, so configurations that differ only
in launch options are one compiled instance; see Launch.instance)."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

# The table is read by spec/variant.py, so it does not import Variant back: the candidate-value functions
# take a Variant typed as VariantLike.
VariantLike = Any


@dataclass(frozen=True)
class LaunchParam:
    name: str  # the Launch field and the key of a spec's `launch:` table
    kind: type  # int (0 = derived from the variant by codegen.launch.resolve) or bool (off by default)
    doc: str
    token: str  # its part of the launch id: an int as token + value ('t8'), a flag as '.' + token when on ('pf')
    id_pos: int  # where its part sits in the id (the ints first, in this order; then the flags that are on)
    compiled: bool  # True: a constant of the generated configuration struct; False: a launch option
    cpp: str | None  # the constant it sets (compiled parameters only), e.g. kThreadsPerToken
    tune: str  # its name in the tuning space and in a spec's `tune:` section
    space_pos: int  # its place in the space's product (the order candidates are enumerated, and tune: keys)
    values: Callable[[VariantLike], tuple[object, ...]]  # the space's default candidate values for a variant
    tie_pos: int  # its place in search.simplicity's tie order (after "is the default"); lower breaks first
    prefer: Literal["low", "high"]  # which end wins a tie (for a flag, "low" is off)
    guards: tuple[str, ...] = ()  # ids of its validity rules in codegen/guardtable.py (launch guards)
    # The space value -> this field, given every space value by tune name (default: the value itself).
    from_space: Callable[[Mapping[str, object]], object] | None = None
    # Where `tune` is not the field's name: what follows that name in the error a `tune:` section naming the field
    # gets (spec/parse.py): how the space value makes the field, and an example.
    searched_as: str = ""
    limit: int = 4096  # the largest value a spec's `launch:` table may set (ints; the guards hold the real rules)
    # The GPUs (compute capabilities, e.g. "10.0") on which the tuner may offer its other values: a hardware
    # instruction the other GPUs lack. Empty: every GPU. Elsewhere the space keeps the default alone.
    capabilities: tuple[str, ...] = ()
    # An int shown in the launch id only where it is not its default, after the flags ('.mb2'): ids written
    # before the parameter existed keep their meaning.
    optional: bool = False
    # Flags that must be on for the space to offer this one's other values: without them it is the default's code
    # doing the same work in another order (early_reads without pdl), a point not worth timing.
    requires: tuple[str, ...] = ()
    # Its other values rest on a promise about what runs before the kernel (early_reads: the kernel launched before
    # writes none of the inputs read before the wait), which only a spec can make (its `tune:` section offering
    # them): a tuning record's choice of one holds for the kernels of specs that made it (Variant.promises), not for
    # another spec's kernel or a Python-built variant of the same content key; those choose again without it.
    promise: bool = False
    # Its other values change the code only where `values` offers them (a no-op elsewhere: hw_convert for a bf16 store,
    # rope_rows without M-RoPE, lean_math without such a scale): a spec's `tune:` values are kept there alone, so a
    # spec-wide `tune: {lean_math: [false, true]}` does not time one kernel twice.
    noop_elsewhere: bool = False

    @property
    def default(self) -> object:
        return self.kind()

    @property
    def cpp_type(self) -> str:
        return "bool" if self.kind is bool else "int"

    def field_value(self, space_point: Mapping[str, object]) -> object:
        """This field's value at a point of the tuning space (tune name -> value)."""
        if self.from_space is not None:
            return self.from_space(space_point)
        return self.kind(space_point[self.tune])


def _vec_values(v: VariantLike) -> tuple[object, ...]:
    """16- and 8-byte loads; 4-byte loads too where the row is not a multiple of 128 dims (MLA's 576, a 192-dim
    q_pe head): there the wider loads leave few threads per token (576 = 9 x 64 allows at most 64 dims per step),
    and the narrow ones let 32 or 64 threads share a short decode row."""
    widest = 16 // v.elem_bytes
    narrow = (widest // 4,) if v.head_dim % 128 else ()
    return tuple(x for x in (widest, widest // 2, *narrow) if x >= 2)


# The GPUs with cvt.rn.satfinite.e2m1x2.f32 (PTX 8.6, the arch-specific targets sm_100a, sm_103a, sm_120a, sm_121a):
# kernelgen's targets of those capabilities are the 'a' forms (build/arch.py), whose __CUDA_ARCH_FEAT_SM*_ALL
# macro the device code tests (templates/kernelgen/numeric.cuh e2m1x2_hw).
HW_E2M1_CAPABILITIES = ("10.0", "10.3", "12.0", "12.1")
# The GPUs with packed float32 arithmetic (FADD2/FMUL2/FFMA2: sm_100 and sm_103; sm_120 has none), whose
# __CUDA_ARCH__ the device code tests (templates/kernelgen/numeric.cuh KERNELGEN_ARCH_PAIRS).
PACKED_F32_CAPABILITIES = ("10.0", "10.3")


def _hw_convert_values(v: VariantLike) -> tuple[object, ...]:
    """Off, and on where the variant's store rounds e2m1 codes to nearest even (the instruction's rounding)."""
    from .formats import format_of

    return (False, True) if format_of(v).e2m1_ties_even else (False,)


def _rope_rows_values(v: VariantLike) -> tuple[object, ...]:
    """Off, and on too where the rotation reads several position streams (M-RoPE)."""
    from .ropes import ROPE_STYLES

    return (False, True) if v.rope_dim and ROPE_STYLES[v.rope_style].streams > 1 else (False,)


# The scales whose codes CUDA divides into (div.rn per value, with its range check and slow-path call) or whose
# power of two it computes through libm (exp2f(ceilf(log2f(x))) per group): what launch.lean_math computes lean.
LEAN_MATH_SCALES = frozenset({"fp32_divided", "fp32_pow2", "fp32_pow2_floor", "e4m3_divided"})


def _lean_math_values(v: VariantLike) -> tuple[object, ...]:
    """Off, and on too where the store divides by a scale (per tensor, token or group), computes vLLM's power-of-two
    group scale or writes e4m3 codes of a row already scaled (no multiply by 1 per value), or the row is rounded
    through bf16; elsewhere the flag compiles the same code."""
    from .formats import format_of

    fmt = format_of(v)
    lean = fmt.scale_divides or any(p.scale in LEAN_MATH_SCALES or (p.encoding, p.scale) == ("e4m3", "none")
                                    for p in fmt.parts)
    return (False, True) if lean or v.round_through_bf16 or v.round_norm_bf16 else (False,)


def _bracket_codes_values(v: VariantLike) -> tuple[object, ...]:
    """Off, and on too where the store's e4m3 codes are of a correctly rounded divide (vLLM's per-tensor k_scale, its
    indexer's per-token scale); elsewhere the flag compiles the same code."""
    from .formats import format_of

    fmt = format_of(v)
    divided = any(p.encoding == "e4m3" and (fmt.scale_divides or p.scale in ("fp32_divided", "fp32_pow2"))
                  for p in fmt.parts)
    return (False, True) if divided else (False,)


def _min_blocks(space_point: Mapping[str, object]) -> int:
    """The tuning space names occupancy by the threads an SM must hold (the same value means the same register cap
    for every block size); the compiled field is the blocks that makes, rounded up (0: no bound)."""
    resident, block = int(space_point["resident_threads"]), int(space_point["block_threads"])  # type: ignore[call-overload]
    return -(-resident // block) if resident else 0


def _tokens_per_block(space_point: Mapping[str, object]) -> int:
    return max(int(space_point["block_threads"]) // int(space_point["threads_per_token"]), 1)  # type: ignore[call-overload]


# In Launch's field order: positional Launch(32, 2, 4, True, True) means prefetch and pdl on, and records
# on disk hold ids built from token and id_pos, so neither may change for an existing parameter.
LAUNCH_PARAMS: tuple[LaunchParam, ...] = (
    LaunchParam(
        "threads_per_token", int,
        "threads that share a token: lanes of one warp (1..32, a power of two), or two or four warps (64, 128: "
        "fewer values per thread for a short small-batch chain, the sums crossing warps through shared memory)",
        token="t", id_pos=0, compiled=True, cpp="kThreadsPerToken",
        tune="threads_per_token", space_pos=0, values=lambda v: (1, 2, 4, 8, 16, 32, 64, 128),
        tie_pos=2, prefer="low",
        guards=("threads_per_token_pow2", "threads_tile_row", "values_per_thread", "block_shape",
                "hadamard_exchange_fits", "neox_partner_in_one_warp", "neox_partner_reach")),
    LaunchParam(
        "tokens_per_block", int,
        "tokens one block handles; the tuning space sets block_threads (threads per block) instead, and "
        "tokens_per_block = block_threads / threads_per_token (at least 1)",
        token="b", id_pos=1, compiled=True, cpp="kTokensPerBlock",
        tune="block_threads", space_pos=2, values=lambda v: (64, 256), from_space=_tokens_per_block,
        searched_as="(threads per block; tokens_per_block = block_threads / threads_per_token), e.g. block_threads: "
                    "[64, 256]",
        tie_pos=4, prefer="low", guards=("block_shape", "hadamard_exchange_fits")),
    LaunchParam(
        "vec", int,
        "elements per vector load (16-byte and 8-byte loads by default); each thread holds chunks x vec elements",
        token="v", id_pos=2, compiled=True, cpp="kVec",
        tune="vec", space_pos=1, values=_vec_values,
        tie_pos=3, prefer="high",
        guards=("vec_width", "threads_tile_row", "neox_partner_in_one_warp", "rope_whole_vectors", "neox_partner_reach")),
    LaunchParam(
        "prefetch", bool,
        "issue weight, bias and freqs loads at kernel entry, beside the row load (one memory round trip for "
        "small N)",
        token="pf", id_pos=3, compiled=True, cpp="kPrefetch",
        tune="prefetch", space_pos=3, values=lambda v: (False, True), tie_pos=1, prefer="low"),
    LaunchParam(
        "pdl", bool,
        "launch with programmatic dependent launch (overlaps the previous kernel's tail); a launch option, "
        "so one compiled instance serves both",
        token="pdl", id_pos=5, compiled=False, cpp=None,
        tune="pdl", space_pos=4, values=lambda v: (False, True), tie_pos=0, prefer="low"),
    LaunchParam(
        "loop", bool,
        "one wave of blocks walks the tokens, the next token's loads issued before the current math (off in "
        "the default space until measured: a spec opts in with `tune: {loop: [false, true]}`)",
        token="lp", id_pos=4, compiled=True, cpp="kLoop",
        tune="loop", space_pos=5, values=lambda v: (False,), tie_pos=5, prefer="low"),
    LaunchParam(
        "hw_convert", bool,
        "e2m1 codes by the hardware's cvt.rn.satfinite.e2m1x2.f32 (Blackwell: sm_100a, sm_103a, sm_120a, sm_121a) "
        "instead of the software rounding to nearest even; a candidate only where the tuning GPU has the "
        "instruction and a store (a group member's) has such codes, where the tuner checks its bytes against the "
        "reference like every candidate's; other targets and other stores compile the software path (a no-op)",
        token="hw", id_pos=6, compiled=True, cpp="kHwConvert",
        tune="hw_convert", space_pos=6, values=_hw_convert_values, tie_pos=6, prefer="low",
        capabilities=HW_E2M1_CAPABILITIES, noop_elsewhere=True),
    LaunchParam(
        "min_blocks", int,
        "the minimum resident blocks per SM asked of the compiler (__launch_bounds__'s second argument: it caps the "
        "registers per thread so that many blocks fit; 0: no bound). The tuning space sets resident_threads instead, "
        "the threads an SM must hold (registers per thread <= 65536 / resident_threads), and min_blocks = "
        "resident_threads / block_threads rounded up; off in the default space until measured: a spec opts in with "
        "`tune: {resident_threads: [0, 1536, 2048]}`",
        token="mb", id_pos=7, compiled=True, cpp="kMinBlocks",
        tune="resident_threads", space_pos=7, values=lambda v: (0,), from_space=_min_blocks, tie_pos=7, prefer="low",
        guards=("min_blocks_fit",), limit=32, optional=True,
        searched_as="(the threads an SM must hold; min_blocks = resident_threads / block_threads, rounded up), e.g. "
                    "resident_threads: [0, 1536, 2048]"),
    LaunchParam(
        "packed_f32", bool,
        "the float work of the norm, RoPE, Hadamard and quantized stores as packed float32 pairs (FADD2/FMUL2/FFMA2: "
        "sm_100 and sm_103), each component rounded as the scalar op; a candidate only where the tuning GPU has them, "
        "where the tuner checks its bytes against the reference like every candidate's; other targets compile the "
        "scalar code (a no-op)",
        token="pk", id_pos=8, compiled=True, cpp="kPackedF32",
        tune="packed_f32", space_pos=8, values=lambda v: (False, True), tie_pos=8, prefer="low",
        capabilities=PACKED_F32_CAPABILITIES),
    LaunchParam(
        "rope_rows", bool,
        "M-RoPE's cos and sin read as whole vectors of each position stream's row (three vector loads per rotated "
        "chunk), each pair's value then picked from its stream's, instead of one scalar load per value from the row "
        "its stream names; a candidate only where the rotation reads several position streams (elsewhere a no-op)",
        token="rr", id_pos=9, compiled=True, cpp="kRopeRows",
        tune="rope_rows", space_pos=9, values=_rope_rows_values, tie_pos=9, prefer="low", noop_elsewhere=True),
    LaunchParam(
        "early_reads", bool,
        "a PDL launch reads each token's slot, position(s) and cos/sin row before griddepcontrol.wait (overlapping "
        "the previous kernel) and only x and the rest after it: one round of memory latency after the wait instead "
        "of two. It assumes the kernel launched before never writes the slot mapping, the positions or the cos/sin "
        "table (true where an engine fills them before the layers run), so it is off in the default space: a spec "
        "makes that promise with `tune: {early_reads: [false, true]}`; offered only with pdl on",
        token="er", id_pos=10, compiled=True, cpp="kEarlyReads",
        tune="early_reads", space_pos=10, values=lambda v: (False,), tie_pos=10, prefer="low",
        guards=("early_reads_one_token",), requires=("pdl",), promise=True),
    LaunchParam(
        "lean_math", bool,
        "the stores' correctly rounded divides by a scale shared by many values (vLLM's per-tensor k_scale, its "
        "indexer's per-token scale, V4.1 fp4's group scales) as RN(1 / s) once and two Markstein corrections per value "
        "with one range check per chunk, instead of div.rn's check and slow-path branch per value; the fp8_ds_mla "
        "group scale exp2f(ceilf(log2f(x))) read off x's bits where log2f's rounding cannot move it; e4m3 codes of a "
        "row already scaled without a multiply by 1 per value; a row's rounding through bf16 two values per convert. "
        "The same bytes (the sequences are exact where they run; elsewhere the library calls run), checked by the "
        "tuner like every candidate; offered only where a store has such an operation (elsewhere a no-op)",
        token="lm", id_pos=11, compiled=True, cpp="kLeanMath",
        tune="lean_math", space_pos=11, values=_lean_math_values, tie_pos=11, prefer="low", noop_elsewhere=True),
    LaunchParam(
        "bracket_codes", bool,
        "e4m3 codes of a correctly rounded divide (vLLM's per-tensor k_scale, its indexer's per-token scale) read off "
        "one multiply: the quotient RN(v x RN(1 / s)) is bracketed by its products with 1 -+ 2^-21, and where both "
        "convert to the same code that is the code of RN(v / s) (the conversion is monotone); a quotient within about "
        "2^-21 of a rounding midpoint (8 in 10^6 values), a dividend past 2^60 or a scale outside [2^-60, 2^60] takes "
        "the divide. The same bytes, checked by the tuner like every candidate; offered only where a store divides "
        "into e4m3 codes (elsewhere a no-op)",
        token="bc", id_pos=12, compiled=True, cpp="kBracketCodes",
        tune="bracket_codes", space_pos=12, values=_bracket_codes_values, tie_pos=12, prefer="low", noop_elsewhere=True),
    LaunchParam(
        "warm_pass", bool,
        "an early_reads launch runs each token's path twice from one copy of its code: first before griddepcontrol.wait "
        "on a zero row that writes nothing, so the instructions after the wait are in the SM's instruction caches when "
        "the wait returns (a small launch's blocks land on SMs that have not run the kernel), then on the token's row. "
        "The same bytes (the dry pass writes nothing and reads nothing the kernel before may write: not x, the "
        "weights or the scales, which the second pass reads after the wait), "
        "checked by the tuner like every candidate; off in the default space until measured: a spec opts in with "
        "`tune: {warm_pass: [false, true]}`; offered only with early_reads on",
        token="wp", id_pos=13, compiled=True, cpp="kWarmPass",
        tune="warm_pass", space_pos=13, values=lambda v: (False,), tie_pos=13, prefer="low",
        guards=("warm_pass_early_reads",), requires=("early_reads",)),
)

BY_NAME: dict[str, LaunchParam] = {p.name: p for p in LAUNCH_PARAMS}
COMPILED: tuple[LaunchParam, ...] = tuple(p for p in LAUNCH_PARAMS if p.compiled)  # the configuration struct
OPTIONS: tuple[LaunchParam, ...] = tuple(p for p in LAUNCH_PARAMS if not p.compiled)  # set per launch
IN_ID_ORDER: tuple[LaunchParam, ...] = tuple(sorted(LAUNCH_PARAMS, key=lambda p: p.id_pos))
IN_SPACE_ORDER: tuple[LaunchParam, ...] = tuple(sorted(LAUNCH_PARAMS, key=lambda p: p.space_pos))
IN_TIE_ORDER: tuple[LaunchParam, ...] = tuple(sorted(LAUNCH_PARAMS, key=lambda p: p.tie_pos))
ID_NUMBERS: tuple[LaunchParam, ...] = tuple(p for p in IN_ID_ORDER if p.kind is int and not p.optional)
ID_FLAGS: tuple[LaunchParam, ...] = tuple(p for p in IN_ID_ORDER if p.kind is bool)
ID_OPTIONAL: tuple[LaunchParam, ...] = tuple(p for p in IN_ID_ORDER if p.kind is int and p.optional)
# How an id reads, for messages: t8.b8.v8[.pf][.lp][.pdl][.hw][.pk][.rr][.er][.lm][.bc][.wp][.mb2]
ID_EXAMPLE = (".".join(f"{p.token}8" for p in ID_NUMBERS) + "".join(f"[.{p.token}]" for p in ID_FLAGS)
              + "".join(f"[.{p.token}2]" for p in ID_OPTIONAL))
