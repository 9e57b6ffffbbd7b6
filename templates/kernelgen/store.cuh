// kernelgen/store.cuh: quantizing a row and storing it in its page: every store format's encoder and byte placement.
#pragma once

#include "kernelgen/hadamard.cuh"

namespace kernelgen {

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
// kUnit: the row is already scaled (times RN(1 / s), or divided by s), and the codes are of its values as they are
// (without lean_math, of v * 1: the same codes, one multiply per value).
template <class Cfg, bool kUnit = false>
__device__ __forceinline__ void store_e4m3(const Row<Cfg>& r, int c, float inv_scale, uint8_t* dst, bool nan_row,
                                           bool write) {
  float q[Cfg::kVec];
#pragma unroll
  for (int k = 0; k < Cfg::kVec; k += 2) {
    if constexpr (kUnit && Cfg::kLeanMath) {
      q[k] = r.v[c][k];
      q[k + 1] = r.v[c][k + 1];
    } else {
      scaled2<Cfg::kPackedF32>(q[k], q[k + 1], r.v[c][k], r.v[c][k + 1], inv_scale);
    }
  }
  uint32_t words[(Cfg::kVec + 3) / 4] = {};
#pragma unroll
  for (int k = 0; k < Cfg::kVec; k += 2) words[k / 4] |= e4m3x2(q[k], q[k + 1]) << (8 * (k % 4));
#pragma unroll
  for (int w = 0; w < (Cfg::kVec + 3) / 4; ++w) words[w] = nan_row ? kE4m3NanQuad : words[w];
  if (write) store_packed<Cfg::kVec, Cfg::kStoreAlign>(dst, words);
}

// The e4m3 codes of RN(a[k] / b), correctly rounded divides kept out of line (launch.bracket_codes' rare path: a
// quotient near a rounding midpoint, a scale or dividend outside the bracket's range).
template <int N>
__device__ __forceinline__ void e4m3_codes_divided(uint32_t (&codes)[(N + 3) / 4], const float (&a)[N], float b) {
#pragma unroll
  for (int w = 0; w < (N + 3) / 4; ++w) codes[w] = 0u;
#pragma unroll
  for (int k = 0; k < N; k += 2) codes[k / 4] |= e4m3x2(div_rn_call(a[k], b), div_rn_call(a[k + 1], b)) << (8 * (k % 4));
}

// Codes of v / scale, a correctly rounded divide as vLLM's fp8::scaled_convert computes them: vLLM's indexer writer
// (kFp8Vllm, kFp8VllmUe8m0, a per-token scale) and, with launch.bracket_codes, the chunks of a row divided by a
// per-tensor scale. With the flag, `bracket` (the scale in [2^-60, 2^60] and every |v / scale| <= 2^120, the caller's
// test, once per row or chunk) and inv_scale = rcp_rn_in_range(scale) let the codes be read off one multiply
// (e4m3_codes_bracketed); near a rounding midpoint, or without `bracket`, the divide runs.
template <class Cfg>
__device__ __forceinline__ void store_e4m3_divided(const Row<Cfg>& r, int c, float scale, float inv_scale, bool bracket,
                                                   uint8_t* dst, bool nan_row, bool write) {
  uint32_t words[(Cfg::kVec + 3) / 4] = {};
  if constexpr (Cfg::kBracketCodes) {
    if (!bracket || !e4m3_codes_bracketed(words, r.v[c], inv_scale)) e4m3_codes_divided(words, r.v[c], scale);
  } else if constexpr (Cfg::kLeanMath) {
    float q[Cfg::kVec];
    div_shared(q, r.v[c], scale, rcp_rn_in_range(scale));
#pragma unroll
    for (int k = 0; k < Cfg::kVec; k += 2) words[k / 4] |= e4m3x2(q[k], q[k + 1]) << (8 * (k % 4));
  } else {
#pragma unroll
    for (int k = 0; k < Cfg::kVec; k += 2)
      words[k / 4] |= e4m3x2(__fdiv_rn(r.v[c][k], scale), __fdiv_rn(r.v[c][k + 1], scale)) << (8 * (k % 4));
  }
#pragma unroll
  for (int w = 0; w < (Cfg::kVec + 3) / 4; ++w) words[w] = nan_row ? kE4m3NanQuad : words[w];
  if (write) store_packed<Cfg::kVec, Cfg::kStoreAlign>(dst, words);
}

// int8 codes of v * inv_scale rounded half away from zero as vLLM's per-token-head writer does: RN(q + 0.5) for
// q >= 0 (-0 included), else RN(q - 0.5), clamped to [-128, 127] and truncated toward zero.
template <class Cfg>
__device__ __forceinline__ void store_i8(const Row<Cfg>& r, int c, float inv_scale, uint8_t* dst, bool nan_row, bool write) {
  float q[Cfg::kVec];
#pragma unroll
  for (int k = 0; k < Cfg::kVec; k += 2) scaled2<Cfg::kPackedF32>(q[k], q[k + 1], r.v[c][k], r.v[c][k + 1], inv_scale);
  uint32_t words[(Cfg::kVec + 3) / 4] = {};
#pragma unroll
  for (int k = 0; k < Cfg::kVec; ++k) {
    const float h = q[k] >= 0.f ? __fadd_rn(q[k], 0.5f) : __fsub_rn(q[k], 0.5f);
    const int code = __float2int_rz(fminf(fmaxf(h, -128.f), 127.f));
    words[k / 4] |= (static_cast<uint32_t>(code) & 0xFFu) << (8 * (k % 4));
  }
#pragma unroll
  for (int w = 0; w < (Cfg::kVec + 3) / 4; ++w) words[w] = nan_row ? 0u : words[w];
  if (write) store_packed<Cfg::kVec, Cfg::kStoreAlign>(dst, words);
}

// Per-token fp32 scale = max(amax, 1e-4) / 448 over the whole row; vLLM's ue8m0 option rounds it up to a
// power of two with exp2f(ceilf(log2f(scale))), the expression vLLM evaluates. vLLM's per-token-head modes
// (kE4m3TokenHead, kI8TokenHead) floor the scale instead: max(RN(amax / qmax), 1e-6), codes of v * RN(1 / scale).
constexpr float kTokenHeadScaleFloor = 1e-6f;
template <class Cfg>
__device__ __forceinline__ void store_fp8_per_token(const Row<Cfg>& r, const float (&chunk)[Geometry<Cfg>::kChunks], bool nan_row, uint8_t* page,
                                                    int off, bool write) {
  constexpr bool kHead = Cfg::kEncoder == Encoder::kE4m3TokenHead || Cfg::kEncoder == Encoder::kI8TokenHead;
  float amax = 0.f;
#pragma unroll
  for (int c = 0; c < Geometry<Cfg>::kChunks; ++c) amax = fmaxf(amax, chunk[c]);
  amax = group_max_nonneg<Geometry<Cfg>::kWarpLanes>(amax);  // 16 or 32 lanes: one redux instead of 4-5 shuffle stages
  amax = across_warps<Cfg, MaxNan>(r, kAmaxMax, amax);
  const float kNan = __uint_as_float(0x7FC00000u);
  float scale;
  if constexpr (Cfg::kEncoder == Encoder::kI8TokenHead) {
    scale = nan_row ? kNan : fmaxf(div_by<kI8Max>(amax), kTokenHeadScaleFloor);
  } else if constexpr (kHead) {
    scale = nan_row ? kNan : fmaxf(div_by<kE4m3Max>(amax), kTokenHeadScaleFloor);
  } else {
    scale = nan_row ? __uint_as_float(0x7FC00000u) : div_by<kE4m3Max>(fmaxf(amax, kAmaxFloor));
  }
  if constexpr (Cfg::kStore == Store::kFp8VllmUe8m0) {
    if (!nan_row) scale = exp2f(ceilf(log2f(scale)));  // a NaN row keeps the canonical NaN scale bytes
  }
  if constexpr (Cfg::kStore == Store::kFp8E4m3 || kHead) {
    const float inv_scale = rcp_rn_in_range(scale);  // scale is in [1e-6, FLT_MAX / 127] (or the NaN)
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c) {
      uint8_t* dst = page + Cfg::kValueBase + off * Cfg::kValueStride + r.first(c);
      if constexpr (Cfg::kEncoder == Encoder::kI8TokenHead) store_i8(r, c, inv_scale, dst, nan_row, write);
      else store_e4m3(r, c, inv_scale, dst, nan_row, write);
    }
  } else {  // |v / scale| <= 448 (1 + 2^-22): the scale is the row's amax / 448 or more
    const bool bracket = Cfg::kBracketCodes && lean_div_bits(float_bits(scale));
    const float inv_scale = Cfg::kBracketCodes ? rcp_rn_in_range(scale) : 1.f;
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
      store_e4m3_divided(r, c, scale, inv_scale, bracket, page + Cfg::kValueBase + off * Cfg::kValueStride + r.first(c),
                         nan_row, write);
  }
  if (write && r.lane == 0) *reinterpret_cast<float*>(page + Cfg::kScaleBase + off * Cfg::kScaleStride) = scale;
}

