// kernelgen/fused_norm_rope_store.cuh: the device code of the fused_norm_rope_store family.
//
// One token is handled by kThreadsPerToken consecutive threads: lanes of one warp, or (64 or 128
// threads, rows of at least 64 x kVec dims) two or four whole warps. Thread `l` of a token holds kChunks vectors of
// kVec elements: element k of chunk c is dim (c * kThreadsPerToken + l) * kVec + k. So the bits of a dim
// index are, from the lowest: in-vector bits, lane bits (then warp bits), chunk bits. Reductions, the
// neox partner exchange and the Hadamard butterflies follow those bits; the warp bits are crossed through
// shared memory by the sums, the fp8 amax, the NaN vote (see "tokens of several warps") and the Hadamard's
// warp stages (warp_butterflies).
//
// A generated translation unit defines a `Cfg` struct (constants only) and instantiates run<Cfg>.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <type_traits>
#include <vector>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/extra/cuda/device_guard.h>
#include <tvm/ffi/function.h>

#include "kernelgen/numeric.cuh"

namespace kernelgen {

enum class Norm { kNone, kRms, kLayer, kRmsGemma };  // kRmsGemma: RMSNorm times (1 + weight)
// The store formats of kernelgen/spec/formats.py, in its table's order (a pure test holds them equal).
enum class Store { kBf16, kFp8E4m3, kFp4E2m1, kFp8FlashMla, kFp8Vllm, kFp8VllmUe8m0, kNvfp4Dsv4, kNvfp4, kFp8Scaled, kFp16 };
// Formats whose rows are multiplied by a per-tensor global scale g (read from Params::global_scale) before
// they are encoded (the table's global_scale); for kFp8Scaled the tensor holds a dequantization scale s and
// g = RN(1 / s) (the table's scale_reciprocal).
template <Store S>
inline constexpr bool kGlobalScale = S == Store::kNvfp4 || S == Store::kFp8Scaled;
template <Store S>
inline constexpr bool kScaleReciprocal = S == Store::kFp8Scaled;
template <Store>
inline constexpr bool kNoStoreCode = false;  // a format with no branch in store() fails to compile

struct Params {
  const void* x;
  int64_t x_row_stride;  // elements between consecutive rows of x
  const void* weight;
  const void* bias;
  const float* freqs;  // [max_pos, rope_dim]: (cos, sin) of pair j at 2j, 2j+1 (kRopeHalves: at j, rope_dim/2 + j)
  int64_t max_pos;
  const void* positions;
  const void* out_loc;
  bool positions_i64;
  bool out_loc_i64;
  uint8_t* cache;  // [num_pages, kPageBytes]
  int64_t num_slots;  // rows the pool holds: num_pages * kPageSize * kHeads
  int64_t num_tokens;  // rows: tokens x kHeads
  float eps;
  const float* global_scale;  // [1]: g, read by the kernel (kGlobalScale formats only)
  int64_t page_stride;  // bytes between rows of a dense output (kTokenSlots: row t is token t's; may be strided)
};

template <class Cfg>
struct Geometry {
  static constexpr int kT = Cfg::kThreadsPerToken;
  static constexpr int kVec = Cfg::kVec;
  static constexpr int kChunks = Cfg::kHeadDim / (kT * kVec);
  static constexpr int kBlockThreads = kT * Cfg::kTokensPerBlock;
  static constexpr int kWarpsPerToken = kT > 32 ? kT / 32 : 1;
  static constexpr int kWarpLanes = kT > 32 ? 32 : kT;  // a token's lanes within one warp
};

// Every lane of a warp runs the whole per-token path (rows that write nothing included), so
// shuffles name the full warp: a partial, run-time mask makes nvcc wrap each shuffle in a
// WARPSYNC.COLLECTIVE sequence (about 5 extra instructions per shuffle, seen in the SASS).
constexpr unsigned kWarp = 0xffffffffu;

template <class Cfg>
struct Row {
  using G = Geometry<Cfg>;
  float v[G::kChunks][G::kVec];
  int lane;  // the thread's place in its token: 0 .. kThreadsPerToken - 1
  unsigned group;  // the lanes of this token's group (for ballots); shuffles use the whole warp
  int token;  // the token's place in its block (a token of several warps: its barrier and exchange slots)
  int parity;  // the looping kernel's token count mod 2 (which set of exchange slots)

