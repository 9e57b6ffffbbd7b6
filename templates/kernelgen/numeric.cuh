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
#include <cstring>

namespace kernelgen {

__host__ __device__ constexpr bool is_pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }
__host__ __device__ constexpr int floor_log2(int v) { return v > 1 ? 1 + floor_log2(v / 2) : 0; }

// ---- element conversions -------------------------------------------------------------

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

// ---- vector memory access ------------------------------------------------------------

template <int kBytes> struct Word;
template <> struct Word<4> { using type = uint32_t; };
template <> struct Word<8> { using type = uint2; };
template <> struct Word<16> { using type = uint4; };

// Loads N contiguous elements of T (one aligned N*sizeof(T)-byte access) as floats: through the read-only path, or
// (kPlain) as an ordinary load, which the compiler keeps before a later griddepcontrol.wait (a read-only load is
// free to sink below it to its first use).
template <typename T, int N, bool kPlain = false>
__device__ __forceinline__ void load_floats(const T* src, float (&dst)[N]) {
  using W = typename Word<N * sizeof(T)>::type;
  const W word = kPlain ? *reinterpret_cast<const W*>(src) : __ldg(reinterpret_cast<const W*>(src));
  const T* elems = reinterpret_cast<const T*>(&word);
#pragma unroll
  for (int i = 0; i < N; ++i) dst[i] = to_float(elems[i]);
}

// Stores the low kBytes of the little-endian words w, in accesses as wide as the destination's
// alignment kAlign allows (at most 16 bytes).
template <int kBytes, int kAlign>
__device__ __forceinline__ void store_packed(uint8_t* dst, const uint32_t (&w)[(kBytes + 3) / 4]) {
  static_assert(kAlign >= 4 && (kBytes < 4 || kBytes % 4 == 0), "stores are whole words into 4-byte aligned slots");
  if constexpr (kBytes == 1) {
    *dst = static_cast<uint8_t>(w[0]);
  } else if constexpr (kBytes == 2) {
    *reinterpret_cast<uint16_t*>(dst) = static_cast<uint16_t>(w[0]);
  } else {
    constexpr int kStep = kBytes < kAlign ? kBytes : (kAlign < 16 ? kAlign : 16);
#pragma unroll
    for (int i = 0; i < kBytes / kStep; ++i) {
      constexpr int kWords = kStep / 4;
      if constexpr (kWords == 4) {
        *reinterpret_cast<uint4*>(dst + 16 * i) = make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
      } else if constexpr (kWords == 2) {
        *reinterpret_cast<uint2*>(dst + 8 * i) = make_uint2(w[2 * i], w[2 * i + 1]);
      } else {
        *reinterpret_cast<uint32_t*>(dst + 4 * i) = w[i];
      }
    }
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

// max that returns NaN when either operand is NaN (fmaxf drops NaNs): PTX max.NaN, sm_80 and newer.
__device__ __forceinline__ float max_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

template <int kWidth>
__device__ __forceinline__ float group_max(float v, unsigned mask) {
#pragma unroll
  for (int m = 1; m < kWidth; m <<= 1) v = fmaxf(v, __shfl_xor_sync(mask, v, m));
  return v;
}

// The max over a group of kWidth lanes of values that are >= 0 or NaN, every lane of the warp taking
// part. Such floats order as their bits (a NaN's exceed inf's), so for groups of 16 or 32 lanes one
// integer redux.sync per group (the other group's lanes contribute 0) stands for the log2(kWidth)
// dependent shuffle-and-max stages of group_max: on the H200 one redux takes about 45 cycles and two 56,
// against 5 x 29 and 4 x 29 (tools/latency_probe.cu, docs/perf.md change 11). A NaN would win here where
// group_max's fmaxf drops it; the fp8 caller passes no NaNs (its per-lane fmaxf drops them), and the FlashMLA
// and fp4 callers write a row holding a NaN as NaN bytes whatever its scale (the row's vote). Narrower
// groups take group_max's shuffles: four masked reduxes for 8-lane groups take 78 cycles against 87 for
// three stages, too close to pay for four more instructions per lane at the token counts where such
// mappings run.
template <int kWidth>
__device__ __forceinline__ float group_max_nonneg(float v) {
  const uint32_t bits = __float_as_uint(v);
  if constexpr (kWidth == 32) {
    return __uint_as_float(__reduce_max_sync(0xffffffffu, bits));
  } else if constexpr (kWidth == 16) {
    const bool upper = (threadIdx.x & 16) != 0;
    const uint32_t lower_max = __reduce_max_sync(0xffffffffu, upper ? 0u : bits);
    const uint32_t upper_max = __reduce_max_sync(0xffffffffu, upper ? bits : 0u);
    return __uint_as_float(upper ? upper_max : lower_max);
  } else {
    return group_max<kWidth>(v, 0xffffffffu);
  }
}

// ---- pairwise trees over a lane's values --------------------------------------------------
//
// The tree over a[kLo, kLo + kN): split at the largest power of two below kN, left half first. For a
// power-of-two kN it is the balanced tree of adjacent pairs; its depth is ceil(log2(kN)) instead of
// the kN - 1 of a chain. measure/reference.py (_tree_sum) replays the same splits.

__host__ __device__ constexpr int pow2_below(int n) {
  int h = 1;
  while (2 * h < n) h *= 2;
  return h;
}

struct AddRn {
  __device__ __forceinline__ float operator()(float a, float b) const { return __fadd_rn(a, b); }
};
struct MaxNan {
  __device__ __forceinline__ float operator()(float a, float b) const { return max_nan(a, b); }
};

template <class Op, int kLo, int kN, int kLen>
__device__ __forceinline__ float tree_reduce(const float (&a)[kLen]) {
  static_assert(kN >= 1 && kLo + kN <= kLen, "tree_reduce: the range lies inside the array");
  if constexpr (kN == 1) {
    return a[kLo];
  } else {
    constexpr int kHalf = pow2_below(kN);
    return Op()(tree_reduce<Op, kLo, kHalf>(a), tree_reduce<Op, kLo + kHalf, kN - kHalf>(a));
  }
}

// Sum (each add rounded) and NaN-propagating max of a[0, kN) over the tree.
template <int kN, int kLen>
__device__ __forceinline__ float tree_sum(const float (&a)[kLen]) { return tree_reduce<AddRn, 0, kN>(a); }

template <int kN, int kLen>
__device__ __forceinline__ float tree_max_nan(const float (&a)[kLen]) { return tree_reduce<MaxNan, 0, kN>(a); }

// ---- quantizers ------------------------------------------------------------------------

constexpr int kE4m3Max = 448;
constexpr int kE2m1Max = 6;
constexpr int kI8Max = 127;  // the int8 per-token-head scale's divisor (vLLM's QUANT_MAX)
constexpr float kAmaxFloor = 1e-4f;

// Two e4m3 codes (round-to-nearest-even, saturating): a in the low byte, b in the high byte.
__device__ __forceinline__ uint32_t e4m3x2(float a, float b) {
  return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3));
}

