"""The guard table: one predicate, one C++ condition and one message per unsupported combination (the rules
themselves; codegen/guards.py applies them to variants and groups)."""
from __future__ import annotations

from ..layout.layout import layout_of
from ..spec.formats import ENCODERS, FORMATS, Guard, StoreFormat
from ..spec.norms import NORMS
from ..spec.pages import POOL_SHARES, RECORD_ORDERS, SCALE_ORDERS, SLOT_SOURCES
from ..spec.ropes import ROPE_STYLES, ROPE_TABLES


def is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


HADAMARD_EXCHANGE_BYTES = 32768  # kernelgen::kHadamardExchangeBytes (templates/kernelgen/warps.cuh)


def _warp_stages(threads_per_token: int) -> int:
    """The Hadamard stages that cross warps: one per warp bit of a token (64 threads: 1, 128: 2)."""
    return (threads_per_token > 32) + (threads_per_token > 64)

_UNQUANTIZED = [fmt for fmt in FORMATS.values() if not fmt.quantized]
_QUANTIZED = ", ".join(name for name, fmt in FORMATS.items() if fmt.quantized)
_ONE_RECORD = [fmt for fmt in FORMATS.values() if len(fmt.arrangement.regions) == 1]  # every field in one record


def _scales_alone(fmt: StoreFormat) -> bool:
    """The first part's scales fill an unpadded region with none of the format's other fields."""
    own = {f for p in fmt.parts for f in (p.field, p.scale_field)}
    return any({n for n in r.fields if n in own} == {fmt.parts[0].scale_field} and r.align == 1
               for r in fmt.arrangement.regions)


# e2m1 formats whose one-byte scales fill a region of their own: a scale_order may interleave their bytes
_INTERLEAVABLE = [fmt for fmt in FORMATS.values()
                  if ENCODERS[fmt.parts[0].rule] in ("kE2m1Ue8m0", "kE2m1E4m3") and _scales_alone(fmt)]