  __device__ __forceinline__ int first(int c) const { return (c * G::kT + lane) * G::kVec; }
};

__device__ __forceinline__ int64_t load_index(const void* p, bool is_i64, int64_t i) {
  return is_i64 ? static_cast<const int64_t*>(p)[i] : static_cast<const int32_t*>(p)[i];
}

// Loads N floats' worth of T from 16-byte-or-smaller aligned pieces.
template <typename T, int N>
__device__ __forceinline__ void load_wide(const T* src, float (&dst)[N]) {
  constexpr int kPiece = (N * sizeof(T) > 16) ? 16 / sizeof(T) : N;
#pragma unroll
  for (int i = 0; i < N; i += kPiece) {
    float part[kPiece];
    load_floats<T, kPiece>(src + i, part);
#pragma unroll
    for (int j = 0; j < kPiece; ++j) dst[i + j] = part[j];
  }
}

// ---- tokens of several warps (threads_per_token 64 or 128) ---------------------------------
//
// Such a token reduces within each warp by shuffles, then across its warps through shared memory behind
// a named barrier of the token's threads (id = the token's place in the block, so the tokens of a block
// never wait on each other; 1024 threads per block leave at most 16 such tokens, the number of barriers).
// The warps combine in butterfly order over the warp bits (warp w with w ^ 1, then with w ^ 2): the same
// operations on the same values as the lane butterfly continued past 32 lanes, which the reference replays
// (both operations are commutative, so every warp ends with the same bits). Each exchange of a token has
// its own slots, and the looping kernel alternates two sets by token parity: a warp that runs ahead into
// the next token never overwrites a partial that another warp of the token has yet to read.
enum Exchange { kCenterSum = 0, kSquareSum = 1, kAmaxMax = 2, kExchanges = 3 };

// Shared memory of the Hadamard's exchange between the warps of a token (warp_butterflies), per block: the
// guard hadamard_exchange_fits (kernelgen/codegen/guardtable.py) holds launches to it.
constexpr int kHadamardExchangeBytes = 32768;

// bar.sync and bar.red are the .aligned forms. PTX asks of those that every thread of the CTA execute the same
// barrier instruction; here a token that writes nothing returns before its later barriers while another token
// of the block goes on. What the hardware relies on is that each warp reaches a barrier whole, which holds: a
// token owns whole warps, and every condition in front of a barrier (the early exit, `more` in the loop) is the
// same for all of them. CUTLASS's named barriers (warp groups on different paths, `bar.sync id, count`) rest
// on the same. The non-aligned forms (barrier.sync, barrier.red) compile to other code (seen in the SASS:
// tools/rekey_records.py found the kernels changed) that no GPU has timed or verified here.
__device__ __forceinline__ void token_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// True on every thread of the token when any of them passes true: the barrier's own OR reduction.
__device__ __forceinline__ bool token_any(int id, int threads, bool value) {
  int out;
  asm volatile(
      "{\n\t.reg .pred p, q;\n\tsetp.ne.s32 p, %1, 0;\n\tbar.red.or.pred q, %2, %3, p;\n\tselp.s32 %0, 1, 0, q;\n\t}"
      : "=r"(out)
      : "r"(int(value)), "r"(id), "r"(threads)
      : "memory");
  return out != 0;
}

// v is the same on every lane of each warp of the token (a finished warp reduction); returns Op over the
// token's warps, on every thread.
template <class Cfg, class Op>
__device__ __forceinline__ float across_warps(const Row<Cfg>& r, Exchange exchange, float v) {
  constexpr int kW = Geometry<Cfg>::kWarpsPerToken;
  if constexpr (kW == 1) {
    return v;
  } else {
    static_assert(kW == 2 || kW == 4, "a token spans two or four warps (guard threads_per_token_pow2)");
    static_assert(Cfg::kTokensPerBlock <= 16, "one named barrier per token: at most 16 tokens per block");
    __shared__ float slots[2][Cfg::kTokensPerBlock][kExchanges][kW];
    float* s = slots[r.parity][r.token][exchange];
    const int warp = r.lane / 32;
    if ((r.lane & 31) == 0) s[warp] = v;
    token_barrier(r.token, Cfg::kThreadsPerToken);
    float acc = Op()(s[warp], s[warp ^ 1]);
    if constexpr (kW == 4) acc = Op()(acc, Op()(s[warp ^ 2], s[warp ^ 3]));
    return acc;
  }
}

// ---- norm ----------------------------------------------------------------------------------

// A lane's sum of its kChunks x kVec values as a pairwise tree (tree_sum, leaves in (chunk, element)
// order), then the butterfly over the token's lanes: log2 instead of a chain of kChunks x kVec
// dependent adds on the small-batch path. The reference (measure/reference.py) replays the same tree.
template <class Cfg>
__device__ __forceinline__ float lane_sum(const Row<Cfg>& r, Exchange exchange,
                                          const float (&t)[Geometry<Cfg>::kChunks * Cfg::kVec]) {
  using G = Geometry<Cfg>;
  return across_warps<Cfg, AddRn>(r, exchange, group_sum<G::kWarpLanes>(tree_sum<G::kChunks * Cfg::kVec>(t), kWarp));
}

template <class Cfg>
__device__ __forceinline__ float sum_of_squares(const Row<Cfg>& r) {
  float sq[Geometry<Cfg>::kChunks * Cfg::kVec];
#pragma unroll
  for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
#pragma unroll
    for (int k = 0; k < Cfg::kVec; ++k) sq[c * Cfg::kVec + k] = __fmul_rn(r.v[c][k], r.v[c][k]);
  return lane_sum<Cfg>(r, kSquareSum, sq);
}

// x / head_dim correctly rounded: an exact multiply for a power-of-two head_dim (no range check, no
// slow-path call on the chain), div.rn otherwise (sums may be zero, subnormal or infinite).
template <class Cfg>
__device__ __forceinline__ float div_by_head_dim(float x) {
  if constexpr (is_pow2(Cfg::kHeadDim)) {
    return __fmul_rn(x, 1.0f / Cfg::kHeadDim);
  } else {
    return __fdiv_rn(x, float(Cfg::kHeadDim));
  }
}

template <class Cfg>
__device__ __forceinline__ void center(Row<Cfg>& r) {
  float vals[Geometry<Cfg>::kChunks * Cfg::kVec];
#pragma unroll
  for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
#pragma unroll
    for (int k = 0; k < Cfg::kVec; ++k) vals[c * Cfg::kVec + k] = r.v[c][k];
  const float mean = div_by_head_dim<Cfg>(lane_sum<Cfg>(r, kCenterSum, vals));
#pragma unroll
  for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
#pragma unroll
    for (int k = 0; k < Cfg::kVec; k += 2) sub2(r.v[c][k], r.v[c][k + 1], mean);
}

// Per-thread slices of the norm weight and bias and of this token's freqs row. With
// Cfg::kPrefetch they are loaded at kernel entry beside the row (one round of memory latency
// for small batches); otherwise just before use (fewer live registers for large batches).
template <class Cfg>
struct Operands {
  static constexpr int kFreqs = Cfg::kNeox ? 2 * Cfg::kVec : Cfg::kVec;  // floats per chunk
  float w[Geometry<Cfg>::kChunks][Cfg::kVec];
  float b[Geometry<Cfg>::kChunks][Cfg::kVec];
  float f[Geometry<Cfg>::kChunks][kFreqs];
};

template <class Cfg>
__device__ __forceinline__ void load_weights(Operands<Cfg>& o, const Row<Cfg>& r, const Params& p) {
  if constexpr (Cfg::kNorm != Norm::kNone) {
    const auto* w = static_cast<const typename Cfg::Weight*>(p.weight);
    const auto* b = static_cast<const typename Cfg::Weight*>(p.bias);
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c) {
      load_wide(w + r.first(c), o.w[c]);
      if constexpr (Cfg::kNorm == Norm::kRmsGemma) {  // Gemma's (1 + w), rounded to float32 as its float32 add is
#pragma unroll
        for (int k = 0; k < Cfg::kVec; ++k) o.w[c][k] = __fadd_rn(1.f, o.w[c][k]);
      }
      if constexpr (Cfg::kNormBias) load_wide(b + r.first(c), o.b[c]);
    }
  }
}

template <class Cfg>
__device__ __forceinline__ bool in_rope(int dim) {
  return dim >= Cfg::kRopeBegin && dim < Cfg::kRopeBegin + Cfg::kRopeDim;
}

// (cos, sin) pairs from a table that keeps the cos of every pair in its first half and the sins in its second:
// cos at `cos`, sin `half` floats further; dst gets them interleaved as the pairs table holds them.
template <int N>
__device__ __forceinline__ void load_cos_sin(const float* cos, int half, float (&dst)[N]) {
  float c[N / 2], s[N / 2];
  load_wide(cos, c);
  load_wide(cos + half, s);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    dst[2 * i] = c[i];
    dst[2 * i + 1] = s[i];
  }
}

// Neox pairs dim j of the rope with j + rope_dim/2: the pair index of either dim (a mask when rope_dim is a
// power of two, a compare otherwise; the guards keep a vector within one half).
template <class Cfg>
__device__ __forceinline__ int neox_pair(int j) {
  constexpr int kHalf = Cfg::kRopeDim / 2;
  if constexpr (is_pow2(Cfg::kRopeDim)) {
    return j & (kHalf - 1);
  } else {
    return j < kHalf ? j : j - kHalf;
  }
}

// The (cos, sin) values each rope chunk needs: interleaved pairs sit beside their dims; neox
// chunks need both halves' pair j, so 2 x kVec values.
template <class Cfg>
__device__ __forceinline__ void load_freqs(Operands<Cfg>& o, const Row<Cfg>& r, const float* f) {
  if constexpr (Cfg::kRopeDim > 0) {
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c) {
      const int dim = r.first(c);
      if (!in_rope<Cfg>(dim)) continue;
      const int j = dim - Cfg::kRopeBegin;
      if constexpr (Cfg::kRopeHalves) {  // vLLM's and FlashInfer's cos_sin_cache: two loads, interleaved here
        load_cos_sin(f + (Cfg::kNeox ? neox_pair<Cfg>(j) : j / 2), Cfg::kRopeDim / 2, o.f[c]);
      } else if constexpr (Cfg::kNeox) {
        load_wide(f + 2 * neox_pair<Cfg>(j), o.f[c]);
      } else {
        load_wide(f + j, o.f[c]);
      }
    }
  }
}

template <class Cfg>
__device__ __forceinline__ void normalize(Row<Cfg>& r, Operands<Cfg>& o, const Params& p) {
  if constexpr (Cfg::kNorm != Norm::kNone) {
    if constexpr (Cfg::kNorm == Norm::kLayer) center(r);
    const float mean_sq = div_by_head_dim<Cfg>(sum_of_squares(r));
    // A sum of squares that overflows float32 cannot be normalized: NaN marks the row (see store). A select
    // after the root, not a branch around it: nvcc then hoists the eps test into the shuffle stages.
    const float root = inv_sqrt_rn(__fadd_rn(mean_sq, p.eps), p.eps);
    const float inv = isinf(mean_sq) ? __uint_as_float(0x7FC00000u) : root;
    if constexpr (!Cfg::kPrefetch) load_weights(o, r, p);
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c) {
#pragma unroll
      for (int k = 0; k < Cfg::kVec; k += 2)
        scale2<Cfg::kNormBias>(r.v[c][k], r.v[c][k + 1], inv, o.w[c][k], o.w[c][k + 1],
                               Cfg::kNormBias ? o.b[c][k] : 0.f, Cfg::kNormBias ? o.b[c][k + 1] : 0.f);
    }
  }
}