// Two bf16 values (round-to-nearest-even): a in the low half, b in the high half.
__device__ __forceinline__ uint32_t bf16x2(float a, float b) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// Two fp16 values (round-to-nearest-even; past 65504 inf, as a cast): a in the low half, b in the high half.
__device__ __forceinline__ uint32_t f16x2(float a, float b) {
  const __half2 pair = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

__device__ __forceinline__ float bf16_round(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

// Two values rounded to bf16 by one paired convert (cvt.rn.bf16x2.f32: the rounding of cvt.rn.bf16.f32, a NaN to
// the canonical NaN as there) and widened back (launch.lean_math).
__device__ __forceinline__ void bf16_round2(float& a, float& b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);  // a in the low half
  const uint32_t w = *reinterpret_cast<const uint32_t*>(&h);
  a = __uint_as_float(w << 16);
  b = __uint_as_float(w & 0xFFFF0000u);
}

// A float's bits, on the device and on the host (tests run the scale exponent's code on the CPU).
__host__ __device__ __forceinline__ uint32_t float_bits(float v) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(v);
#else
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
#endif
}

// Exact ceil(log2(v)) for a positive normal float: the exponent, plus one unless v is a power of two.
__host__ __device__ __forceinline__ int ceil_log2(float v) {
  const uint32_t bits = float_bits(v);
  return static_cast<int>((bits >> 23) & 0xff) - 127 + ((bits & 0x7fffff) != 0);
}