// The page byte of scale `block` of in-page record `off` (one-byte scales; spec/pages.py SCALE_ORDERS): back to back,
// or with kScaleInterleave g > 1 each run of g records' scales interleaved byte by byte (trtllm-gen's NVFP4 V scales).
template <class Cfg>
__device__ __forceinline__ int scale_at(int off, int block) {
  constexpr int g = Cfg::kScaleInterleave;
  if constexpr (g == 1) {
    return Cfg::kScaleBase + off * Cfg::kScaleStride + block;
  } else {
    const unsigned u = static_cast<unsigned>(off);  // an in-page record: never negative
    return Cfg::kScaleBase + static_cast<int>(u / g) * (g * Cfg::kScaleStride) + block * g + static_cast<int>(u % g);
  }
}

// e2m1 pairs with one UE8M0 scale per 32 dims; a group spans 32 / kVec lanes of one chunk. The indexer's rule:
// e = ceil(log2(max(amax, 1e-4) / 6)), codes by the threshold rule; the OCP MX rule (kScaleOcp, MXFP4):
// e = floor(log2(amax)) - 2, codes rounded to nearest even.
template <class Cfg>
__device__ __forceinline__ void store_fp4(const Row<Cfg>& r, const float (&chunk)[Geometry<Cfg>::kChunks], bool nan_row, uint8_t* page, int off,
                                          bool write) {
  constexpr int kGroupLanes = 32 / Cfg::kVec;
#pragma unroll
  for (int c = 0; c < Geometry<Cfg>::kChunks; ++c) {
    const float amax = group_max_nonneg<kGroupLanes>(chunk[c]);  // NaN: see store_flashmla
    const int e = Cfg::kScaleOcp ? ocp_scale_exponent(amax) : pow2_scale_exponent<kE2m1Max>(amax);
    const float inv_scale = exp2_int(-e);  // v * 2^-e is exactly v / 2^e: no division needed
    float q[Cfg::kVec];
#pragma unroll
    for (int k = 0; k < Cfg::kVec; k += 2) scaled2<Cfg::kPackedF32>(q[k], q[k + 1], r.v[c][k], r.v[c][k + 1], inv_scale);
    uint32_t packed[1] = {nan_row ? 0u : e2m1_codes<Cfg::kScaleOcp, Cfg::kHwConvert>(q)};  // kVec / 2 <= 4 bytes, low nibble = even dim
    const int dim = r.first(c);
    if (!write) continue;
    store_packed<Cfg::kVec / 2, Cfg::kStoreAlign>(page + Cfg::kValueBase + off * Cfg::kValueStride + dim / 2, packed);
    if ((r.lane & (kGroupLanes - 1)) == 0)
      page[scale_at<Cfg>(off, dim / 32)] = nan_row ? kUe8m0Nan : static_cast<uint8_t>(e + 127);
  }
}

