// kernelgen/warps.cuh: the reductions of a token whose threads span two or four warps (shared memory, named barriers).
#pragma once

#include "kernelgen/params.cuh"

namespace kernelgen {

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
// their device-code keys differ) that no GPU has timed or verified here.
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

}  // namespace kernelgen