// a / b correctly rounded, given inv_b = RN(1 / b), for the normal range the quantizers see:
// q = RN(a * inv_b) is within an ulp, the remainder a - q*b is exact in one FMA, and one
// correction step RN(q + r * inv_b) rounds correctly (Markstein). CUDA's own div.rn takes the
// same path after a check for special ranges; here b is a positive normal scale and |a/b| <= 448.
__device__ __forceinline__ float div_rn_by(float a, float b, float inv_b) {
  const float q = __fmul_rn(a, inv_b);
  return __fmaf_rn(__fmaf_rn(-q, b, a), inv_b, q);
}

// a / D correctly rounded, for a constant D and a >= 0 with a and a / D normal (the quantizers' amax
// over their largest code): a power-of-two D is an exact multiply; otherwise div_rn_by with the
// constant RN(1 / D), which is correct for every such a (checked for every float mantissa in
// tests/test_numeric.py; D = odd * 2^k, so the mantissa alone decides the rounding). Unlike
// div.rn it has no range check and no slow-path call, so the chunks of a row interleave.
template <int D>
__device__ __forceinline__ float div_by(float a) {
  constexpr float kInv = 1.0f / D;
  if constexpr (is_pow2(D)) {
    return __fmul_rn(a, kInv);
  } else {
    return div_rn_by(a, float(D), kInv);
  }
}

// RN(1 / b) for 2^-125 <= b < 2^125 (every scale a quantizer makes): the sequence rcp.rn runs after its
// range check (approximate reciprocal, one Newton step), without the check and its slow-path call.
__device__ __forceinline__ float rcp_rn_in_range(float b) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b));
  return __fmaf_rn(r, __fmaf_rn(-b, r, 1.0f), r);
}

// launch.lean_math: a / b correctly rounded for every float a, where b is shared by many values (a per-tensor,
// per-token or per-group scale). CUDA's div.rn runs a reciprocal refinement, two quotient corrections, a range
// check (FCHK) and a branch around a slow-path call per value; here RN(1 / b) is taken once and each value costs
// the two corrections (q0 = RN(a * y), r = a - b q, q = RN(q + r y), twice: the first leaves q within an ulp, so
// the second's remainder is exact and its sum the correctly rounded quotient, Markstein's theorem; the sign put
// back for a zero dividend, whose sums round to +0), plus an integer range check. Inside [2^-60, 2^60] for |a|
// (or a = 0) and b no step overflows or underflows; where any value of the array, or b, lies outside, the whole
// array takes div.rn: one branch per array, never taken by the rows a model writes. tests/test_lean_math.py replays
// the sequence in exact arithmetic (float64 products, one rounding per step) near rounding midpoints; the GPU tier
// runs it beside div.rn for every float dividend.
constexpr uint32_t kLeanDivLo = 0x21800000u;  // the bits of 2^-60
constexpr uint32_t kLeanDivHi = 0x5D800000u;  // the bits of 2^60

__device__ __forceinline__ bool lean_div_bits(uint32_t bits) {  // a float in [2^-60, 2^60] (a sign bit fails)
  return bits - kLeanDivLo <= kLeanDivHi - kLeanDivLo;
}

__device__ __forceinline__ bool lean_div_operand(float a) {  // |a| in [2^-60, 2^60], or a == +-0
  const uint32_t m = float_bits(a) & 0x7FFFFFFFu;
  return lean_div_bits(m) || m == 0u;
}

__device__ __forceinline__ float div_corrected(float a, float b, float inv_b) {
  const float q0 = __fmul_rn(a, inv_b);
  const float q1 = __fmaf_rn(__fmaf_rn(-q0, b, a), inv_b, q0);
  return copysignf(__fmaf_rn(__fmaf_rn(-q1, b, a), inv_b, q1), q0);  // a = -0: the sums give +0, the quotient -0
}

// The out-of-range path: a call (scalars in registers), kept out of the kernel's straight-line code.
__device__ __noinline__ float div_rn_call(float a, float b) { return __fdiv_rn(a, b); }