// ---- RoPE ----------------------------------------------------------------------------------

// Interleaved: (x[2j], x[2j+1]) is rotated by (cos, sin) = (f[2j], f[2j+1]); both live in one vector.
template <class Cfg>
__device__ __forceinline__ void rotate_interleaved(Row<Cfg>& r, const Operands<Cfg>& o) {
#pragma unroll
  for (int c = 0; c < Geometry<Cfg>::kChunks; ++c) {
    const int dim = r.first(c);
    if (!in_rope<Cfg>(dim)) continue;
    const float* cs = o.f[c];
#pragma unroll
    for (int k = 0; k < Cfg::kVec; k += 2) {
      rotate2(r.v[c][k], r.v[c][k + 1], cs[k], cs[k + 1]);
    }
  }
}

// Neox: dim j pairs with j + rope_dim/2. For a power-of-two rope_dim the partner differs in one index bit: a
// lane bit (exchanged by shuffle) or a chunk bit (already in this thread). Otherwise (guard neox_partner_reach)
// the partner is whole chunks away in this thread, or the whole rope lies in one warp's lanes of one chunk and
// the partner is kHalf / kVec lanes up (lower half) or down (upper half).
template <class Cfg>
__device__ __forceinline__ void rotate_neox(Row<Cfg>& r, const Operands<Cfg>& o) {
  using G = Geometry<Cfg>;
  constexpr int kHalf = Cfg::kRopeDim / 2;
  constexpr bool kPow2 = is_pow2(Cfg::kRopeDim);
  constexpr int kChunkElems = G::kVec * G::kT;
  float partner[G::kChunks][G::kVec];
#pragma unroll
  for (int c = 0; c < G::kChunks; ++c)
#pragma unroll
    for (int k = 0; k < G::kVec; ++k) {
      if constexpr (!kPow2 && kHalf % kChunkElems == 0) {  // whole chunks away: which way is known per chunk
        constexpr int kStep = kHalf / kChunkElems;
        const int j = c * kChunkElems - Cfg::kRopeBegin;  // the chunk's first rope index (uniform over lanes)
        const int other = j < 0 || j >= Cfg::kRopeDim ? c : (j < kHalf ? c + kStep : c - kStep);
        partner[c][k] = r.v[other < G::kChunks ? other : c][k];
      } else if constexpr (!kPow2) {  // within one warp's lanes of one chunk (the rope starts a warp's slice)
        constexpr int kLanes = kHalf / G::kVec;
        const int u = r.lane % G::kWarpLanes;  // the rope's lane within the warp's slice of the chunk
        const int src = u < kLanes ? u + kLanes : (u < 2 * kLanes ? u - kLanes : u);
        partner[c][k] = __shfl_sync(kWarp, r.v[c][k], src, G::kWarpLanes);
      } else if constexpr (kHalf < G::kVec * G::kT) {
        partner[c][k] = __shfl_xor_sync(kWarp, r.v[c][k], kHalf / G::kVec);
      } else {
        constexpr int kChunkBit = kHalf / (G::kVec * G::kT);
        const int other = (c ^ kChunkBit) < G::kChunks ? (c ^ kChunkBit) : c;  // c only outside the rope
        partner[c][k] = r.v[other][k];
      }
    }
#pragma unroll
  for (int c = 0; c < G::kChunks; ++c) {
    const int dim = r.first(c);
    if (!in_rope<Cfg>(dim)) continue;
    const int j = dim - Cfg::kRopeBegin;
    const bool upper = kPow2 ? (j & kHalf) != 0 : j >= kHalf;
    const float sign = upper ? 1.f : -1.f;  // lower half: x*cos - p*sin; upper: x*cos + p*sin
    const float* cs = o.f[c];
#pragma unroll
    for (int k = 0; k < G::kVec; ++k) {
      const float xc = __fmul_rn(r.v[c][k], cs[2 * k]);
      const float ps = __fmul_rn(partner[c][k], cs[2 * k + 1]);
      r.v[c][k] = __fmaf_rn(sign, ps, xc);
    }
  }
}

template <class Cfg>
__device__ __forceinline__ void rotate(Row<Cfg>& r, Operands<Cfg>& o, const float* freqs_row) {
  if constexpr (Cfg::kRopeDim > 0) {
    if constexpr (!Cfg::kPrefetch) load_freqs(o, r, freqs_row);
    if constexpr (Cfg::kNeox) {
      rotate_neox(r, o);
    } else {
      rotate_interleaved(r, o);
    }
  }
}

// ---- Walsh-Hadamard (Sylvester order), one butterfly stage per index bit, lowest bit first --

// The stages over the warp bits of a token of two or four warps (lane bits 32 and 64): each thread swaps its
// whole slice of the row with the same lane of the partner warp through shared memory, behind the token's
// named barrier, then takes the lane stage's butterfly (the same one rounding of a+b or a-b). Each stage has
// its own buffer, and the looping kernel alternates two sets by token parity (as the exchange slots above:
// a warp that runs ahead into the next token never overwrites values another warp has yet to read).
// Buffers are [pair][thread]: consecutive threads touch consecutive 8-byte words (no bank conflicts).
template <class Cfg>
__device__ __forceinline__ void warp_butterflies(Row<Cfg>& r) {
  using G = Geometry<Cfg>;
  if constexpr (G::kWarpsPerToken > 1) {
    constexpr int kStages = G::kWarpsPerToken == 4 ? 2 : 1;
    constexpr int kPairs = G::kChunks * G::kVec / 2;
    static_assert(2 * kStages * Cfg::kTokensPerBlock * kPairs * G::kT * sizeof(float2) <= kHadamardExchangeBytes,
                  "the Hadamard exchange fits its shared memory (guard hadamard_exchange_fits)");
    __shared__ float2 buf[2][kStages][Cfg::kTokensPerBlock][kPairs][G::kT];
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      const int m = 32 << s;
      float2 (*slot)[G::kT] = buf[r.parity][s][r.token];
#pragma unroll
      for (int c = 0; c < G::kChunks; ++c)
#pragma unroll
        for (int k = 0; k < G::kVec; k += 2) slot[(c * G::kVec + k) / 2][r.lane] = make_float2(r.v[c][k], r.v[c][k + 1]);
      token_barrier(r.token, Cfg::kThreadsPerToken);
      const float sign = (r.lane & m) ? -1.f : 1.f;
#pragma unroll
      for (int c = 0; c < G::kChunks; ++c)
#pragma unroll
        for (int k = 0; k < G::kVec; k += 2) {
          const float2 o = slot[(c * G::kVec + k) / 2][r.lane ^ m];
          r.v[c][k] = __fmaf_rn(sign, r.v[c][k], o.x);
          r.v[c][k + 1] = __fmaf_rn(sign, r.v[c][k + 1], o.y);
        }
    }
  }
}

