// kernelgen/hadamard.cuh: the Walsh-Hadamard transform across a token's threads (lane shuffles, then warp stages).
#pragma once

#include "kernelgen/rope.cuh"

namespace kernelgen {

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
          if (!(k & m)) butterfly2<Cfg::kPackedF32>(r.v[c][k], r.v[c][k + 1], r.v[c][k | m], r.v[c][(k | m) + 1]);
#pragma unroll
    for (int m = 1; m < G::kWarpLanes; m <<= 1) {
      // lower lane: v + other; upper lane: other - v. One rounding either way, as in a+b / a-b.
      const float sign = (r.lane & m) ? -1.f : 1.f;
#pragma unroll
      for (int c = 0; c < G::kChunks; ++c)
#pragma unroll
        for (int k = 0; k < G::kVec; k += 2) lane_butterfly2<Cfg::kPackedF32>(r.v[c][k], r.v[c][k + 1], sign, m);
    }
    warp_butterflies(r);
#pragma unroll
    for (int m = 1; m < G::kChunks; m <<= 1)
#pragma unroll
      for (int c = 0; c < G::kChunks; ++c)
#pragma unroll
        for (int k = 0; k < G::kVec; k += 2)
          if (!(c & m)) butterfly2<Cfg::kPackedF32>(r.v[c][k], r.v[c][k + 1], r.v[c | m][k], r.v[c | m][k + 1]);
#pragma unroll
    for (int c = 0; c < G::kChunks; ++c)
#pragma unroll
      for (int k = 0; k < G::kVec; k += 2)
        scaled2<Cfg::kPackedF32>(r.v[c][k], r.v[c][k + 1], r.v[c][k], r.v[c][k + 1], Cfg::kHadamardScale);
  }
}

}  // namespace kernelgen