// e4m3 codes with one power-of-two scale per kScaleGroup dims over the first kQuantDims dims, the rest (the roped dims
// kept apart) as bf16: FlashMLA's main KV (UE8M0 bytes, 64-dim groups of the 448 nope dims), DeepSeek-V4.1's records
// (UE8M0, 32-dim groups of all 512 dims, the exponent floored at kScaleMinExp: the 1e-4 floor on the scale) and vLLM's
// fp8_ds_mla (kScaleFp32: float32 scales exp2f(ceilf(log2f(max(amax / 448, 1e-4)))) as vLLM evaluates them, 128-dim
// groups spanning several load steps of the token's lanes).
template <class Cfg>
__device__ __forceinline__ void store_e4m3_groups(const Row<Cfg>& r, const float (&chunk)[Geometry<Cfg>::kChunks], bool nan_row,
                                                  uint8_t* page, int off, bool write) {
  using G = Geometry<Cfg>;
  constexpr int kGroup = Cfg::kScaleGroup;
  constexpr int kStep = G::kT * Cfg::kVec;  // dims of one chunk (a load step of the token's lanes)
  constexpr bool kWide = kGroup > kStep;  // a group spans kGroup / kStep consecutive chunks of every lane
  constexpr int kGroupChunks = kWide ? kGroup / kStep : 1;
  constexpr int kGroupLanes = kWide ? G::kT : kGroup / Cfg::kVec;
  constexpr int kNope = Cfg::kQuantDims;
  static_assert(!kWide || (G::kT <= 32 && kGroup % kStep == 0 && kNope % kGroup == 0),
                "a scale group wider than a load step must be whole load steps of one warp's lanes");
  float wide[kWide ? G::kChunks / kGroupChunks + 1 : 1];  // the amax of each wide group (lane-reduced)
  if constexpr (kWide) {
#pragma unroll
    for (int g = 0; g * kGroupChunks < G::kChunks; ++g) {
      float m = 0.f;
#pragma unroll
      for (int i = 0; i < kGroupChunks; ++i)
        if (g * kGroupChunks + i < G::kChunks) m = max_nan(m, chunk[g * kGroupChunks + i]);
      wide[g] = group_max_nonneg<kGroupLanes>(m);
    }
  }
#pragma unroll
  for (int c = 0; c < G::kChunks; ++c) {
    // 16- or 32-lane groups (vec 4 or 2) take one redux pair instead of 4-5 shuffle stages. A chunk amax may be NaN
    // here, which the redux lets win: such a row is not finite, so the vote writes its NaN bytes whatever e is.
    const float amax = kWide ? wide[c / kGroupChunks] : group_max_nonneg<kGroupLanes>(chunk[c]);
    const int dim = r.first(c);
    if (dim < kNope) {
      if constexpr (Cfg::kScaleFp32) {
        float scale, inv;
        if constexpr (Cfg::kLeanMath) {
          pow2_scale_vllm(amax, scale, inv);
        } else {
          scale = exp2f(ceilf(log2f(fmaxf(__fdiv_rn(amax, kE4m3Max), kAmaxFloor))));
          inv = __frcp_rn(scale);
        }
        store_e4m3(r, c, inv, page + Cfg::kValueBase + off * Cfg::kValueStride + dim, nan_row, write);
        if (write && (kWide ? (r.lane == 0 && c % kGroupChunks == 0) : (r.lane & (kGroupLanes - 1)) == 0))
          *reinterpret_cast<float*>(page + Cfg::kScaleBase + off * Cfg::kScaleStride + 4 * (dim / kGroup)) =
              nan_row ? __uint_as_float(0x7FC00000u) : scale;
      } else if constexpr (Cfg::kScaleMinExp > kNoMinExp) {  // V4.1: the statements in the order its records timed
        const int e = max(pow2_scale_exponent<kE4m3Max>(amax), Cfg::kScaleMinExp);
        const bool first_lane = kWide ? (r.lane == 0 && c % kGroupChunks == 0) : (r.lane & (kGroupLanes - 1)) == 0;
        store_e4m3(r, c, exp2_int(-e), page + Cfg::kValueBase + off * Cfg::kValueStride + dim, nan_row, write);
        if (write && first_lane)
          page[Cfg::kScaleBase + off * Cfg::kScaleStride + dim / kGroup] = static_cast<uint8_t>(nan_row ? kUe8m0Nan : e + 127);
      } else {  // FlashMLA: the statements in the order its records timed
        const int e = pow2_scale_exponent<kE4m3Max>(amax);
        store_e4m3(r, c, exp2_int(-e), page + Cfg::kValueBase + off * Cfg::kValueStride + dim, nan_row, write);
        if (write && (kWide ? (r.lane == 0 && c % kGroupChunks == 0) : (r.lane & (kGroupLanes - 1)) == 0))
          page[Cfg::kScaleBase + off * Cfg::kScaleStride + dim / kGroup] = nan_row ? kUe8m0Nan : static_cast<uint8_t>(e + 127);
      }
    } else {
      store_half(r, c, page + Cfg::kRopeBase + off * Cfg::kValueStride + 2 * (dim - kNope), nan_row, write);
    }
  }
}