template <class Cfg>
__device__ __forceinline__ void hadamard(Row<Cfg>& r) {
  using G = Geometry<Cfg>;
  if constexpr (Cfg::kHadamard) {
#pragma unroll
    for (int c = 0; c < G::kChunks; ++c)
#pragma unroll
      for (int k = 0; k < G::kVec; k += 2) butterfly(r.v[c][k], r.v[c][k + 1]);
#pragma unroll
    for (int m = 2; m < G::kVec; m <<= 1)
#pragma unroll
      for (int c = 0; c < G::kChunks; ++c)
#pragma unroll
        for (int k = 0; k < G::kVec; k += 2)
          if (!(k & m)) butterfly2(r.v[c][k], r.v[c][k + 1], r.v[c][k | m], r.v[c][(k | m) + 1]);
#pragma unroll
    for (int m = 1; m < G::kWarpLanes; m <<= 1) {
      // lower lane: v + other; upper lane: other - v. One rounding either way, as in a+b / a-b.
      const float sign = (r.lane & m) ? -1.f : 1.f;
#pragma unroll
      for (int c = 0; c < G::kChunks; ++c)
#pragma unroll
        for (int k = 0; k < G::kVec; k += 2) lane_butterfly2(r.v[c][k], r.v[c][k + 1], sign, m);
    }
    warp_butterflies(r);
#pragma unroll
    for (int m = 1; m < G::kChunks; m <<= 1)
#pragma unroll
      for (int c = 0; c < G::kChunks; ++c)
#pragma unroll
        for (int k = 0; k < G::kVec; k += 2)
          if (!(c & m)) butterfly2(r.v[c][k], r.v[c][k + 1], r.v[c | m][k], r.v[c | m][k + 1]);
#pragma unroll
    for (int c = 0; c < G::kChunks; ++c)
#pragma unroll
      for (int k = 0; k < G::kVec; k += 2)
        scaled2(r.v[c][k], r.v[c][k + 1], r.v[c][k], r.v[c][k + 1], Cfg::kHadamardScale);
  }
}

// ---- quantize and store --------------------------------------------------------------------
//
// A row whose values are not all finite after the math (NaN or inf in x, weight or freqs, or a
// sum of squares that overflows float32) is written as canonical NaNs: bf16 0x7FC0, fp16 0x7E00, e4m3 0x7F,
// fp32 scale 0x7FC00000, UE8M0 scale 0xFF (fp4 codes 0, so every value decodes to NaN). The
// per-chunk amax uses a NaN-propagating max, so detecting such rows costs one vote per token.

constexpr uint32_t kBf16NanPair = 0x7FC07FC0u;
constexpr uint32_t kFp16NanPair = 0x7E007E00u;
constexpr uint32_t kE4m3NanQuad = 0x7F7F7F7Fu;
constexpr uint8_t kUe8m0Nan = 0xFF;

template <class Cfg>
__device__ __forceinline__ float chunk_amax(const Row<Cfg>& r, int c) {
  float a[Cfg::kVec];
#pragma unroll
  for (int k = 0; k < Cfg::kVec; ++k) a[k] = fabsf(r.v[c][k]);
  return tree_max_nan<Cfg::kVec>(a);  // max is exact in any order: a tree only shortens the chain
}

// True for every lane of the token when any of its values is NaN or infinite.
template <class Cfg>
__device__ __forceinline__ bool row_not_finite(const Row<Cfg>& r, const float (&amax)[Geometry<Cfg>::kChunks]) {
  float m = 0.f;
#pragma unroll
  for (int c = 0; c < Geometry<Cfg>::kChunks; ++c) m = max_nan(m, amax[c]);
  const bool bad = !(m <= 3.402823466e38f);
  if constexpr (Geometry<Cfg>::kWarpsPerToken > 1) return token_any(r.token, Cfg::kThreadsPerToken, bad);
  return (__ballot_sync(kWarp, bad) & r.group) != 0;
}

// Two 16-bit floats in a word: fp16 for the fp16 store, else bf16 (round to nearest even).
template <class Cfg>
__device__ __forceinline__ uint32_t half_pair(float a, float b) {
  if constexpr (Cfg::kStore == Store::kFp16) return f16x2(a, b);
  else return bf16x2(a, b);
}

template <class Cfg>
__device__ __forceinline__ void store_half(const Row<Cfg>& r, int c, uint8_t* dst, bool nan_row, bool write) {
  constexpr uint32_t kNanPair = Cfg::kStore == Store::kFp16 ? kFp16NanPair : kBf16NanPair;
  uint32_t words[Cfg::kVec / 2];
#pragma unroll
  for (int k = 0; k < Cfg::kVec; k += 2) words[k / 2] = nan_row ? kNanPair : half_pair<Cfg>(r.v[c][k], r.v[c][k + 1]);
  if (write) store_packed<2 * Cfg::kVec, Cfg::kStoreAlign>(dst, words);
}

// Codes of v * inv_scale, inv_scale = RN(1 / scale): one multiply per value. For a power-of-two scale
// (FlashMLA) it equals v / scale; for the fp8 per-token scale it is the reference's RN(v * RN(1 / scale))
// (within 2 U of the quotient: the oracle allows it), two FMAs per value fewer than a corrected divide.
template <class Cfg>
__device__ __forceinline__ void store_e4m3(const Row<Cfg>& r, int c, float inv_scale, uint8_t* dst, bool nan_row,
                                           bool write) {
  float q[Cfg::kVec];
#pragma unroll
  for (int k = 0; k < Cfg::kVec; k += 2) scaled2(q[k], q[k + 1], r.v[c][k], r.v[c][k + 1], inv_scale);
  uint32_t words[(Cfg::kVec + 3) / 4] = {};
#pragma unroll
  for (int k = 0; k < Cfg::kVec; k += 2) words[k / 4] |= e4m3x2(q[k], q[k + 1]) << (8 * (k % 4));
#pragma unroll
  for (int w = 0; w < (Cfg::kVec + 3) / 4; ++w) words[w] = nan_row ? kE4m3NanQuad : words[w];
  if (write) store_packed<Cfg::kVec, Cfg::kStoreAlign>(dst, words);
}

// vLLM's indexer writer (kFp8Vllm, kFp8VllmUe8m0): codes of v / scale, a correctly rounded divide as
// vLLM's fp8::scaled_convert computes them.
template <class Cfg>
__device__ __forceinline__ void store_e4m3_divided(const Row<Cfg>& r, int c, float scale, uint8_t* dst, bool nan_row,
                                                   bool write) {
  uint32_t words[(Cfg::kVec + 3) / 4] = {};
#pragma unroll
  for (int k = 0; k < Cfg::kVec; k += 2)
    words[k / 4] |= e4m3x2(__fdiv_rn(r.v[c][k], scale), __fdiv_rn(r.v[c][k + 1], scale)) << (8 * (k % 4));
#pragma unroll
  for (int w = 0; w < (Cfg::kVec + 3) / 4; ++w) words[w] = nan_row ? kE4m3NanQuad : words[w];
  if (write) store_packed<Cfg::kVec, Cfg::kStoreAlign>(dst, words);
}

// Per-token fp32 scale = max(amax, 1e-4) / 448 over the whole row; vLLM's ue8m0 option rounds it up to a
// power of two with exp2f(ceilf(log2f(scale))), the expression vLLM's kernel evaluates.
template <class Cfg>
__device__ __forceinline__ void store_fp8_per_token(const Row<Cfg>& r, const float (&chunk)[Geometry<Cfg>::kChunks], bool nan_row, uint8_t* page,
                                                    int off, bool write) {
  float amax = 0.f;
#pragma unroll
  for (int c = 0; c < Geometry<Cfg>::kChunks; ++c) amax = fmaxf(amax, chunk[c]);
  amax = group_max_nonneg<Geometry<Cfg>::kWarpLanes>(amax);  // 16 or 32 lanes: one redux instead of 4-5 shuffle stages
  amax = across_warps<Cfg, MaxNan>(r, kAmaxMax, amax);
  float scale = nan_row ? __uint_as_float(0x7FC00000u) : div_by<kE4m3Max>(fmaxf(amax, kAmaxFloor));
  if constexpr (Cfg::kStore == Store::kFp8VllmUe8m0) {
    if (!nan_row) scale = exp2f(ceilf(log2f(scale)));  // a NaN row keeps the canonical NaN scale bytes
  }
  if constexpr (Cfg::kStore == Store::kFp8E4m3) {
    const float inv_scale = rcp_rn_in_range(scale);  // scale is in [1e-4 / 448, FLT_MAX / 448] (or the NaN)
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
      store_e4m3(r, c, inv_scale, page + Cfg::kValueBase + off * Cfg::kValueStride + r.first(c), nan_row, write);
  } else {
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
      store_e4m3_divided(r, c, scale, page + Cfg::kValueBase + off * Cfg::kValueStride + r.first(c), nan_row, write);
  }
  if (write && r.lane == 0) *reinterpret_cast<float*>(page + Cfg::kScaleBase + off * Cfg::kScaleStride) = scale;
}