// q[k] = RN(a[k] / b) for k < N. inv_b is rcp_rn_in_range(b) (any value where b lies outside [2^-60, 2^60]:
// then div.rn runs).
template <int N>
__device__ __forceinline__ void div_shared(float (&q)[N], const float (&a)[N], float b, float inv_b) {
  bool ok = lean_div_bits(float_bits(b));  // b > 0 in range
#pragma unroll
  for (int k = 0; k < N; ++k) {
    q[k] = div_corrected(a[k], b, inv_b);
    ok = ok && lean_div_operand(a[k]);
  }
  if (!ok) {
#pragma unroll
    for (int k = 0; k < N; ++k) q[k] = div_rn_call(a[k], b);
  }
}

// launch.bracket_codes: the e4m3 codes of RN(a / b) read off one multiply, for b in [2^-60, 2^60] and a finite with
// |a / b| <= 2^120 (the callers make sure: |a| <= 2^60, or a quotient bounded by the scale's own rule). With y = RN(1 / b) (rcp_rn_in_range) and q0 = RN(a y), a y lies within a
// relative 2^-24 of a / b and q0 within 2^-24 of a y (a normal product; a subnormal one is below 2^-100, where every
// code is +-0 and the signs agree), so RN(a / b), itself within 2^-24 of a / b, lies within a relative 2^-22 of q0.
// lo = RN(q0 (1 - 2^-21)) and hi = RN(q0 (1 + 2^-21)) then lie strictly on either side of it (each rounding moves
// them by 2^-24 at most), and since the e4m3 conversion (nearest even, saturating) is monotone, equal codes of lo and
// hi are its codes. Where they differ (a quotient within about 2^-21 of an e4m3 rounding midpoint: about 8 in 10^6
// values) the caller takes the correctly rounded divide. tests/test_bracket_codes.py replays this in exact arithmetic
// near every midpoint; the tuner checks every `.bc` candidate's bytes against the reference.
constexpr float kBracketBelow = 1.0f - 0x1p-21f;
constexpr float kBracketAbove = 1.0f + 0x1p-21f;
constexpr float kBracketMaxDividend = 0x1p60f;

// codes[k / 4] byte k % 4 = the e4m3 code of RN(a[k] / b) for every k, where this returns true (else codes hold
// garbage and the caller divides).
template <int N>
__device__ __forceinline__ bool e4m3_codes_bracketed(uint32_t (&codes)[(N + 3) / 4], const float (&a)[N], float inv_b) {
  static_assert(N % 2 == 0, "e4m3 codes are converted in pairs");
  uint32_t above[(N + 3) / 4] = {};
#pragma unroll
  for (int w = 0; w < (N + 3) / 4; ++w) codes[w] = 0u;
#pragma unroll
  for (int k = 0; k < N; k += 2) {
    const float q0 = __fmul_rn(a[k], inv_b), q1 = __fmul_rn(a[k + 1], inv_b);
    codes[k / 4] |= e4m3x2(__fmul_rn(q0, kBracketBelow), __fmul_rn(q1, kBracketBelow)) << (8 * (k % 4));
    above[k / 4] |= e4m3x2(__fmul_rn(q0, kBracketAbove), __fmul_rn(q1, kBracketAbove)) << (8 * (k % 4));
  }
  bool same = true;
#pragma unroll
  for (int w = 0; w < (N + 3) / 4; ++w) same &= codes[w] == above[w];  // no short-circuit: one test per word
  return same;
}

// a / D for a >= 0 as div.rn gives it wherever a / D is normal, inf or NaN (div_by for finite a, else div.rn); a
// subnormal quotient may differ in its last place, which the callers' floors (1e-4, 2^-9) hide.
template <int D>
__device__ __forceinline__ float div_by_unless_inf(float a) {
  return a <= 3.402823466e38f ? div_by<D>(a) : __fdiv_rn(a, float(D));
}

// vLLM's fp8_ds_mla scale exp2f(ceilf(log2f(x))) for x = max(RN(amax / 448), 1e-4) and its reciprocal (a power of
// two, exact), from x's bits where log2f's rounding cannot move the ceiling: x = 2^e (1 + f) with f >= 2^-12 has
// log2 at least 3.5e-4 above e and below e + 1, far past log2f's one-ulp error (2^-17 at |e| < 128), so the ceiling
// is e + 1. A power of two, f < 2^-12, a scale past 2^125, inf or NaN take the library calls, as without lean_math.
__device__ __noinline__ float pow2_scale_libm(float x) { return exp2f(ceilf(log2f(x))); }