// e2m1 codes with one e4m3 scale per 16 dims over the first kQuantDims dims, the rest as bf16. NVFP4 (FlashInfer's
// DeepSeek-V4 record, and plain kNvfp4 whose every dim is e2m1, the row already multiplied by g, see store()):
// s = RN_sat(amax * RN(1/6)), codes of v * RN(1 / s) (0 for s = 0): FlashInfer takes both reciprocals with
// rcp.approx.ftz, which equals RN for 6 and for every e4m3 value (a GPU test checks all 127). DeepSeek-V4.1's fp4
// record (kScaleDivided): s = RN_e4m3(clamp(RN(amax / 6), 2^-9, 448)), codes of RN(v / s), as SGLang divides.
constexpr float kSixth = 0.16666667f;  // RN(1/6)
template <class Cfg>
__device__ __forceinline__ void store_e2m1_e4m3(const Row<Cfg>& r, const float (&chunk)[Geometry<Cfg>::kChunks], bool nan_row,
                                                uint8_t* page, int off, bool write) {
  constexpr int kGroup = Cfg::kScaleGroup;
  constexpr int kGroupLanes = kGroup / Cfg::kVec;
  constexpr int kNope = Cfg::kQuantDims;
  static_assert(Cfg::kThreadsPerToken * Cfg::kVec >= kGroup, "a 16-dim group must lie within one load step (implied by "
                "head_dim 512 and at most 64 values per thread)");
#pragma unroll
  for (int c = 0; c < Geometry<Cfg>::kChunks; ++c) {
    const float amax = group_max_nonneg<kGroupLanes>(chunk[c]);  // a NaN may win: the row's vote writes NaN bytes
    const int dim = r.first(c);
    if (dim < kNope) {
      float q[Cfg::kVec];
      uint32_t scale_code;
      if constexpr (Cfg::kScaleDivided) {
        const float sixth = Cfg::kLeanMath ? div_by_unless_inf<kE2m1Max>(amax) : __fdiv_rn(amax, float(kE2m1Max));
        scale_code = e4m3x2(fminf(fmaxf(sixth, 0x1p-9f), float(kE4m3Max)), 0.f) & 0xFFu;
        const float scale = __half2float(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(scale_code), __NV_E4M3));
        if constexpr (Cfg::kLeanMath) {
          div_shared(q, r.v[c], scale, rcp_rn_in_range(scale));  // scale in [2^-9, 448]
        } else {
#pragma unroll
          for (int k = 0; k < Cfg::kVec; ++k) q[k] = __fdiv_rn(r.v[c][k], scale);
        }
      } else {
        scale_code = e4m3x2(amax * kSixth, 0.f) & 0xFFu;
        const float scale = __half2float(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(scale_code), __NV_E4M3));
        const float inv = scale == 0.f ? 0.f : __frcp_rn(scale);
#pragma unroll
        for (int k = 0; k < Cfg::kVec; k += 2) scaled2<Cfg::kPackedF32>(q[k], q[k + 1], r.v[c][k], r.v[c][k + 1], inv);
      }
      uint32_t packed[1] = {nan_row ? 0u : e2m1_codes<true, Cfg::kHwConvert>(q)};  // kVec / 2 <= 4 bytes, low nibble = even dim
      if (!write) continue;
      store_packed<Cfg::kVec / 2, Cfg::kStoreAlign>(page + Cfg::kValueBase + off * Cfg::kValueStride + dim / 2, packed);
      if ((r.lane & (kGroupLanes - 1)) == 0)
        page[scale_at<Cfg>(off, dim / kGroup)] = nan_row ? 0x7F : static_cast<uint8_t>(scale_code);
    } else {
      store_half(r, c, page + Cfg::kRopeBase + off * Cfg::kValueStride + 2 * (dim - kNope), nan_row, write);
    }
  }
}

