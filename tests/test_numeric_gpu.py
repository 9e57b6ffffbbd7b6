"""The range-check-free arithmetic of numeric.cuh against CUDA's IEEE operations, on the GPU.

The fp8 per-token codes are those of v * RN(1 / scale), with RN(1 / scale) computed by
rcp_rn_in_range (the approximate reciprocal and one Newton step, without rcp.rn's range check). Its
approximation is the hardware's, so no CPU emulation can stand in for it: this test runs it for every
float32 in [2^-125, 2^125) (all 2^23 mantissas at each of 250 exponents) beside __frcp_rn, which PTX
defines as correctly rounded, and counts the differences. div_by<448> and div_by<6> (checked on the
CPU with the FMAs emulated in tests/test_numeric.py) are run here too, beside __fdiv_rn, over the
amax range the kernels see; so are the norm's sqrt_rn_in_range and inv_sqrt_rn, beside __fsqrt_rn and
__frcp_rn(__fsqrt_rn), for every float their callers can pass, and the power-of-two quantizers' scale
exponent read off amax's bits (pow2_scale_exponent), beside ceil_log2 of the correctly rounded quotient,
for every non-negative finite float."""
from __future__ import annotations

import math
import struct
from typing import Any

import pytest

from kernelgen import knobs, resources

pytestmark = pytest.mark.gpu

SOURCE = r"""
#include <cstdint>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>
#include "kernelgen/numeric.cuh"

// One of numeric.cuh's range-check-free ops beside CUDA's IEEE op, for every float
// a = 2^(e - 127) x (1 + m / 2^23), e in [e_lo, e_hi): op 0 rcp_rn_in_range / __frcp_rn,
// 1 div_by<448> / __fdiv_rn, 2 div_by<6> / __fdiv_rn, 3 sqrt_rn_in_range / __fsqrt_rn,
// 4 inv_sqrt_rn (eps = 1e-6) / __frcp_rn(__fsqrt_rn), 5 and 6 pow2_scale_exponent<448 | 6> / ceil_log2 of
// __fdiv_rn(max(a, 1e-4), 448 | 6). counts[0]: inputs that differ; first: one of them.
__device__ __forceinline__ bool differs(int op, float a) {
  if (op == 5 || op == 6) {
    const int q = op == 5 ? 448 : 6;
    const int mine = op == 5 ? kernelgen::pow2_scale_exponent<448>(a) : kernelgen::pow2_scale_exponent<6>(a);
    return mine != kernelgen::ceil_log2(__fdiv_rn(fmaxf(a, kernelgen::kAmaxFloor), float(q)));
  }
  float mine, ieee;
  switch (op) {
    case 0: mine = kernelgen::rcp_rn_in_range(a); ieee = __frcp_rn(a); break;
    case 1: mine = kernelgen::div_by<448>(a); ieee = __fdiv_rn(a, 448.0f); break;
    case 2: mine = kernelgen::div_by<6>(a); ieee = __fdiv_rn(a, 6.0f); break;
    case 3: mine = kernelgen::sqrt_rn_in_range(a); ieee = __fsqrt_rn(a); break;
    default: mine = kernelgen::inv_sqrt_rn(a, 1e-6f); ieee = __frcp_rn(__fsqrt_rn(a)); break;
  }
  return __float_as_uint(mine) != __float_as_uint(ieee);
}

__global__ void compare(int op, int e_lo, int e_hi, unsigned long long* counts, uint32_t* first) {
  const uint64_t total = uint64_t(e_hi - e_lo) << 23;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < total; i += uint64_t(gridDim.x) * blockDim.x) {
    const uint32_t bits = (uint32_t(e_lo + (i >> 23)) << 23) | uint32_t(i & 0x7FFFFF);
    if (differs(op, __uint_as_float(bits))) {
      atomicAdd(&counts[0], 1ull);
      first[0] = bits;
    }
  }
}

void run(tvm::ffi::TensorView counts, tvm::ffi::TensorView first, int64_t op, int64_t e_lo, int64_t e_hi) {
  compare<<<1024, 256>>>(static_cast<int>(op), static_cast<int>(e_lo), static_cast<int>(e_hi),
                         static_cast<unsigned long long*>(counts.data_ptr()), static_cast<uint32_t*>(first.data_ptr()));
}

// inv_sqrt_rn(a, eps) beside __frcp_rn(__fsqrt_rn(a)) for (eps, a) pairs: out[i] = 1 where the bits differ
// (two NaNs count as equal: either makes a NaN row).
__global__ void compare_pairs(const float* pairs, int n, int* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float eps = pairs[2 * i], a = pairs[2 * i + 1];
  const float mine = kernelgen::inv_sqrt_rn(a, eps), ieee = __frcp_rn(__fsqrt_rn(a));
  out[i] = !(isnan(mine) && isnan(ieee)) && __float_as_uint(mine) != __float_as_uint(ieee);
}

// launch.lean_math's operations beside the library ones they stand for, for every float a of exponents [e_lo, e_hi)
// (255: inf and the NaNs), sign s: op 0 div_shared<2> of (a, b) and (-a, b) / __fdiv_rn, 1 pow2_scale_vllm(a) /
// exp2f(ceilf(log2f(fmaxf(__fdiv_rn(a, 448), 1e-4)))) and its __frcp_rn, 2 bf16_round2(a, -a) / bf16_round. Two NaNs
// count as equal (either makes a NaN row).
__device__ __forceinline__ bool same(float x, float y) {
  return __float_as_uint(x) == __float_as_uint(y) || (isnan(x) && isnan(y));
}

__global__ void compare_lean(int op, float b, int e_lo, int e_hi, unsigned long long* counts, uint32_t* first) {
  const uint64_t total = uint64_t(e_hi - e_lo) << 23;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < total; i += uint64_t(gridDim.x) * blockDim.x) {
    const uint32_t bits = (uint32_t(e_lo + (i >> 23)) << 23) | uint32_t(i & 0x7FFFFF);
    const float a = __uint_as_float(bits);
    bool bad;
    if (op == 0) {
      const float in[2] = {a, -a};
      float q[2];
      kernelgen::div_shared(q, in, b, kernelgen::rcp_rn_in_range(b));
      bad = !same(q[0], __fdiv_rn(a, b)) || !same(q[1], __fdiv_rn(-a, b));
    } else if (op == 1) {
      float scale, inv;
      kernelgen::pow2_scale_vllm(a, scale, inv);
      const float want = exp2f(ceilf(log2f(fmaxf(__fdiv_rn(a, 448.0f), kernelgen::kAmaxFloor))));
      bad = !same(scale, want) || !same(inv, __frcp_rn(want));
    } else {
      float x = a, y = -a;
      kernelgen::bf16_round2(x, y);
      bad = !same(x, kernelgen::bf16_round(a)) || !same(y, kernelgen::bf16_round(-a));
    }
    if (bad) {
      atomicAdd(&counts[0], 1ull);
      first[0] = bits;
    }
  }
}

void run_lean(tvm::ffi::TensorView counts, tvm::ffi::TensorView first, int64_t op, double b, int64_t e_lo, int64_t e_hi) {
  compare_lean<<<2048, 256>>>(static_cast<int>(op), static_cast<float>(b), static_cast<int>(e_lo), static_cast<int>(e_hi),
                              static_cast<unsigned long long*>(counts.data_ptr()), static_cast<uint32_t*>(first.data_ptr()));
}

void run_pairs(tvm::ffi::TensorView pairs, tvm::ffi::TensorView out) {
  const int n = static_cast<int>(out.size(0));
  compare_pairs<<<(n + 255) / 256, 256>>>(static_cast<const float*>(pairs.data_ptr()), n, static_cast<int*>(out.data_ptr()));
}
"""