__device__ __forceinline__ void pow2_scale_vllm(float amax, float& scale, float& inv) {
  const float x = fmaxf(div_by_unless_inf<kE4m3Max>(amax), kAmaxFloor);
  const uint32_t bits = float_bits(x), e = bits >> 23;  // x >= 1e-4 > 0, or NaN / inf (e = 255)
  if ((bits & 0x7FFFFFu) >= (1u << 11) && e <= 251u) {
    scale = __uint_as_float((e + 1u) << 23);
    inv = __uint_as_float((253u - e) << 23);
  } else {
    scale = pow2_scale_libm(x);
    inv = __frcp_rn(scale);
  }
}

// RN(sqrt(a)) for 2^-101 <= a < 2^128 (finite): the sequence sqrt.rn runs after its range check
// (approximate reciprocal square root, then one correction of the root), without the check and its
// slow-path call. A NaN a gives NaN.
constexpr float kSqrtInRangeMin = 0x1p-101f;

__device__ __forceinline__ float sqrt_rn_in_range(float a) {
  float r;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
  const float s = __fmul_rn(a, r);
  const float half_r = __fmul_rn(r, 0.5f);
  return __fmaf_rn(__fmaf_rn(-s, s, a), half_r, s);
}

// RN(1 / RN(sqrt(a))) for a = RN(mean_sq + eps) with mean_sq >= 0 and finite (or NaN). With
// 2^-101 <= eps <= 2^100 (every eps in use; the test is one uniform branch on a kernel argument),
// a >= eps lies in sqrt_rn_in_range's range (a sum below 2^103 past FLT_MAX rounds to a finite
// float), and its root, in [2^-50.5, 2^64), in rcp_rn_in_range's: the norm's reciprocal root runs
// without range checks or slow-path calls. Any other eps takes sqrt.rn and rcp.rn.
constexpr float kFastEpsMax = 0x1p100f;

__device__ __forceinline__ float inv_sqrt_rn(float a, float eps) {
  if (eps >= kSqrtInRangeMin && eps <= kFastEpsMax) return rcp_rn_in_range(sqrt_rn_in_range(a));
  return __frcp_rn(__fsqrt_rn(a));
}

__device__ __forceinline__ float exp2_int(int e) { return __uint_as_float(static_cast<uint32_t>(e + 127) << 23); }

// UE8M0 exponent of the power-of-two scale, ceil(log2(RN(a / kQmax))) with a = max(amax, 1e-4) (amax
// >= 0, finite), read off a's bits. Write kQmax = c x 2^k with 1 <= c < 2 and a = 1.m x 2^E: the
// quotient is (1.m / c) x 2^(E - k), where 1.m / c lies in (1/2, 2). For 1.m <= c it is at most
// 2^(E - k), and above 2^(E - k - 1) by the factor 2 / c (8/7 for 448, 4/3 for 6), far more than half
// an ulp, and so is its rounding: the exponent is E - k. For 1.m > c it exceeds 2^(E - k) by at least
// 2^-23 / c > 2^-24 relative, more than half an ulp, so it rounds above 2^(E - k): E - k + 1. So the
// exponent is E - k, plus one when a's mantissa bits exceed c's: five integer instructions where the
// quotient and ceil_log2 of it took eleven dependent ones. Checked against ceil_log2 of the correctly
// rounded quotient by tests/test_numeric.py (this code, built for the host, for every mantissa at five
// exponents and a spread over all exponents) and tests/test_numeric_gpu.py (on the GPU, every float).
template <int kQmax>
__host__ __device__ __forceinline__ int pow2_scale_exponent(float amax) {
  constexpr int kK = floor_log2(kQmax);
  static_assert(kQmax > 0 && kQmax < (1 << 24) && (kQmax >> kK) == 1 && 2.0 / (double(kQmax) / (1 << kK)) > 1.0 + 0x1p-24,
                "pow2_scale_exponent: kQmax = c x 2^k with 1 <= c < 2 - 2^-23, exact in a float");
  constexpr uint32_t kCMantissa = (static_cast<uint32_t>(kQmax) << (23 - kK)) & 0x7fffffu;
  const uint32_t bits = float_bits(fmaxf(amax, kAmaxFloor));
  return static_cast<int>(bits >> 23) - 127 - kK + ((bits & 0x7fffffu) > kCMantissa ? 1 : 0);
}

