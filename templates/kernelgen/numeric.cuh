// kernelgen/numeric.cuh: vector loads and stores, warp-group reductions and the
// quantizers (e4m3, e2m1, UE8M0) used by the fused_norm_rope_store kernels.
//
// Arithmetic that the PyTorch reference replays uses explicit __f*_rn intrinsics so that
// nvcc never contracts it into FMAs: the bf16 store is checked bit-exactly against it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace kernelgen {

constexpr bool is_pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

// ---- element conversions -------------------------------------------------------------

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

// ---- vector memory access ------------------------------------------------------------

template <int kBytes> struct Word;
template <> struct Word<1> { using type = uint8_t; };
template <> struct Word<2> { using type = uint16_t; };
template <> struct Word<4> { using type = uint32_t; };
template <> struct Word<8> { using type = uint2; };
template <> struct Word<16> { using type = uint4; };

// Loads N contiguous elements of T (one aligned N*sizeof(T)-byte access) as floats.
template <typename T, int N>
__device__ __forceinline__ void load_floats(const T* src, float (&dst)[N]) {
  using W = typename Word<N * sizeof(T)>::type;
  const W word = __ldg(reinterpret_cast<const W*>(src));
  const T* elems = reinterpret_cast<const T*>(&word);
#pragma unroll
  for (int i = 0; i < N; ++i) dst[i] = to_float(elems[i]);
}

// Copies N bytes to global memory in accesses of kAlign bytes (the destination's alignment).
template <int N, int kAlign>
__device__ __forceinline__ void store_bytes(uint8_t* dst, const uint8_t (&src)[N]) {
  constexpr int kStep = N < kAlign ? N : kAlign;
  using W = typename Word<kStep>::type;
#pragma unroll
  for (int i = 0; i < N; i += kStep) {
    W word;
    memcpy(&word, src + i, kStep);
    *reinterpret_cast<W*>(dst + i) = word;
  }
}

// ---- reductions inside a group of kWidth lanes (aligned, kWidth a power of two) --------

// Butterfly over lane masks 1, 2, ..., kWidth/2; every lane ends with the same value.
template <int kWidth>
__device__ __forceinline__ float group_sum(float v, unsigned mask) {
#pragma unroll
  for (int m = 1; m < kWidth; m <<= 1) v = __fadd_rn(v, __shfl_xor_sync(mask, v, m));
  return v;
}

template <int kWidth>
__device__ __forceinline__ float group_max(float v, unsigned mask) {
#pragma unroll
  for (int m = 1; m < kWidth; m <<= 1) v = fmaxf(v, __shfl_xor_sync(mask, v, m));
  return v;
}

// ---- quantizers ------------------------------------------------------------------------

constexpr float kE4m3Max = 448.0f;
constexpr float kE2m1Max = 6.0f;
constexpr float kAmaxFloor = 1e-4f;

__device__ __forceinline__ uint8_t e4m3(float q) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ uint16_t bf16_bits(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

__device__ __forceinline__ float bf16_round(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

// Exact ceil(log2(v)) for a positive normal float: the exponent, plus one unless v is a power of two.
__device__ __forceinline__ int ceil_log2(float v) {
  const uint32_t bits = __float_as_uint(v);
  return static_cast<int>((bits >> 23) & 0xff) - 127 + ((bits & 0x7fffff) != 0);
}

__device__ __forceinline__ float exp2_int(int e) { return __uint_as_float(static_cast<uint32_t>(e + 127) << 23); }

// UE8M0 exponent of the power-of-two scale 2^ceil(log2(max(amax, 1e-4) / qmax)).
__device__ __forceinline__ int pow2_scale_exponent(float amax, float qmax) {
  return ceil_log2(__fdiv_rn(fmaxf(amax, kAmaxFloor), qmax));
}

// e2m1 code: magnitude index by the thresholds of LAYOUTS.md (strictly above rounds up),
// sign in bit 3 for negative inputs.
__device__ __forceinline__ uint8_t e2m1(float q) {
  const float a = fabsf(q);
  const uint8_t mag = (a > 0.25f) + (a > 0.75f) + (a > 1.25f) + (a > 1.75f) + (a > 2.5f) + (a > 3.5f) + (a > 5.0f);
  return mag | (signbit(q) ? 8 : 0);
}

}  // namespace kernelgen