// e2m1 pairs with one UE8M0 scale per 32 dims; a group spans 32 / kVec lanes of one chunk.
template <class Cfg>
__device__ __forceinline__ void store_fp4(const Row<Cfg>& r, const float (&chunk)[Geometry<Cfg>::kChunks], bool nan_row, uint8_t* page, int off,
                                          bool write) {
  constexpr int kGroupLanes = 32 / Cfg::kVec;
#pragma unroll
  for (int c = 0; c < Geometry<Cfg>::kChunks; ++c) {
    const int e = pow2_scale_exponent<kE2m1Max>(group_max_nonneg<kGroupLanes>(chunk[c]));  // NaN: see store_flashmla
    const float inv_scale = exp2_int(-e);  // v * 2^-e is exactly v / 2^e: no division needed
    float q[Cfg::kVec];
#pragma unroll
    for (int k = 0; k < Cfg::kVec; k += 2) scaled2(q[k], q[k + 1], r.v[c][k], r.v[c][k + 1], inv_scale);
    uint32_t packed[1] = {nan_row ? 0u : e2m1_pack(q)};  // kVec / 2 <= 4 bytes of e2m1 pairs, low nibble = even dim
    const int dim = r.first(c);
    if (!write) continue;
    store_packed<Cfg::kVec / 2, Cfg::kStoreAlign>(page + Cfg::kValueBase + off * Cfg::kValueStride + dim / 2, packed);
    if ((r.lane & (kGroupLanes - 1)) == 0)
      page[Cfg::kScaleBase + off * Cfg::kScaleStride + dim / 32] = nan_row ? kUe8m0Nan : static_cast<uint8_t>(e + 127);
  }
}

// FlashMLA main KV: nope dims as e4m3 with one UE8M0 scale per 64 dims, roped dims as bf16.
template <class Cfg>
__device__ __forceinline__ void store_flashmla(const Row<Cfg>& r, const float (&chunk)[Geometry<Cfg>::kChunks], bool nan_row, uint8_t* page, int off,
                                               bool write) {
  constexpr int kGroupLanes = 64 / Cfg::kVec;
  constexpr int kNope = Cfg::kHeadDim - Cfg::kRopeDim;
#pragma unroll
  for (int c = 0; c < Geometry<Cfg>::kChunks; ++c) {
    // 16- or 32-lane groups (vec 4 or 2) take one redux pair instead of 4-5 shuffle stages. A chunk amax may be NaN
    // here, which the redux lets win: such a row is not finite, so the vote writes its NaN bytes whatever e is.
    const float amax = group_max_nonneg<kGroupLanes>(chunk[c]);
    const int dim = r.first(c);
    if (dim < kNope) {
      const int e = pow2_scale_exponent<kE4m3Max>(amax);
      store_e4m3(r, c, exp2_int(-e), page + Cfg::kValueBase + off * Cfg::kValueStride + dim, nan_row, write);
      if (write && (r.lane & (kGroupLanes - 1)) == 0)
        page[Cfg::kScaleBase + off * Cfg::kScaleStride + dim / 64] = nan_row ? kUe8m0Nan : static_cast<uint8_t>(e + 127);
    } else {
      store_half(r, c, page + Cfg::kRopeBase + off * Cfg::kValueStride + 2 * (dim - kNope), nan_row, write);
    }
  }
}

// NVFP4 (FlashInfer's DeepSeek-V4 record): nope dims as e2m1 with one e4m3 scale per 16 dims, roped dims as
// bf16. Scale s = RN_sat(amax * RN(1/6)), codes of v * RN(1 / s) (0 for s = 0): FlashInfer takes both
// reciprocals with rcp.approx.ftz, which equals RN for 6 and for every e4m3 value (a GPU test checks all 127).
// Plain NVFP4 (kNvfp4): every dim is e2m1 (the row already multiplied by g, see store()).
constexpr float kSixth = 0.16666667f;  // RN(1/6)
template <class Cfg>
__device__ __forceinline__ void store_nvfp4(const Row<Cfg>& r, const float (&chunk)[Geometry<Cfg>::kChunks], bool nan_row, uint8_t* page,
                                            int off, bool write) {
  constexpr int kGroupLanes = 16 / Cfg::kVec;
  constexpr int kNope = Cfg::kStore == Store::kNvfp4 ? Cfg::kHeadDim : Cfg::kHeadDim - Cfg::kRopeDim;
  static_assert(Cfg::kThreadsPerToken * Cfg::kVec >= 16, "a 16-dim group must lie within one load step (implied by "
                "head_dim 512 and at most 64 values per thread)");
#pragma unroll
  for (int c = 0; c < Geometry<Cfg>::kChunks; ++c) {
    const float amax = group_max_nonneg<kGroupLanes>(chunk[c]);  // a NaN may win: the row's vote writes NaN bytes
    const int dim = r.first(c);
    if (dim < kNope) {
      const uint32_t scale_code = e4m3x2(amax * kSixth, 0.f) & 0xFFu;
      const float scale = __half2float(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(scale_code), __NV_E4M3));
      const float inv = scale == 0.f ? 0.f : __frcp_rn(scale);
      float q[Cfg::kVec];
#pragma unroll
      for (int k = 0; k < Cfg::kVec; k += 2) scaled2(q[k], q[k + 1], r.v[c][k], r.v[c][k + 1], inv);
      uint32_t packed[1] = {nan_row ? 0u : e2m1_pack_rne(q)};  // kVec / 2 <= 4 bytes, low nibble = even dim
      if (!write) continue;
      store_packed<Cfg::kVec / 2, Cfg::kStoreAlign>(page + Cfg::kValueBase + off * Cfg::kValueStride + dim / 2, packed);
      if ((r.lane & (kGroupLanes - 1)) == 0)
        page[Cfg::kScaleBase + off * Cfg::kScaleStride + dim / 16] = nan_row ? 0x7F : static_cast<uint8_t>(scale_code);
    } else {
      store_half(r, c, page + Cfg::kRopeBase + off * Cfg::kValueStride + 2 * (dim - kNope), nan_row, write);
    }
  }
}

template <class Cfg>
__device__ __forceinline__ void store(Row<Cfg>& r, float global_scale, uint8_t* page, int off, bool write) {
  if constexpr (Cfg::kRoundBf16) {
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
#pragma unroll
      for (int k = 0; k < Cfg::kVec; ++k) r.v[c][k] = bf16_round(r.v[c][k]);
  }
  if constexpr (kGlobalScale<Cfg::kStore>) {
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
#pragma unroll
      for (int k = 0; k < Cfg::kVec; ++k) r.v[c][k] = __fmul_rn(r.v[c][k], global_scale);
  }
  // Every store starts from the per-chunk amax and the row's NaN vote (see above).
  float chunk[Geometry<Cfg>::kChunks];
#pragma unroll
  for (int c = 0; c < Geometry<Cfg>::kChunks; ++c) chunk[c] = chunk_amax(r, c);
  const bool nan_row = row_not_finite(r, chunk);
  if constexpr (Cfg::kStore == Store::kBf16 || Cfg::kStore == Store::kFp16) {
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
      store_half(r, c, page + Cfg::kValueBase + off * Cfg::kValueStride + 2 * r.first(c), nan_row, write);
  } else if constexpr (Cfg::kStore == Store::kFp8E4m3 || Cfg::kStore == Store::kFp8Vllm ||
                       Cfg::kStore == Store::kFp8VllmUe8m0) {
    store_fp8_per_token(r, chunk, nan_row, page, off, write);
  } else if constexpr (Cfg::kStore == Store::kFp4E2m1) {
    store_fp4(r, chunk, nan_row, page, off, write);
  } else if constexpr (Cfg::kStore == Store::kFp8FlashMla) {
    store_flashmla(r, chunk, nan_row, page, off, write);
  } else if constexpr (Cfg::kStore == Store::kNvfp4Dsv4 || Cfg::kStore == Store::kNvfp4) {
    store_nvfp4(r, chunk, nan_row, page, off, write);
  } else if constexpr (Cfg::kStore == Store::kFp8Scaled) {  // the row already times RN(1 / s): plain codes
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
      store_e4m3(r, c, 1.f, page + Cfg::kValueBase + off * Cfg::kValueStride + r.first(c), nan_row, write);
  } else {
    static_assert(kNoStoreCode<Cfg::kStore>, "this store format has no device code in store()");
  }
}

