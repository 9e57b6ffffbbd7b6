"""The range-check-free arithmetic of numeric.cuh against CUDA's IEEE operations, on the GPU.

The fp8 per-token codes are those of v * RN(1 / scale), with RN(1 / scale) computed by
rcp_rn_in_range (the approximate reciprocal and one Newton step, without rcp.rn's range check). Its
approximation is the hardware's, so no CPU emulation can stand in for it: this test runs it for every
float32 in [2^-125, 2^125) (all 2^23 mantissas at each of 250 exponents) beside __frcp_rn, which PTX
defines as correctly rounded, and counts the differences. div_by<448> and div_by<6> (checked on the
CPU with the FMAs emulated in tests/test_numeric.py) are run here too, beside __fdiv_rn, over the
amax range the kernels see; so are the norm's sqrt_rn_in_range and inv_sqrt_rn, beside __fsqrt_rn and
__frcp_rn(__fsqrt_rn), for every float their callers can pass."""
from __future__ import annotations

from pathlib import Path

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
// 4 inv_sqrt_rn (eps = 1e-6) / __frcp_rn(__fsqrt_rn). counts[0]: inputs that differ; first: one of them.
__device__ __forceinline__ bool differs(int op, float a) {
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
"""

# (op, name, biased exponents [lo, hi)). Every scale a quantizer makes lies in [1e-4 / 448, FLT_MAX / 448],
# inside [2^-125, 2^125): exponents 2 .. 251. amax, the dividend of div_by, lies in [1e-4, FLT_MAX]:
# exponents 113 .. 254. The norm's RN(mean_sq + eps) with eps in [2^-101, 2^100] lies in [2^-101, FLT_MAX]:
# exponents 26 .. 254 (inv_sqrt_rn is checked there with eps = 1e-6, which takes its fast path).
CASES = [(0, "rcp_rn_in_range", 2, 252), (1, "div_by<448>", 113, 255), (2, "div_by<6>", 113, 255),
         (3, "sqrt_rn_in_range", 26, 255), (4, "inv_sqrt_rn", 26, 255)]


def test_range_check_free_arithmetic_matches_ieee(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from tvm_ffi.cpp import load_inline

    major, minor = torch.cuda.get_device_capability()
    monkeypatch.setenv("TVM_FFI_CUDA_ARCH_LIST", f"{major}.{minor}")  # tvm-ffi's own build: this GPU only
    monkeypatch.setenv("CUDA_HOME", str(knobs.cuda_home()))
    module = load_inline("kernelgen_numeric_check", cuda_sources=SOURCE, functions=["run"],
                         extra_include_paths=[str(resources.include_dir())], build_directory=str(tmp_path))
    bad = {}
    for op, name, lo, hi in CASES:
        counts = torch.zeros(1, dtype=torch.int64, device="cuda")
        first = torch.zeros(1, dtype=torch.int32, device="cuda")
        module.run(counts, first, op, lo, hi)
        if int(counts[0]):
            bad[name] = (int(counts[0]), f"{int(first[0]) & 0xFFFFFFFF:#010x}")
    assert not bad, f"differs from the IEEE op (count, bits of one input): {bad}"