# (op, name, biased exponents [lo, hi)). Every scale a quantizer makes lies in [1e-4 / 448, FLT_MAX / 448],
# inside [2^-125, 2^125): exponents 2 .. 251. amax, the dividend of div_by, lies in [1e-4, FLT_MAX]:
# exponents 113 .. 254. The norm's RN(mean_sq + eps) with eps in [2^-101, 2^100] lies in [2^-101, FLT_MAX]:
# exponents 26 .. 254 (inv_sqrt_rn is checked there with eps = 1e-6, which takes its fast path).
# The scale exponents are checked for every non-negative finite float (exponents 0 .. 254, the floor included).
CASES = [(0, "rcp_rn_in_range", 2, 252), (1, "div_by<448>", 113, 255), (2, "div_by<6>", 113, 255),
         (3, "sqrt_rn_in_range", 26, 255), (4, "inv_sqrt_rn", 26, 255),
         (5, "pow2_scale_exponent<448>", 0, 255), (6, "pow2_scale_exponent<6>", 0, 255)]


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import torch
    from tvm_ffi.cpp import load_inline

    major, minor = torch.cuda.get_device_capability()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TVM_FFI_CUDA_ARCH_LIST", f"{major}.{minor}")  # tvm-ffi's own build: this GPU only
        env.setenv("CUDA_HOME", str(knobs.cuda_home()))
        return load_inline("kernelgen_numeric_check", cuda_sources=SOURCE, functions=["run", "run_pairs", "run_lean"],
                           extra_include_paths=[str(resources.include_dir())],
                           build_directory=str(tmp_path_factory.mktemp("numeric")))