// ---- the kernel ----------------------------------------------------------------------------

// Programmatic dependent launch: wait until the kernels this launch depends on have finished
// and their writes are visible (a no-op when launched without the PDL attribute), then let the
// next PDL launch start its own preamble. Every input is read after the wait.
__device__ __forceinline__ void pdl_wait_then_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// What a token needs from memory before any arithmetic: its indices and its row of x, kept as the
// loaded words (converted to float in process()), so a loop can hold the next token's loads in flight
// while it computes the current one without twice the registers of a float row.
template <class Cfg>
struct Fetched {
  static constexpr int kBytes = Cfg::kVec * Cfg::kInBytes;  // one chunk's vector of x
  static constexpr int kPieceBytes = kBytes > 16 ? 16 : kBytes;
  static constexpr int kPieces = kBytes / kPieceBytes;
  using W = typename Word<kPieceBytes>::type;
  W x[Geometry<Cfg>::kChunks][kPieces];
  int64_t token;  // the row read (padding lanes past the last token read the last one)
  int64_t loc;
  int64_t pos;
  bool in_range;
};

// Lanes past the last token redo the last token and write nothing: every lane of a warp stays on
// the path, so shuffles can name the whole warp (see kWarp). The index loads and the row load are
// issued together, before any test: one memory latency per token instead of three.
template <class Cfg>
__device__ __forceinline__ void fetch(Fetched<Cfg>& f, const Params& p, int64_t slot_token, int lane) {
  using G = Geometry<Cfg>;
  using F = Fetched<Cfg>;
  f.in_range = slot_token < p.num_tokens;
  f.token = f.in_range ? slot_token : p.num_tokens - 1;
  // Row r is head r % kHeads of token r / kHeads; its slot is the token's slot x kHeads + head (NHD).
  const int64_t token = f.token / Cfg::kHeads;
  const int head = static_cast<int>(f.token % Cfg::kHeads);
  f.loc = Cfg::kTokenSlots ? token : load_index(p.out_loc, p.out_loc_i64, token);
  if constexpr (Cfg::kHeads > 1) f.loc = f.loc >= 0 ? f.loc * Cfg::kHeads + head : -1;
  f.pos = Cfg::kRopeDim > 0 ? load_index(p.positions, p.positions_i64, token) : 0;
  const auto* row = reinterpret_cast<const uint8_t*>(static_cast<const typename Cfg::In*>(p.x) + token * p.x_row_stride +
                                                     head * Cfg::kHeadDim);
#pragma unroll
  for (int c = 0; c < G::kChunks; ++c)
#pragma unroll
    for (int i = 0; i < F::kPieces; ++i)
      f.x[c][i] = __ldg(reinterpret_cast<const typename F::W*>(row + ((c * G::kT + lane) * G::kVec) * Cfg::kInBytes +
                                                                i * F::kPieceBytes));
}

template <class Cfg>
__device__ __forceinline__ void unpack_row(Row<Cfg>& r, const Fetched<Cfg>& f) {
  using F = Fetched<Cfg>;
  constexpr int kPer = Cfg::kVec / F::kPieces;  // elements per piece
#pragma unroll
  for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
#pragma unroll
    for (int i = 0; i < F::kPieces; ++i) {
      const auto* elems = reinterpret_cast<const typename Cfg::In*>(&f.x[c][i]);
#pragma unroll
      for (int k = 0; k < kPer; ++k) r.v[c][i * kPer + k] = to_float(elems[k]);
    }
}

// Everything after the loads for one token: operands, norm, RoPE, Hadamard, quantize and store.
template <class Cfg>
__device__ __forceinline__ void process(const Fetched<Cfg>& f, const Params& p, int parity) {
  using G = Geometry<Cfg>;
  Row<Cfg> r;
  r.lane = threadIdx.x % G::kT;
  r.group = G::kT >= 32 ? kWarp : ((1u << G::kT) - 1u) << ((threadIdx.x & 31) & ~(G::kT - 1));
  r.token = threadIdx.x / G::kT;
  r.parity = parity;
  float global_scale = 1.f;
  if constexpr (kGlobalScale<Cfg::kStore>) global_scale = __ldg(p.global_scale);
  if constexpr (kScaleReciprocal<Cfg::kStore>) global_scale = __frcp_rn(global_scale);
  unpack_row(r, f);
  const bool pos_ok = Cfg::kRopeDim == 0 || (f.pos >= 0 && f.pos < p.max_pos);
  const float* freqs_row = p.freqs + (pos_ok ? f.pos : 0) * Cfg::kRopeDim;  // never read out of bounds
  Operands<Cfg> o;
  if constexpr (Cfg::kPrefetch) {
    load_weights(o, r, p);
    if (pos_ok) load_freqs(o, r, freqs_row);
  }
  // Padding rows, slots outside the pool and positions outside freqs are computed but not written.
  const bool write = f.in_range && f.loc >= 0 && f.loc < p.num_slots && pos_ok;
  // The norm runs before the early exit: it needs only x (and the weights), so it overlaps the freqs
  // load, and x's loads stay at entry (with the exit first, nvcc sinks them below it: one more
  // round of memory latency per call, seen in the SASS).
  if constexpr (Cfg::kRopeFirst) {  // norm_order: rope_then_norm: the norm runs on the rotated row
    if (!__any_sync(kWarp, write)) return;
    rotate(r, o, freqs_row);
    normalize(r, o, p);
  } else {
    normalize(r, o, p);
    if (!__any_sync(kWarp, write)) return;  // the whole warp skips the token together
    rotate(r, o, freqs_row);
  }
  hadamard(r);
  const int64_t safe_loc = write ? f.loc : 0;
  constexpr int kRowsPerPage = Cfg::kPageSize * Cfg::kHeads;
  const int64_t page_bytes = Cfg::kTokenSlots ? p.page_stride : Cfg::kPageStride;
  if constexpr (Cfg::kHnd) {  // record s * heads + h of slot s at h * page_size + s % page_size (HND)
    const int64_t slot = safe_loc / Cfg::kHeads;
    store(r, global_scale, p.cache + (slot / Cfg::kPageSize) * page_bytes,
          static_cast<int>(safe_loc % Cfg::kHeads) * Cfg::kPageSize + static_cast<int>(slot % Cfg::kPageSize), write);
  } else {
    store(r, global_scale, p.cache + (safe_loc / kRowsPerPage) * page_bytes,
          static_cast<int>(safe_loc % kRowsPerPage), write);
  }
}

