// kernelgen/norm.cuh: RMSNorm and LayerNorm of a token's row, and the per-thread slices of its operands (weights, freqs).
#pragma once

#include "kernelgen/warps.cuh"

namespace kernelgen {

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

// Whether a dim is one the norm spans: every dim, or with norm_dims: nope the dims before the roped block (a vector
// lies wholly on one side: the rope_whole_vectors guard).
template <class Cfg>
__device__ __forceinline__ bool in_norm(int dim) {
  return !Cfg::kNormNope || dim < Cfg::kNormDims;
}

template <class Cfg>
__device__ __forceinline__ float sum_of_squares(const Row<Cfg>& r) {
  float sq[Geometry<Cfg>::kChunks * Cfg::kVec];
#pragma unroll
  for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
#pragma unroll
    for (int k = 0; k < Cfg::kVec; ++k)  // a dim outside the norm adds an exact 0
      sq[c * Cfg::kVec + k] = in_norm<Cfg>(r.first(c)) ? __fmul_rn(r.v[c][k], r.v[c][k]) : 0.f;
  return lane_sum<Cfg>(r, kSquareSum, sq);
}

// x / (the dims the norm spans) correctly rounded: an exact multiply for a power of two (no range check, no
// slow-path call on the chain), div.rn otherwise (sums may be zero, subnormal or infinite).
template <class Cfg>
__device__ __forceinline__ float div_by_norm_dims(float x) {
  if constexpr (is_pow2(Cfg::kNormDims)) {
    return __fmul_rn(x, 1.0f / Cfg::kNormDims);
  } else {
    return __fdiv_rn(x, float(Cfg::kNormDims));
  }
}

template <class Cfg>
__device__ __forceinline__ void center(Row<Cfg>& r) {
  float vals[Geometry<Cfg>::kChunks * Cfg::kVec];
#pragma unroll
  for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
#pragma unroll
    for (int k = 0; k < Cfg::kVec; ++k) vals[c * Cfg::kVec + k] = r.v[c][k];
  const float mean = div_by_norm_dims<Cfg>(lane_sum<Cfg>(r, kCenterSum, vals));
#pragma unroll
  for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
#pragma unroll
    for (int k = 0; k < Cfg::kVec; k += 2) sub2<Cfg::kPackedF32>(r.v[c][k], r.v[c][k + 1], mean);
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
  if constexpr (Cfg::kNorm == Norm::kRmsUnweighted) {  // no weight: times 1 (exact)
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
#pragma unroll
      for (int k = 0; k < Cfg::kVec; ++k) o.w[c][k] = 1.f;
  } else if constexpr (Cfg::kNorm != Norm::kNone) {
    using W = typename Cfg::Weight;
    const auto* w = static_cast<const W*>(p.weight);
    const auto* b = static_cast<const W*>(p.bias);
    // launch.warm_pass: ordinary loads, which stay after the PDL wait in the loop of its two passes (a read-only
    // load is loop-invariant there, and would be hoisted above the loop, before the wait); the dry pass skips them
    constexpr bool kPlain = Cfg::kWarmPass;
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c) {
      if (!in_norm<Cfg>(r.first(c))) continue;  // the weight covers the norm's dims only
      load_wide<W, Cfg::kVec, kPlain>(w + r.first(c), o.w[c]);
      if constexpr (Cfg::kNorm == Norm::kRmsGemma) {  // Gemma's (1 + w), rounded to float32 as its float32 add is
#pragma unroll
        for (int k = 0; k < Cfg::kVec; ++k) o.w[c][k] = __fadd_rn(1.f, o.w[c][k]);
      }
      if constexpr (Cfg::kNormBias) load_wide<W, Cfg::kVec, kPlain>(b + r.first(c), o.b[c]);
    }
  }
}

template <class Cfg>
__device__ __forceinline__ bool in_rope(int dim) {
  return dim >= Cfg::kRopeBegin && dim < Cfg::kRopeBegin + Cfg::kRopeDim;
}

// (cos, sin) pairs from a table that keeps the cos of every pair in its first half and the sins in its second:
// cos at `cos`, sin `half` floats further; dst gets them interleaved as the pairs table holds them.
template <int N, bool kPlain = false>
__device__ __forceinline__ void load_cos_sin(const float* cos, int half, float (&dst)[N]) {
  float c[N / 2], s[N / 2];
  load_wide<float, N / 2, kPlain>(cos, c);
  load_wide<float, N / 2, kPlain>(cos + half, s);
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

// The freqs rows a token's rotation reads: its position's row (t), and M-RoPE's height and width streams' rows.
struct FreqRows {
  const float* t;
  const float* h;  // M-RoPE only (kStreams == 3)
  const float* w;
};

// M-RoPE: the position stream pair `pair` takes its angle from (spec/ropes.py RopeStyle.pair_streams): contiguous
// sections T, H, W, or interleaved T H W T H W ... within 3 x sections.
// `third` is pair % 3 (the interleaved order's place in its T H W triple), given where the caller has it cheaper.
template <class Cfg>
__device__ __forceinline__ int stream_of(int pair, int third) {
  if constexpr (Cfg::kInterleavedStreams) {
    return (third == 1 && pair < 3 * Cfg::kSecH) ? 1 : ((third == 2 && pair < 3 * Cfg::kSecW) ? 2 : 0);
  } else {
    return pair < Cfg::kSecT ? 0 : (pair < Cfg::kSecT + Cfg::kSecH ? 1 : 2);
  }
}
template <class Cfg>
__device__ __forceinline__ int stream_of(int pair) {
  return stream_of<Cfg>(pair, pair % 3);
}

// cos_sin_cache (cos, sin) of pairs pair, pair + 1, ... each from its stream's row, interleaved as load_cos_sin's.
template <class Cfg, int N, bool kPlain = false>
__device__ __forceinline__ void load_cos_sin_streams(const FreqRows& f, int pair, float (&dst)[N]) {
  constexpr int kHalf = Cfg::kRopeDim / 2;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const int s = stream_of<Cfg>(pair + i);
    const float* row = s == 0 ? f.t : (s == 1 ? f.h : f.w);
    if constexpr (kPlain) {
      dst[2 * i] = row[pair + i];
      dst[2 * i + 1] = row[kHalf + pair + i];
    } else {
      dst[2 * i] = __ldg(row + pair + i);
      dst[2 * i + 1] = __ldg(row + kHalf + pair + i);
    }
  }
}

