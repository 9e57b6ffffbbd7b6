// kernelgen/params.cuh: the kernel's parameters, its thread geometry and a thread's slice of a token's row.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "kernelgen/numeric.cuh"

namespace kernelgen {

enum class Norm { kNone, kRms, kLayer, kRmsGemma, kRmsUnweighted };  // kRmsGemma: RMSNorm times (1 + weight)
// The store formats of kernelgen/spec/formats.py, in its table's order (a pure test holds them equal).
enum class Store { kBf16, kFp8E4m3, kFp4E2m1, kFp8FlashMla, kFp8Vllm, kFp8VllmUe8m0, kNvfp4Dsv4, kNvfp4, kFp8Scaled, kFp16,
                   kFp8V41, kFp8V41Interleaved, kFp4V41, kFp4V41Interleaved, kFp8ScaledDivided, kFp8DsMla,
                   kFp8PerTokenHead, kInt8PerTokenHead, kMxfp4, kNvfp4Kv };
// The device encoders, one per quantization rule of the format table (formats.py ENCODERS): a format's Cfg names
// the encoder of its first part's rule, so a new format with a known rule needs no device code.
enum class Encoder { kHalf, kE4m3Token, kE2m1Ue8m0, kE4m3Groups, kE2m1E4m3, kE4m3, kE4m3TokenHead, kI8TokenHead };
constexpr int kNoMinExp = -127;  // kScaleMinExp of a format whose UE8M0 exponent is not floored
// How a format applies the per-tensor scale s read from Params::global_scale (the table's GLOBAL_OPS): not at all,
// the row times g = s, times RN(1 / s) (a dequantization scale, FlashInfer's), or divided by s (vLLM's).
enum class GlobalScale { kNone, kTimes, kTimesReciprocal, kDivide };
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
template <typename T, int N, bool kPlain = false>
__device__ __forceinline__ void load_wide(const T* src, float (&dst)[N]) {
  constexpr int kPiece = (N * sizeof(T) > 16) ? 16 / sizeof(T) : N;
#pragma unroll
  for (int i = 0; i < N; i += kPiece) {
    float part[kPiece];
    load_floats<T, kPiece, kPlain>(src + i, part);
#pragma unroll
    for (int j = 0; j < kPiece; ++j) dst[i + j] = part[j];
  }
}

}  // namespace kernelgen