template <class Cfg>
__global__ void __launch_bounds__(Geometry<Cfg>::kBlockThreads) fused_norm_rope_store_kernel(const Params p) {
  using G = Geometry<Cfg>;
  pdl_wait_then_release();
  const int lane = threadIdx.x % G::kT;
  const int64_t first = int64_t(blockIdx.x) * Cfg::kTokensPerBlock + threadIdx.x / G::kT;
  Fetched<Cfg> cur;
  fetch(cur, p, first, lane);
  if constexpr (!Cfg::kLoop) {
    process(cur, p, 0);
  } else {
    // A grid of a few waves walks the token blocks: the next block's loads are issued before the
    // current token is computed (software pipelining across tokens), and no block is launched per
    // 16 tokens. `more` is the same for the whole block, so the shuffles stay warp-uniform.
    const int64_t num_blocks = (p.num_tokens + Cfg::kTokensPerBlock - 1) / Cfg::kTokensPerBlock;
    int parity = 0;
#pragma unroll 1
    for (int64_t b = blockIdx.x; b < num_blocks; b += gridDim.x, parity ^= 1) {
      Fetched<Cfg> next = cur;  // after the last block: a copy of cur, never read
      const bool more = b + gridDim.x < num_blocks;
      if (more) fetch(next, p, first + (b - blockIdx.x + gridDim.x) * Cfg::kTokensPerBlock, lane);
      process(cur, p, parity);
      cur = next;
    }
  }
}

// ---- launch groups ---------------------------------------------------------------------------
//
// A launch group runs up to three variants (its members: an attention layer's Q output and K and V appends)
// over the same tokens in one launch. The grid's token blocks are the members' blocks one after another; a
// block runs the member its index falls in, with that member's configuration (every member shares the
// launch's block shape). Each member's path is the single variant's (fetch, process): same bytes.
constexpr int kMaxMembers = 3;

struct GroupParams {
  Params part[kMaxMembers];
  int64_t blocks[kMaxMembers];  // token blocks of each member
  int64_t total;  // their sum
};

template <class Cfg>
__device__ __forceinline__ void member_block(const Params& p, int64_t block, int parity) {
  using G = Geometry<Cfg>;
  Fetched<Cfg> f;
  fetch(f, p, block * Cfg::kTokensPerBlock + threadIdx.x / G::kT, static_cast<int>(threadIdx.x % G::kT));
  process(f, p, parity);
}

template <int I, class Cfg, class... Rest>
__device__ __forceinline__ void group_block(const GroupParams& g, int64_t block, int parity) {
  if (block < g.blocks[I]) {
    member_block<Cfg>(g.part[I], block, parity);
  } else if constexpr (sizeof...(Rest) > 0) {
    group_block<I + 1, Rest...>(g, block - g.blocks[I], parity);
  }
}

template <class First, class... Rest>
__global__ void __launch_bounds__(Geometry<First>::kBlockThreads) fused_group_kernel(const GroupParams g) {
  static_assert(sizeof...(Rest) < kMaxMembers, "a launch group has at most three members");
  static_assert(((Geometry<Rest>::kBlockThreads == Geometry<First>::kBlockThreads) && ...),
                "the members of a launch group share one block shape");
  pdl_wait_then_release();
  if constexpr (!First::kLoop) {
    group_block<0, First, Rest...>(g, blockIdx.x, 0);
  } else {  // a wave of blocks walks the members' blocks (no cross-token prefetch: members differ)
    int parity = 0;
#pragma unroll 1
    for (int64_t b = blockIdx.x; b < g.total; b += gridDim.x, parity ^= 1) group_block<0, First, Rest...>(g, b, parity);
  }
}

// ---- host entry --------------------------------------------------------------------------
//
// The argument checks are generated per variant from one table (kernelgen/codegen/checks.py),
// which the Python op also interprets: both refuse the same tensors with the same words. These
// are the pieces the generated checks use; the descriptions use torch's names for dtypes and devices.

inline bool has_dtype(const tvm::ffi::TensorView& t, int code, int bits) {
  return t.dtype().code == code && t.dtype().bits == bits && t.dtype().lanes == 1;
}

inline bool same_device(const tvm::ffi::TensorView& t, const tvm::ffi::TensorView& x) {
  return t.device().device_type == x.device().device_type && t.device().device_id == x.device().device_id;
}

// The DLTensor a view holds (TensorView's only member): its strides may be null, which DLPack allows
// for compact row-major tensors and TensorView::strides() refuses.
inline const DLTensor& raw(const tvm::ffi::TensorView& t) {
  static_assert(std::is_standard_layout_v<tvm::ffi::TensorView> && sizeof(tvm::ffi::TensorView) == sizeof(DLTensor),
                "tvm::ffi::TensorView is expected to hold exactly one DLTensor");
  return *reinterpret_cast<const DLTensor*>(&t);
}

// Element stride of dim i (null strides: compact row-major).
inline int64_t stride_of(const tvm::ffi::TensorView& t, int i) {
  const DLTensor& d = raw(t);
  if (d.strides != nullptr) return d.strides[i];
  int64_t s = 1;
  for (int k = d.ndim - 1; k > i; --k) s *= d.shape[k];
  return s;
}

// The first element's address: data plus byte_offset, as DLPack defines it.
inline const uint8_t* address(const tvm::ffi::TensorView& t) {
  return static_cast<const uint8_t*>(t.data_ptr()) + t.byte_offset();
}

inline int64_t address_offset(const tvm::ffi::TensorView& t, int bytes) {
  return static_cast<int64_t>(reinterpret_cast<uintptr_t>(address(t)) % bytes);
}

// Rows of a 2-D tensor are contiguous and each starts `align`-byte aligned (given an aligned start).
// One half of a joint K/V pool [num_pages, 2, page]: each page contiguous, pages page_stride bytes apart.
inline bool pool_half(const tvm::ffi::TensorView& t, int64_t page_stride) {
  return stride_of(t, 1) == 1 && (t.size(0) <= 1 || stride_of(t, 0) == page_stride);
}

inline bool rows_aligned(const tvm::ffi::TensorView& t, int elem_bytes, int align) {
  return stride_of(t, 1) == 1 && (t.size(0) <= 1 || stride_of(t, 0) * elem_bytes % align == 0);
}

std::string dtype_name(DLDataType t);  // generated from kernelgen's dtype name table, beside the checks