// The OCP MX block exponent (MXFP4 as SGLang writes its KV cache): floor(log2(amax)) - 2 read off amax's float32
// exponent bits, -127 for a zero or subnormal amax (no floor). amax / 2^e then lies in [4, 8): e2m1 saturates the
// part above 6. amax is non-negative and finite here (a row holding NaN or inf is stored as a NaN row).
__host__ __device__ __forceinline__ int ocp_scale_exponent(float amax) {
  const int field = static_cast<int>(float_bits(amax) >> 23);
  return field == 0 ? -127 : field - 129;
}

// ---- pairs of float32 values -----------------------------------------------------------------
//
// A configuration with kPackedF32 (launch.packed_f32, a tuner candidate only on GPUs with packed float32:
// kernelgen/spec/launchparams.py PACKED_F32_CAPABILITIES) runs each helper below on sm_100 and sm_103 as
// one FADD2/FMUL2/FFMA2 per pair (or two), whose components round exactly as __fadd_rn/__fmul_rn/__fmaf_rn
// (CUDA's documented behaviour for these intrinsics). Elsewhere, and without the flag, it is the scalar
// ops, element 0 then element 1, in the order the kernel used before pairs existed (so that code is
// unchanged). One trap: ptxas contracts a packed multiply feeding a packed add into FFMA2 (one rounding
// instead of two), even though both are .rn. So a packed product is only ever added by scalar __fadd_rn /
// __fsub_rn, which are never contracted (tests/test_packed_f32.py counts the FFMA2 in the SASS).
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 1000 || __CUDA_ARCH__ == 1030)
#define KERNELGEN_ARCH_PAIRS 1
__device__ __forceinline__ void set2(float& a0, float& a1, float2 r) { a0 = r.x; a1 = r.y; }
#endif

__device__ __forceinline__ void butterfly(float& a, float& b) {  // (a, b) <- (a + b, a - b)
  const float s = __fadd_rn(a, b);
  b = __fsub_rn(a, b);
  a = s;
}

template <bool kPacked>
__device__ __forceinline__ void butterfly2(float& a0, float& a1, float& b0, float& b1) {
#ifdef KERNELGEN_ARCH_PAIRS
  if constexpr (kPacked) {
    const float2 a = make_float2(a0, a1), b = make_float2(b0, b1);
    set2(b0, b1, __fadd2_rn(a, make_float2(-b0, -b1)));
    set2(a0, a1, __fadd2_rn(a, b));
    return;
  }
#endif
  butterfly(a0, b0);
  butterfly(a1, b1);
}

template <bool kPacked>
__device__ __forceinline__ void scaled2(float& q0, float& q1, float a0, float a1, float m) {  // q <- a * m
#ifdef KERNELGEN_ARCH_PAIRS
  if constexpr (kPacked) {
    set2(q0, q1, __fmul2_rn(make_float2(a0, a1), make_float2(m, m)));
    return;
  }
#endif
  q0 = __fmul_rn(a0, m);
  q1 = __fmul_rn(a1, m);
}

template <bool kPacked>
__device__ __forceinline__ void sub2(float& a0, float& a1, float b) {  // a <- a - b
#ifdef KERNELGEN_ARCH_PAIRS
  if constexpr (kPacked) {
    set2(a0, a1, __fadd2_rn(make_float2(a0, a1), make_float2(-b, -b)));
    return;
  }
#endif
  a0 = __fsub_rn(a0, b);
  a1 = __fsub_rn(a1, b);
}

// a <- (a * inv) * w [+ bias]: the norm's scaling, each product rounded.
template <bool kPacked, bool kBias>
__device__ __forceinline__ void scale2(float& a0, float& a1, float inv, float w0, float w1, float b0, float b1) {
#ifdef KERNELGEN_ARCH_PAIRS
  if constexpr (kPacked) {
    set2(a0, a1, __fmul2_rn(__fmul2_rn(make_float2(a0, a1), make_float2(inv, inv)), make_float2(w0, w1)));
    if constexpr (kBias) {  // scalar adds: a packed add of a packed product would become an FFMA2
      a0 = __fadd_rn(a0, b0);
      a1 = __fadd_rn(a1, b1);
    }
    return;
  }
#endif
  a0 = __fmul_rn(__fmul_rn(a0, inv), w0);
  if constexpr (kBias) a0 = __fadd_rn(a0, b0);
  a1 = __fmul_rn(__fmul_rn(a1, inv), w1);
  if constexpr (kBias) a1 = __fadd_rn(a1, b1);
}