def test_range_check_free_arithmetic_matches_ieee(module: Any) -> None:
    import torch

    bad = {}
    for op, name, lo, hi in CASES:
        counts = torch.zeros(1, dtype=torch.int64, device="cuda")
        first = torch.zeros(1, dtype=torch.int32, device="cuda")
        module.run(counts, first, op, lo, hi)
        if int(counts[0]):
            bad[name] = (int(counts[0]), f"{int(first[0]) & 0xFFFFFFFF:#010x}")
    assert not bad, f"differs from the IEEE op (count, bits of one input): {bad}"


def _f32(v: float) -> float:
    """v rounded to float32 (inf and NaN kept)."""
    return struct.unpack("<f", struct.pack("<f", v))[0]


def _f32_step(v: float, up: bool) -> float:
    """The float32 neighbour of a positive float32 v, above or below."""
    bits = struct.unpack("<I", struct.pack("<f", v))[0]
    return struct.unpack("<f", struct.pack("<I", bits + (1 if up else -1)))[0]


def test_norm_root_takes_the_fast_path_only_inside_its_eps_range(module: Any) -> None:
    """inv_sqrt_rn's branch, with eps a run-time value: inside [2^-101, 2^100] (a >= eps there, as
    a = RN(mean_sq + eps) is) and just outside, at both ends. Outside the range a wrongly taken fast path
    gives NaN where the IEEE ops give a finite reciprocal root (subnormal a) or 0 (a = inf)."""
    import torch

    lo, hi, flt_max, tiny = 2.0 ** -101, 2.0 ** 100, 3.4028234663852886e38, 1.401298464324817e-45
    inside = [_f32(e) for e in (lo, _f32_step(lo, True), 1e-6, 1.0, _f32_step(hi, False), hi)]
    outside = [_f32(e) for e in (0.0, _f32_step(lo, False), tiny, _f32_step(hi, True), 2.0 ** 101, math.inf, math.nan, -1.0)]
    pairs = [(eps, a) for eps in inside for a in (eps, _f32_step(eps, True), 1.0, 3.0, flt_max, math.nan)]
    pairs += [(eps, _f32(a)) for eps in outside
              for a in (0.0, tiny, 1e-40, 2.0 ** -110, _f32_step(lo, False), 1.0, flt_max, math.inf)]
    table = torch.tensor(pairs, dtype=torch.float32, device="cuda")  # every value is a float32 already
    out = torch.zeros(len(pairs), dtype=torch.int32, device="cuda")
    module.run_pairs(table, out)
    wrong = [pairs[i] for i in out.nonzero().flatten().tolist()]
    assert not wrong, f"inv_sqrt_rn differs from RN(1 / RN(sqrt(a))) at (eps, a) = {wrong[:5]}"


# Divisors for the lean divide: inside its range (random mantissas, all ones, a power of two, a V4.1 fp4 group scale's
# extremes 2^-9 and 448, its ends 2^-60 and 2^60) and outside it (the whole array then takes div.rn): 2^-61, 2^61,
# a subnormal, 0, -1, inf, NaN.
LEAN_DIVISORS = [0.0173, 1.0 / 3.0, 1.9999998807907104, 1.0, 2.0 ** -9, 448.0, 2.0 ** -60, 2.0 ** 60,
                 2.0 ** -61, 2.0 ** 61, 1e-40, 0.0, -1.0, math.inf, math.nan]


def test_lean_math_matches_the_library_operations_for_every_float(module: Any) -> None:
    """launch.lean_math (tests/test_lean_math.py): div_shared beside div.rn for every float dividend (both signs, inf
    and NaN included) and each divisor above; the fp8_ds_mla power-of-two scale and its reciprocal beside exp2f /
    ceilf / log2f / rcp.rn for every non-negative float amax; the paired bf16 rounding beside the single one."""
    import torch

    bad = {}
    cases = [(0, b, f"div_shared by {b!r}") for b in LEAN_DIVISORS] + [(1, 0.0, "pow2_scale_vllm"),
                                                                          (2, 0.0, "bf16_round2")]
    for op, b, name in cases:
        counts = torch.zeros(1, dtype=torch.int64, device="cuda")
        first = torch.zeros(1, dtype=torch.int32, device="cuda")
        module.run_lean(counts, first, op, _f32(b), 0, 256)
        if int(counts[0]):
            bad[name] = (int(counts[0]), f"{int(first[0]) & 0xFFFFFFFF:#010x}")
    assert not bad, f"differs from the library operation (count, bits of one input): {bad}"