inline std::string int_list(const int64_t* v, int n) {
  std::string out = "[";
  for (int i = 0; i < n; ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

// "float32 [4, 128] on cuda:0", as Python prints a torch tensor's dtype, shape and device.
inline std::string describe(const tvm::ffi::TensorView& t) {
  const DLDevice d = t.device();
  const std::string device = d.device_type == kDLCUDA ? "cuda:" + std::to_string(d.device_id)
                             : d.device_type == kDLCPU ? std::string("cpu")
                                                       : "dlpack device " + std::to_string(d.device_type) + ":" +
                                                             std::to_string(d.device_id);
  return dtype_name(t.dtype()) + " " + int_list(t.shape().data(), t.ndim()) + " on " + device;
}

inline std::string describe_strides(const tvm::ffi::TensorView& t) {
  std::vector<int64_t> strides(t.ndim());
  for (int i = 0; i < t.ndim(); ++i) strides[i] = stride_of(t, i);
  return "strides " + int_list(strides.data(), t.ndim());
}

inline std::string describe_address(const tvm::ffi::TensorView& t, int bytes) {
  return "an address " + std::to_string(address_offset(t, bytes)) + " bytes past a " + std::to_string(bytes) +
         "-byte boundary";
}

// How many blocks of this configuration the device holds at once (one wave): the grid of a looping
// configuration. Asked once per device and configuration (the answer depends on registers and SMs);
// callers on several host threads may ask at once: they compute the same answer, stored atomically.
template <class Cfg>
int64_t resident_blocks(int device) {
  constexpr int kDevices = 64;  // beyond that (not a machine that exists), asked on every call
  static std::atomic<int64_t> cached[kDevices];  // static storage: zero until first asked
  int64_t blocks = (device >= 0 && device < kDevices) ? cached[device].load(std::memory_order_relaxed) : 0;
  if (blocks == 0) {
    int per_sm = 0, sms = 0;
    cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fused_norm_rope_store_kernel<Cfg>,
                                                                    Geometry<Cfg>::kBlockThreads, 0);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    TVM_FFI_CHECK(err == cudaSuccess, RuntimeError) << Cfg::kName << ": occupancy query failed: " << cudaGetErrorString(err);
    blocks = std::max<int64_t>(1, int64_t(per_sm) * sms);
    if (device >= 0 && device < kDevices) cached[device].store(blocks, std::memory_order_relaxed);
  }
  return blocks;
}

template <class Cfg>
void run(tvm::ffi::TensorView x, tvm::ffi::TensorView weight, tvm::ffi::TensorView bias,
         tvm::ffi::TensorView freqs, tvm::ffi::TensorView positions, tvm::ffi::TensorView out_loc,
         tvm::ffi::TensorView cache, tvm::ffi::TensorView scale, double eps, bool pdl) {  // arguments already checked
  const int64_t num_tokens = x.size(0) * Cfg::kHeads;
  if (num_tokens == 0) return;
  Params p{};
  p.x = address(x);
  p.x_row_stride = stride_of(x, 0);
  p.weight = address(weight);
  p.bias = address(bias);
  p.freqs = reinterpret_cast<const float*>(address(freqs));
  p.max_pos = Cfg::kRopeDim > 0 ? freqs.size(0) : 0;
  p.positions = address(positions);
  p.positions_i64 = positions.dtype().bits == 64;
  p.out_loc = address(out_loc);
  p.out_loc_i64 = out_loc.dtype().bits == 64;
  p.cache = const_cast<uint8_t*>(address(cache));
  p.num_slots = cache.size(0) * Cfg::kPageSize * Cfg::kHeads;
  p.num_tokens = num_tokens;
  p.eps = static_cast<float>(eps);
  p.global_scale = reinterpret_cast<const float*>(address(scale));
  p.page_stride = stride_of(cache, 0);
  tvm::ffi::CUDADeviceGuard guard(x.device().device_id);
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(x.device().device_type, x.device().device_id));
  using G = Geometry<Cfg>;
  int64_t blocks = (num_tokens + Cfg::kTokensPerBlock - 1) / Cfg::kTokensPerBlock;
  if constexpr (Cfg::kLoop) blocks = std::min(blocks, resident_blocks<Cfg>(x.device().device_id));
  cudaLaunchConfig_t launch = {};
  launch.gridDim = dim3(static_cast<unsigned>(blocks));
  launch.blockDim = dim3(G::kBlockThreads);
  launch.stream = stream;
  cudaLaunchAttribute attrs[1];
  attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[0].val.programmaticStreamSerializationAllowed = 1;
  launch.attrs = attrs;
  launch.numAttrs = pdl ? 1 : 0;
  cudaError_t err = cudaLaunchKernelEx(&launch, fused_norm_rope_store_kernel<Cfg>, p);
  if (err == cudaSuccess) err = cudaGetLastError();
  TVM_FFI_CHECK(err == cudaSuccess, RuntimeError) << Cfg::kName << ": launch failed: " << cudaGetErrorString(err);
}

// ---- launch groups, host side: the same steps as run() for a group's kernel (run() and resident_blocks()
// above stay as they are: tuning records are keyed to their text, tools/rekey_records.py).

// How many blocks of a kernel the device holds at once (one wave): the grid of a looping configuration.
// Asked once per device and kernel (Key names it; the answer depends on registers and SMs); callers on
// several host threads may ask at once: they compute the same answer, stored atomically.
template <class Key, class Kernel>
int64_t resident_blocks_of(Kernel kernel, int threads, int device) {
  constexpr int kDevices = 64;  // beyond that (not a machine that exists), asked on every call
  static std::atomic<int64_t> cached[kDevices];  // static storage: zero until first asked
  int64_t blocks = (device >= 0 && device < kDevices) ? cached[device].load(std::memory_order_relaxed) : 0;
  if (blocks == 0) {
    int per_sm = 0, sms = 0;
    cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    TVM_FFI_CHECK(err == cudaSuccess, RuntimeError) << Key::kName << ": occupancy query failed: " << cudaGetErrorString(err);
    blocks = std::max<int64_t>(1, int64_t(per_sm) * sms);
    if (device >= 0 && device < kDevices) cached[device].store(blocks, std::memory_order_relaxed);
  }
  return blocks;
}

// The kernel's parameters for one member's tensors (arguments already checked), as run() fills them.
template <class Cfg>
Params make_params(tvm::ffi::TensorView x, tvm::ffi::TensorView weight, tvm::ffi::TensorView bias,
                   tvm::ffi::TensorView freqs, tvm::ffi::TensorView positions, tvm::ffi::TensorView out_loc,
                   tvm::ffi::TensorView cache, tvm::ffi::TensorView scale, double eps) {
  Params p{};
  p.x = address(x);
  p.x_row_stride = stride_of(x, 0);
  p.weight = address(weight);
  p.bias = address(bias);
  p.freqs = reinterpret_cast<const float*>(address(freqs));
  p.max_pos = Cfg::kRopeDim > 0 ? freqs.size(0) : 0;
  p.positions = address(positions);
  p.positions_i64 = positions.dtype().bits == 64;
  p.out_loc = address(out_loc);
  p.out_loc_i64 = out_loc.dtype().bits == 64;
  p.cache = const_cast<uint8_t*>(address(cache));
  p.num_slots = cache.size(0) * Cfg::kPageSize * Cfg::kHeads;
  p.num_tokens = x.size(0) * Cfg::kHeads;
  p.eps = static_cast<float>(eps);
  p.global_scale = reinterpret_cast<const float*>(address(scale));
  p.page_stride = stride_of(cache, 0);
  return p;
}

template <class Kernel, class Arg>
void launch_kernel(const char* name, Kernel kernel, const Arg& arg, int64_t blocks, int threads, int device, bool pdl) {
  tvm::ffi::CUDADeviceGuard guard(device);
  cudaLaunchConfig_t launch = {};
  launch.gridDim = dim3(static_cast<unsigned>(blocks));
  launch.blockDim = dim3(threads);
  launch.stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, device));
  cudaLaunchAttribute attrs[1];
  attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[0].val.programmaticStreamSerializationAllowed = 1;
  launch.attrs = attrs;
  launch.numAttrs = pdl ? 1 : 0;
  cudaError_t err = cudaLaunchKernelEx(&launch, kernel, arg);
  if (err == cudaSuccess) err = cudaGetLastError();
  TVM_FFI_CHECK(err == cudaSuccess, RuntimeError) << name << ": launch failed: " << cudaGetErrorString(err);
}

// One launch of a group's members (First's configuration decides the loop; x0 is the first member's input).
template <class First, class... Rest>
void run_group(const char* name, tvm::ffi::TensorView x0, bool pdl, const Params (&parts)[1 + sizeof...(Rest)]) {
  GroupParams g{};
  constexpr int kTokens[] = {First::kTokensPerBlock, Rest::kTokensPerBlock...};
  for (int i = 0; i < 1 + int(sizeof...(Rest)); ++i) {
    g.part[i] = parts[i];
    g.blocks[i] = (parts[i].num_tokens + kTokens[i] - 1) / kTokens[i];
    g.total += g.blocks[i];
  }
  if (g.total == 0) return;
  const int device = x0.device().device_id;
  int64_t blocks = g.total;
  if constexpr (First::kLoop)
    blocks = std::min(blocks, resident_blocks_of<First>(fused_group_kernel<First, Rest...>, Geometry<First>::kBlockThreads, device));
  launch_kernel(name, fused_group_kernel<First, Rest...>, g, blocks, Geometry<First>::kBlockThreads, device, pdl);
}

}  // namespace kernelgen