template <bool kRound, class Cfg>
__device__ __forceinline__ void round_bf16_if(Row<Cfg>& r) {  // every value of the row rounded to bf16 (kRound)
  if constexpr (kRound && Cfg::kLeanMath) {  // two values per convert (the same rounding, NaN included)
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
#pragma unroll
      for (int k = 0; k < Cfg::kVec; k += 2) bf16_round2(r.v[c][k], r.v[c][k + 1]);
  } else if constexpr (kRound) {
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
#pragma unroll
      for (int k = 0; k < Cfg::kVec; ++k) r.v[c][k] = bf16_round(r.v[c][k]);
  }
}

template <class Cfg>
__device__ __forceinline__ void store(Row<Cfg>& r, float global_scale, uint8_t* page, int off, bool write) {
  round_bf16_if<Cfg::kRoundBf16>(r);
  // launch.bracket_codes for a row divided by a per-tensor scale (vLLM's scaled_convert): the codes of each chunk
  // whose dividends are finite and at most 2^60 (quotients at most 2^120: finite, as the row's vote needs) read off
  // one multiply (e4m3_codes_bracketed); the row's vote then reads the undivided values, finite exactly where the
  // quotients are.
  constexpr bool kBracket = Cfg::kBracketCodes && Cfg::kGlobal == GlobalScale::kDivide && Cfg::kEncoder == Encoder::kE4m3;
  float chunk[Geometry<Cfg>::kChunks];
  bool bracketed[Geometry<Cfg>::kChunks] = {};
  [[maybe_unused]] const bool scale_ok = kBracket && lean_div_bits(float_bits(global_scale));
  if constexpr (Cfg::kGlobal == GlobalScale::kTimes || Cfg::kGlobal == GlobalScale::kTimesReciprocal) {
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
#pragma unroll
      for (int k = 0; k < Cfg::kVec; ++k) r.v[c][k] = __fmul_rn(r.v[c][k], global_scale);
  } else if constexpr (kBracket) {  // codes from the undivided row (store_e4m3_divided); dividends past 2^60 divided here
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c) {
      chunk[c] = chunk_amax(r, c);  // NaN or inf: not bracketed, divided (the quotient then marks the row)
      bracketed[c] = scale_ok && chunk[c] <= kBracketMaxDividend;
      if (bracketed[c]) continue;
#pragma unroll
      for (int k = 0; k < Cfg::kVec; ++k) r.v[c][k] = div_rn_call(r.v[c][k], global_scale);
      chunk[c] = chunk_amax(r, c);
    }
  } else if constexpr (Cfg::kGlobal == GlobalScale::kDivide) {  // vLLM's scaled_convert: a correctly rounded divide
    if constexpr (Cfg::kLeanMath) {
      const float inv = rcp_rn_in_range(global_scale);
#pragma unroll
      for (int c = 0; c < Geometry<Cfg>::kChunks; ++c) {
        float q[Cfg::kVec];
        div_shared(q, r.v[c], global_scale, inv);
#pragma unroll
        for (int k = 0; k < Cfg::kVec; ++k) r.v[c][k] = q[k];
      }
    } else {
#pragma unroll
      for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
#pragma unroll
        for (int k = 0; k < Cfg::kVec; ++k) r.v[c][k] = __fdiv_rn(r.v[c][k], global_scale);
    }
  }
  // Every store starts from the per-chunk amax and the row's NaN vote (see above).
  if constexpr (!kBracket) {
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c) chunk[c] = chunk_amax(r, c);
  }
  const bool nan_row = row_not_finite(r, chunk);
  if constexpr (Cfg::kEncoder == Encoder::kHalf) {
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
      store_half(r, c, page + Cfg::kValueBase + off * Cfg::kValueStride + 2 * r.first(c), nan_row, write);
  } else if constexpr (Cfg::kEncoder == Encoder::kE4m3Token || Cfg::kEncoder == Encoder::kE4m3TokenHead ||
                       Cfg::kEncoder == Encoder::kI8TokenHead) {
    store_fp8_per_token(r, chunk, nan_row, page, off, write);
  } else if constexpr (Cfg::kEncoder == Encoder::kE2m1Ue8m0) {
    store_fp4(r, chunk, nan_row, page, off, write);
  } else if constexpr (Cfg::kEncoder == Encoder::kE4m3Groups) {
    store_e4m3_groups(r, chunk, nan_row, page, off, write);
  } else if constexpr (Cfg::kEncoder == Encoder::kE2m1E4m3) {
    store_e2m1_e4m3(r, chunk, nan_row, page, off, write);
  } else if constexpr (Cfg::kEncoder == Encoder::kE4m3) {  // the row already times RN(1 / s): plain codes
    [[maybe_unused]] const float inv_scale = kBracket ? rcp_rn_in_range(global_scale) : 1.f;
#pragma unroll
    for (int c = 0; c < Geometry<Cfg>::kChunks; ++c) {
      uint8_t* dst = page + Cfg::kValueBase + off * Cfg::kValueStride + r.first(c);
      if constexpr (kBracket) {
        if (bracketed[c]) {  // tested with the scale's range above
          store_e4m3_divided(r, c, global_scale, inv_scale, true, dst, nan_row, write);
          continue;
        }
      }
      store_e4m3<Cfg, true>(r, c, 1.f, dst, nan_row, write);
    }
  } else {
    static_assert(kNoStoreCode<Cfg::kStore>, "this store format's encoder has no device code in store()");
  }
}

}  // namespace kernelgen