// (a, b) <- (a cos - b sin, a sin + b cos): each product rounded, then one rounded sum.
template <bool kPacked>
__device__ __forceinline__ void rotate2(float& a, float& b, float c, float s) {
#ifdef KERNELGEN_ARCH_PAIRS
  if constexpr (kPacked) {
    const float2 p = __fmul2_rn(make_float2(a, a), make_float2(c, s));
    const float2 q = __fmul2_rn(make_float2(b, b), make_float2(s, c));
    a = __fsub_rn(p.x, q.x);  // scalar: a packed add of packed products would become an FFMA2
    b = __fadd_rn(p.y, q.y);
    return;
  }
#endif
  const float a0 = a, b0 = b;
  a = __fsub_rn(__fmul_rn(a0, c), __fmul_rn(b0, s));
  b = __fadd_rn(__fmul_rn(a0, s), __fmul_rn(b0, c));
}

// One butterfly stage across lanes: lower lane v + other, upper lane other - v (sign = +1 / -1).
template <bool kPacked>
__device__ __forceinline__ void lane_butterfly2(float& a0, float& a1, float sign, int mask) {
#ifdef KERNELGEN_ARCH_PAIRS
  if constexpr (kPacked) {
    const float o0 = __shfl_xor_sync(0xFFFFFFFFu, a0, mask), o1 = __shfl_xor_sync(0xFFFFFFFFu, a1, mask);
    set2(a0, a1, __ffma2_rn(make_float2(sign, sign), make_float2(a0, a1), make_float2(o0, o1)));
    return;
  }
#endif
  a0 = __fmaf_rn(sign, a0, __shfl_xor_sync(0xFFFFFFFFu, a0, mask));
  a1 = __fmaf_rn(sign, a1, __shfl_xor_sync(0xFFFFFFFFu, a1, mask));
}

// e2m1 codes of q[0..N), packed as nibbles (element k in bits 4k..4k+3, low nibble first).
// Magnitude index by the thresholds of docs/layouts.md (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5; strictly
// above rounds up), saturating at 6; sign in bit 3 from the sign bit (as signbit(q)).
// From 1 up the e2m1 magnitudes are the floats with one mantissa bit, so the index is the float's
// bits rounded to one mantissa bit with ties down: add just under half a step, shift (no compares,
// no float-to-int convert). Below 1 the magnitudes are 0.5 apart: a/2 + 1/2, rounded up (so a value
// just past a threshold stays past it), maps them onto [0.5, 1] where the same rounding gives the
// index; the max picks that branch exactly when a < 1. Checked against the thresholds for every
// float near each threshold and a stride over [0, 16), both signs. A NaN gives 7 (fminf drops it); no
// NaN reaches the codes: a row holding one is stored as a NaN row (codes 0, scale 0xFF).
constexpr uint32_t kE2m1Bias = 0x1FFFFFu - 0x3F000000u;  // (bits + bias) >> 22: 0.5 -> 0, 1.0 -> 2, 2 -> 4, 6 -> 7

template <int kShift>
__device__ __forceinline__ uint32_t shift_right(uint32_t v) {  // a negative kShift shifts left
  if constexpr (kShift >= 0) return v >> kShift; else return v << -kShift;
}

template <int K>
__device__ __forceinline__ uint32_t e2m1_nibble(float q) {
  const float a = fminf(fabsf(q), float(kE2m1Max));
  const float b = fmaxf(a, __fmaf_ru(a, 0.5f, 0.5f));
  const uint32_t index = __float_as_uint(b) + kE2m1Bias;  // magnitude index in bits 22..24, zeros above
  return (shift_right<22 - 4 * K>(index) & (7u << (4 * K))) | (shift_right<28 - 4 * K>(__float_as_uint(q)) & (8u << (4 * K)));
}