_VARIANT_GUARDS: tuple[Guard, ...] = (
    Guard("head_dim_range", lambda v: 64 <= v.head_dim <= 1024, "kHeadDim >= 64 && kHeadDim <= 1024",
          "head_dim must be between 64 and 1024", axes=('head_dim',)),
    Guard("head_dim_multiple_of_16", lambda v: v.head_dim % 16 == 0, "kHeadDim % 16 == 0",
          "head_dim must be a multiple of 16", axes=('head_dim',)),
    Guard("hadamard_pow2", lambda v: not v.hadamard or is_pow2(v.head_dim),
          "!kHadamard || kernelgen::is_pow2(kHeadDim)",
          "hadamard needs a power-of-two head_dim (64, 128, 256, 512, 1024); turn hadamard off for other sizes", axes=('hadamard', 'head_dim')),
    Guard("rope_dim_multiple_of_4", lambda v: v.rope_dim % 4 == 0, "kRopeDim % 4 == 0",
          "rope_dim must be a multiple of 4 (0: no RoPE): each freqs row is read in 16-byte pieces",
          axes=('rope_dim',)),
    Guard("rope_fits", lambda v: v.rope_dim <= v.head_dim, "kRopeDim <= kHeadDim",
          "rope_dim must not exceed head_dim", axes=('rope_dim', 'head_dim')),
    Guard("neox_aligned",
          lambda v: not ROPE_STYLES[v.rope_style].neox or v.rope_dim == 0 or v.rope_begin % v.rope_dim == 0,
          "!kNeox || kRopeDim == 0 || kRopeBegin % kRopeDim == 0",
          "neox RoPE pairs dim j with j + rope_dim/2, so the roped block must start at a multiple of rope_dim; "
          "put the rope at the head or use a head_dim that is a multiple of rope_dim", axes=('rope_style', 'rope_place', 'rope_dim')),
    Guard("rope_sections_cover_the_rope",
          lambda v: v.rope_sections == () if ROPE_STYLES[v.rope_style].streams == 1
          else v.rope_dim == 0 or (len(v.rope_sections) == 3 and sum(v.rope_sections) == v.rope_dim // 2),
          "kStreams == 1 ? (kSecT == 0 && kSecH == 0 && kSecW == 0) : (kRopeDim == 0 || (kSecT > 0 && kSecH > 0 && "
          "kSecW > 0 && kSecT + kSecH + kSecW == kRopeDim / 2))",
          "rope_sections are M-RoPE's pairs per position stream (rope_style mrope or mrope_interleaved): three numbers, "
          "temporal, height, width, summing to rope_dim / 2 (the config's mrope_section, e.g. [16, 24, 24] for "
          "rope_dim 128); other rope styles take none", axes=('rope_sections', 'rope_style', 'rope_dim')),
    Guard("mrope_reads_a_cos_sin_cache",
          lambda v: ROPE_STYLES[v.rope_style].streams == 1 or v.rope_dim == 0 or ROPE_TABLES[v.rope_table].halves,
          "kStreams == 1 || kRopeDim == 0 || kRopeHalves",
          "M-RoPE reads each pair's cos and sin from the row of its stream's position in a cos_sin_cache (vLLM's "
          "[max_pos, rotary_dim]: the cos of every pair, then every sin): set rope_table: halves",
          axes=('rope_table', 'rope_style')),
    Guard("x_head_stride_spans_a_head",
          lambda v: v.x_head_stride == 0 or (v.x_head_stride >= v.head_dim and v.x_head_stride % 16 == 0),
          "kXHeadStride == kHeadDim || (kXHeadStride >= kHeadDim && kXHeadStride % 16 == 0)",
          "x_head_stride is the elements from one head of x to the next: at least head_dim and a multiple of 16 "
          "(whole vectors), e.g. 2 x head_dim for a gated projection's [q | gate] heads; 0 means head_dim",
          axes=('x_head_stride', 'head_dim')),
    Guard("heads_range", lambda v: 1 <= v.heads <= 128, "kHeads >= 1 && kHeads <= 128",
          "heads must be between 1 and 128", axes=('heads',)),
    Guard("page_size_pow2", lambda v: is_pow2(v.page_size) and v.page_size <= 4096,
          "kernelgen::is_pow2(kPageSize) && kPageSize <= 4096",
          "page_size must be a power of two from 1 to 4096", axes=('page_size',)),
    Guard("token_slots_one_per_page", lambda v: SLOT_SOURCES[v.slots].reads_out_loc or v.page_size == 1,
          "!kTokenSlots || kPageSize == 1",
          "slots: token writes token t to row t of a dense output (one token per row): set page_size: 1",
          axes=('page_size', 'slots')),
    Guard("hnd_needs_pages", lambda v: not RECORD_ORDERS[v.kv_layout].heads_major or SLOT_SOURCES[v.slots].reads_out_loc, "!kHnd || !kTokenSlots",
          "kv_layout: hnd arranges the heads of a paged cache ([heads, page_size, record] per page); a dense output "
          "(slots: token) has one token per row: drop kv_layout or use slots: out_loc", axes=('kv_layout', 'slots')),
    Guard("joint_pool_needs_pages", lambda v: not POOL_SHARES[v.kv_pool].joint or SLOT_SOURCES[v.slots].reads_out_loc,
          "!kJointPool || !kTokenSlots",
          "kv_pool: joint writes one half of a paged K/V pool [num_pages, 2, page]; a dense output (slots: token) "
          "is no pool: drop kv_pool or use slots: out_loc", axes=('kv_pool', 'slots')),
    Guard("packed_pool_needs_one_record", lambda v: not POOL_SHARES[v.kv_pool].packed
          or len(FORMATS[v.store].arrangement.regions) == 1,
          "!kPackedPool || " + " || ".join(f"kStore == {fmt.cpp_enum}" for fmt in _ONE_RECORD),
          f"kv_pool: packed alternates K and V records in each cell, so every field of a record must be in it: use a "
          f"one-record store ({', '.join(fmt.name for fmt in _ONE_RECORD)})", axes=('kv_pool', 'store')),
    Guard("scale_order_needs_byte_scales",
          lambda v: SCALE_ORDERS[v.scale_order].interleave == 1 or FORMATS[v.store] in _INTERLEAVABLE,
          "kScaleInterleave == 1 || " + " || ".join(f"kStore == {fmt.cpp_enum}" for fmt in _INTERLEAVABLE),
          f"scale_order interleaves the one-byte scales of e2m1 codes kept in a region of their own: use a store of "
          f"{', '.join(fmt.name for fmt in _INTERLEAVABLE)}, or drop scale_order", axes=('scale_order', 'store')),
    Guard("scale_order_groups_one_heads_tokens",
          lambda v: SCALE_ORDERS[v.scale_order].interleave == 1
          or ((v.heads == 1 or RECORD_ORDERS[v.kv_layout].heads_major) and SLOT_SOURCES[v.slots].reads_out_loc
              and v.page_size % SCALE_ORDERS[v.scale_order].interleave == 0 and not POOL_SHARES[v.kv_pool].packed),
          "kScaleInterleave == 1 || ((kHeads == 1 || kHnd) && !kTokenSlots && kPageSize % kScaleInterleave == 0 && "
          "!kPackedPool)",
          "scale_order interleaves the scales of consecutive tokens of one head: it needs kv_layout: hnd (or one "
          "head), a paged cache (slots: out_loc), a page_size that is a multiple of the tokens it interleaves and no "
          "packed pool", axes=('scale_order', 'kv_layout', 'page_size', 'slots', 'kv_pool')),
    Guard("rope_then_norm_needs_both", lambda v: v.norm_order == "norm_then_rope" or (NORMS[v.norm].normalizes and v.rope_dim > 0),
          "!kRopeFirst || (kNorm != kernelgen::Norm::kNone && kRopeDim > 0)",
          "norm_order: rope_then_norm runs the norm on the rotated row: it needs a norm and RoPE (rope_dim > 0); "
          "drop norm_order", axes=('norm_order', 'norm', 'rope_dim')),
    Guard("norm_nope_needs_tail_rope", lambda v: v.norm_dims == "all" or (0 < v.rope_dim < v.head_dim
                                                                           and v.rope_place == "tail"),
          "!kNormNope || (kRopeDim > 0 && kRopeDim < kHeadDim && kRopeBegin + kRopeDim == kHeadDim)",
          "norm_dims: nope spans the dims before the roped block: it needs 0 < rope_dim < head_dim and rope_place: "
          "tail (MLA's [kv_c | k_pe] row)", axes=('norm_dims', 'rope_dim', 'rope_place', 'head_dim')),
    Guard("norm_nope_needs_rms", lambda v: v.norm_dims == "all" or (NORMS[v.norm].weight and not NORMS[v.norm].centered),
          "!kNormNope || kNorm == kernelgen::Norm::kRms || kNorm == kernelgen::Norm::kRmsGemma",
          "norm_dims: nope is an RMSNorm over the latent dims (MLA's kv_a_layernorm): use norm rms or rms_gemma",
          axes=('norm_dims', 'norm')),
    Guard("norm_bias_needs_layer", lambda v: not v.norm_bias or NORMS[v.norm].takes_bias,
          "!kNormBias || kNorm == kernelgen::Norm::kLayer",
          "norm_bias applies to LayerNorm only; set norm: layer or drop norm_bias", axes=('norm_bias', 'norm')),
    Guard("round_needs_quantized_store", lambda v: not v.round_through_bf16 or FORMATS[v.store].quantized,
          "!kRoundBf16 || " + " && ".join(f"kStore != {fmt.cpp_enum}" for fmt in _UNQUANTIZED),
          f"round_through_bf16 only applies to quantized stores ({_QUANTIZED})", axes=('round_through_bf16', 'store')),
)
_LAYOUT_AND_LAUNCH_GUARDS: tuple[Guard, ...] = (
    Guard("store_words",
          lambda v: layout_of(v).store_align >= 4,
          "kStoreAlign >= 4",
          "every stored field must start on a 4-byte boundary (whole-word stores): with fp4_e2m1, head_dim/2 + "
          "head_dim/32 bytes per token x page_size must be a multiple of 4 (use an even page_size or a head_dim "
          "that is a multiple of 128); with nvfp4, each token's head_dim/16 scale bytes must be whole words (use a "
          "head_dim that is a multiple of 64)", axes=('page_size', 'head_dim', 'store')),
    Guard("vec_width", lambda v: v.launch.vec in (2, 4, 8) and v.launch.vec * v.elem_bytes <= 16,
          "(kVec == 2 || kVec == 4 || kVec == 8) && kVec * kInBytes <= 16",
          "launch.vec must be 2, 4 or 8 with vec x input bytes at most 16 (one 16-byte load)", launch=True),
    Guard("threads_per_token_pow2",
          lambda v: is_pow2(v.launch.threads_per_token) and v.launch.threads_per_token <= 128,
          "kernelgen::is_pow2(kThreadsPerToken) && kThreadsPerToken <= 128",
          "launch.threads_per_token must be a power of two from 1 to 128 (lanes of one warp, or two or four warps)",
          launch=True),
    Guard("hadamard_exchange_fits",
          lambda v: not v.hadamard or v.launch.threads_per_token <= 32
          or v.launch.tokens_per_block * v.head_dim * 8 * _warp_stages(v.launch.threads_per_token)
          <= HADAMARD_EXCHANGE_BYTES,
          "!kHadamard || kThreadsPerToken <= 32 || kTokensPerBlock * kHeadDim * 8 * "
          "((kThreadsPerToken > 32) + (kThreadsPerToken > 64)) <= kernelgen::kHadamardExchangeBytes",
          "a token of several warps swaps its row between warps through shared memory for the Hadamard, "
          "8 x head_dim bytes per warp bit and token (two buffers): with hadamard on and launch.threads_per_token "
          "above 32, launch.tokens_per_block x head_dim x 8 x (1 for 64 threads, 2 for 128) must be at most 32768; "
          "lower launch.tokens_per_block", launch=True),
    Guard("neox_partner_in_one_warp",
          lambda v: not ROPE_STYLES[v.rope_style].neox or v.rope_dim == 0 or v.launch.threads_per_token <= 32
          or v.rope_dim // 2 < 32 * v.launch.vec,
          "!kNeox || kRopeDim == 0 || kThreadsPerToken <= 32 || kRopeDim / 2 < 32 * kVec",
          "neox RoPE exchanges a dim with its partner rope_dim/2 away by a shuffle within one warp: with "
          "launch.threads_per_token above 32, rope_dim/2 must be less than 32 x launch.vec", launch=True),
    Guard("rope_whole_vectors", lambda v: v.rope_dim % ((2 if ROPE_STYLES[v.rope_style].neox else 1) * v.launch.vec) == 0,
          "kRopeDim % ((kNeox ? 2 : 1) * kVec) == 0",
          "each thread rotates whole vectors of launch.vec dims: rope_dim must be a multiple of launch.vec "
          "(of 2 x launch.vec for neox RoPE, whose halves are whole vectors); lower launch.vec", launch=True),
    Guard("neox_partner_reach",
          lambda v: not ROPE_STYLES[v.rope_style].neox or v.rope_dim == 0 or is_pow2(v.rope_dim)
          or (v.rope_dim // 2) % (v.launch.threads_per_token * v.launch.vec) == 0
          or (v.rope_dim <= min(v.launch.threads_per_token, 32) * v.launch.vec
              and v.rope_begin % (min(v.launch.threads_per_token, 32) * v.launch.vec) == 0),
          "!kNeox || kRopeDim == 0 || kernelgen::is_pow2(kRopeDim) || (kRopeDim / 2) % (kThreadsPerToken * kVec) == 0"
          " || (kRopeDim <= (kThreadsPerToken < 32 ? kThreadsPerToken : 32) * kVec"
          " && kRopeBegin % ((kThreadsPerToken < 32 ? kThreadsPerToken : 32) * kVec) == 0)",
          "neox RoPE over a rope_dim that is not a power of two finds a dim's partner rope_dim/2 away either in the "
          "same lane of another chunk (rope_dim/2 a multiple of launch.threads_per_token x launch.vec) or in a lane "
          "of one warp holding the whole rope (rope_dim at most min(launch.threads_per_token, 32) x launch.vec, "
          "starting at a multiple of it); pick such a launch", launch=True),
    Guard("threads_tile_row", lambda v: v.head_dim % (v.launch.threads_per_token * v.launch.vec) == 0,
          "kHeadDim % (kThreadsPerToken * kVec) == 0",
          "head_dim must be a multiple of launch.threads_per_token x launch.vec", launch=True),
    Guard("values_per_thread", lambda v: v.head_dim // v.launch.threads_per_token <= 64,
          "kHeadDim / kThreadsPerToken <= 64",
          "each thread may hold at most 64 values (head_dim / threads_per_token); raise launch.threads_per_token", launch=True),
    Guard("early_reads_one_token", lambda v: not (v.launch.early_reads and v.launch.loop), "!(kEarlyReads && kLoop)",
          "launch.early_reads reads one token's indices before the PDL wait, and a looping grid (launch.loop) walks "
          "many tokens: turn one of them off", launch=True),
    Guard("warm_pass_early_reads", lambda v: not v.launch.warm_pass or v.launch.early_reads,
          "!kWarmPass || kEarlyReads",
          "launch.warm_pass runs a token's path once before the PDL wait, which only an early_reads launch has (its "
          "indices read before the wait): turn early_reads on or warm_pass off", launch=True),
    Guard("min_blocks_fit",
          lambda v: v.launch.min_blocks * v.launch.threads_per_token * v.launch.tokens_per_block <= 2048,
          "kMinBlocks * kThreadsPerToken * kTokensPerBlock <= 2048",
          "launch.min_blocks blocks of launch.threads_per_token x launch.tokens_per_block threads must fit the 2048 "
          "threads an SM holds; lower launch.min_blocks", launch=True),
    Guard("block_shape",
          lambda v: (v.launch.threads_per_token * v.launch.tokens_per_block) % 32 == 0
          and v.launch.threads_per_token * v.launch.tokens_per_block <= 1024,
          "(kThreadsPerToken * kTokensPerBlock) % 32 == 0 && kThreadsPerToken * kTokensPerBlock <= 1024",
          "launch.threads_per_token x launch.tokens_per_block must be a multiple of 32 and at most 1024", launch=True),
)


def _format_guards(launch: bool) -> tuple[Guard, ...]:
    return tuple(g for fmt in FORMATS.values() for g in fmt.guards if g.launch == launch)


# Every guard in one table: the variant's, each format's own, then the launch rules (each format's last).
# Each guard names the spec keys it reads (most likely culprit first): a violation points at where that key is set.
GUARDS: tuple[Guard, ...] = (_VARIANT_GUARDS + _format_guards(launch=False) + _LAYOUT_AND_LAUNCH_GUARDS
                             + _format_guards(launch=True))