// The same values from whole vectors (launch.rope_rows): each stream's (cos, sin) of pairs pair, pair + 1, ...,
// then each pair's from its stream's. Three vector loads per chunk and a select per value instead of a scalar
// load per value behind its own row choice; pair % 3 is taken once and stepped (pair + i) % 3 = (pair % 3 + i % 3) % 3.
template <class Cfg, int N, bool kPlain = false>
__device__ __forceinline__ void load_cos_sin_rows(const FreqRows& f, int pair, float (&dst)[N]) {
  constexpr int kHalf = Cfg::kRopeDim / 2;
  float t[N], h[N], w[N];
  load_cos_sin<N, kPlain>(f.t + pair, kHalf, t);
  load_cos_sin<N, kPlain>(f.h + pair, kHalf, h);
  load_cos_sin<N, kPlain>(f.w + pair, kHalf, w);
  const int third = pair % 3;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const int step = third + i % 3;
    const int s = stream_of<Cfg>(pair + i, step >= 3 ? step - 3 : step);
    dst[2 * i] = s == 0 ? t[2 * i] : (s == 1 ? h[2 * i] : w[2 * i]);
    dst[2 * i + 1] = s == 0 ? t[2 * i + 1] : (s == 1 ? h[2 * i + 1] : w[2 * i + 1]);
  }
}

// The (cos, sin) values each rope chunk needs: interleaved pairs sit beside their dims; neox
// chunks need both halves' pair j, so 2 x kVec values. kPlain: ordinary loads (see load_floats).
template <class Cfg, bool kPlain = false>
__device__ __forceinline__ void load_freqs(Operands<Cfg>& o, const Row<Cfg>& r, const FreqRows& rows) {
  if constexpr (Cfg::kRopeDim > 0) {
    const float* f = rows.t;
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c) {
      const int dim = r.first(c);
      if (!in_rope<Cfg>(dim)) continue;
      const int j = dim - Cfg::kRopeBegin;
      if constexpr (Cfg::kStreams > 1) {  // M-RoPE (a cos_sin_cache and neox pairs: its guards)
        if constexpr (Cfg::kRopeRows) load_cos_sin_rows<Cfg, Operands<Cfg>::kFreqs, kPlain>(rows, neox_pair<Cfg>(j), o.f[c]);
        else load_cos_sin_streams<Cfg, Operands<Cfg>::kFreqs, kPlain>(rows, neox_pair<Cfg>(j), o.f[c]);
      } else if constexpr (Cfg::kRopeHalves) {  // vLLM's and FlashInfer's cos_sin_cache: two loads, interleaved here
        load_cos_sin<Operands<Cfg>::kFreqs, kPlain>(f + (Cfg::kNeox ? neox_pair<Cfg>(j) : j / 2), Cfg::kRopeDim / 2, o.f[c]);
      } else if constexpr (Cfg::kNeox) {
        load_wide<float, Operands<Cfg>::kFreqs, kPlain>(f + 2 * neox_pair<Cfg>(j), o.f[c]);
      } else {
        load_wide<float, Operands<Cfg>::kFreqs, kPlain>(f + j, o.f[c]);
      }
    }
  }
}

template <class Cfg>
__device__ __forceinline__ void normalize(Row<Cfg>& r, Operands<Cfg>& o, const Params& p) {
  if constexpr (Cfg::kNorm != Norm::kNone) {
    if constexpr (Cfg::kNorm == Norm::kLayer) center(r);
    const float mean_sq = div_by_norm_dims<Cfg>(sum_of_squares(r));
    // A sum of squares that overflows float32 cannot be normalized: NaN marks the row (see store). A select
    // after the root, not a branch around it: nvcc then hoists the eps test into the shuffle stages.
    const float root = inv_sqrt_rn(__fadd_rn(mean_sq, p.eps), p.eps);
    const float inv = isinf(mean_sq) ? __uint_as_float(0x7FC00000u) : root;
    if constexpr (!Cfg::kPrefetch && !Cfg::kWarmPass) load_weights(o, r, p);  // else process() reads them
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c) {
      if (!in_norm<Cfg>(r.first(c))) continue;  // norm_dims: nope: the roped dims are not normed
#pragma unroll
      for (int k = 0; k < Cfg::kVec; k += 2)
        scale2<Cfg::kPackedF32, Cfg::kNormBias>(r.v[c][k], r.v[c][k + 1], inv, o.w[c][k], o.w[c][k + 1],
                               Cfg::kNormBias ? o.b[c][k] : 0.f, Cfg::kNormBias ? o.b[c][k + 1] : 0.f);
    }
  }
}

}  // namespace kernelgen