// NVFP4's e2m1 codes: round to nearest, ties to the even code, saturating at 6, as PTX's
// cvt.rn.satfinite.e2m1x2.f32 (sm_100a/sm_120a only, so written out here for every arch): a tie at
// 0.75, 1.75 or 3.5 rounds up (to 1, 2, 4), at 0.25, 1.25, 2.5 or 5 down. Below 2 the magnitudes are
// the multiples of 0.5, which is the spacing of the floats in [2^22, 2^23): one float add of 2^22 rounds
// a to them, ties to even (an even last bit there is a whole number, the even code), and the sum's bits
// less 2^22's are the index. From 2 up the magnitudes are the floats with one mantissa bit: the bits
// rounded to one mantissa bit, ties to even (add just under half a step plus the kept bit), shifted.
// No compare chain and no convert; checked against the grid's nearest-even rounding for every float in
// [0, 16] and inf (saturating). A NaN gives some code: no NaN reaches the codes (such a row is stored as
// a NaN row, codes 0 and scales 0x7F).
constexpr uint32_t kE2m1Half = 0x4A800000u;  // the bits of 2^22, where the float spacing is 0.5
constexpr uint32_t kE2m1RneBias = 0x1FFFFFu - (252u << 22);  // (bits + bias + kept bit) >> 22: 2 -> 4, 6 -> 7
template <int K>
__device__ __forceinline__ uint32_t e2m1_nibble_rne(float q) {
  const float a = fminf(fabsf(q), float(kE2m1Max));
  const uint32_t low = __float_as_uint(__fadd_rn(a, 0x1p22f)) - kE2m1Half;  // a < 2: index 0..4
  const uint32_t bits = __float_as_uint(a);
  const uint32_t high = (bits + kE2m1RneBias + ((bits >> 22) & 1u)) >> 22;  // a >= 2: index 4..7
  const uint32_t index = a < 2.f ? low : high;
  return (index << (4 * K)) | (shift_right<28 - 4 * K>(__float_as_uint(q)) & (8u << (4 * K)));
}

// Two e2m1 codes by the hardware (cvt.rn.satfinite.e2m1x2.f32: round to nearest even, saturating at 6; the
// Blackwell arch-specific targets only): the even dim in the low nibble (the instruction puts its first operand
// in the high one). launch.hw_convert picks it where the target has it; elsewhere the software rounding runs.
#if defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM103_ALL) || \
    defined(__CUDA_ARCH_FEAT_SM120_ALL) || defined(__CUDA_ARCH_FEAT_SM121_ALL)
#define KERNELGEN_HW_E2M1 1
__device__ __forceinline__ uint32_t e2m1x2_hw(float even, float odd) {
  uint32_t out;
  asm("{\n .reg .b8 b;\n cvt.rn.satfinite.e2m1x2.f32 b, %2, %1;\n cvt.u32.u8 %0, b;\n}" : "=r"(out) : "f"(even), "f"(odd));
  return out;
}
#endif

// N e2m1 codes in one word, code k in bits 4k..4k+3 (the low nibble holds the even dim), rounded as the
// format asks: kTiesEven, NVFP4's (e2m1_nibble_rne), else the indexer's (e2m1_nibble).
template <bool kTiesEven, int N, int K = 0>
__device__ __forceinline__ uint32_t e2m1_pack(const float (&q)[N]) {
  static_assert(N <= 8, "at most 8 nibbles per word");
  if constexpr (K == N) {
    return 0u;
  } else {
    const uint32_t nibble = kTiesEven ? e2m1_nibble_rne<K>(q[K]) : e2m1_nibble<K>(q[K]);
    return nibble | e2m1_pack<kTiesEven, N, K + 1>(q);
  }
}

// The codes a store writes: rounded to nearest even by the hardware where kHw asks and the target has the
// instruction (the same codes, checked by the tuner on the GPU before it may choose it), else by e2m1_pack.
template <bool kTiesEven, bool kHw, int N>
__device__ __forceinline__ uint32_t e2m1_codes(const float (&q)[N]) {
#ifdef KERNELGEN_HW_E2M1
  if constexpr (kHw && kTiesEven) {
    static_assert(N % 2 == 0, "e2m1 codes come in pairs");
    uint32_t word = 0;
#pragma unroll
    for (int k = 0; k < N; k += 2) word |= e2m1x2_hw(q[k], q[k + 1]) << (4 * k);
    return word;
  }
#endif
  return e2m1_pack<kTiesEven>(q);
}

}  // namespace kernelgen
