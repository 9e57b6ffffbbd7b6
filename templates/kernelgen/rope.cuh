// kernelgen/rope.cuh: rotary position embedding, interleaved and neox, on a thread's slice of the row.
#pragma once

#include "kernelgen/norm.cuh"

namespace kernelgen {

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
      rotate2<Cfg::kPackedF32>(r.v[c][k], r.v[c][k + 1], cs[k], cs[k + 1]);
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
      } else if constexpr (kHalf < kChunkElems) {
        partner[c][k] = __shfl_xor_sync(kWarp, r.v[c][k], kHalf / G::kVec);
      } else {
        constexpr int kChunkBit = kHalf / kChunkElems;
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
__device__ __forceinline__ void rotate(Row<Cfg>& r, Operands<Cfg>& o, const FreqRows& freqs_row) {
  if constexpr (Cfg::kRopeDim > 0) {
    if constexpr (!Cfg::kPrefetch && !Cfg::kEarlyReads) load_freqs(o, r, freqs_row);  // else loaded already
    if constexpr (Cfg::kNeox) {
      rotate_neox(r, o);
    } else {
      rotate_interleaved(r, o);
    }
  }
}

}  // namespace kernelgen
