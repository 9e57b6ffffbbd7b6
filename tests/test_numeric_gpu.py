"""The quantizers' range-check-free arithmetic (numeric.cuh) against CUDA's IEEE operations, on the GPU.

The fp8 per-token codes are those of v * RN(1 / scale), with RN(1 / scale) computed by
rcp_rn_in_range (the approximate reciprocal and one Newton step, without rcp.rn's range check). Its
approximation is the hardware's, so no CPU emulation can stand in for it: this test runs it for every
float32 in [2^-125, 2^125) (all 2^23 mantissas at each of 250 exponents) beside __frcp_rn, which PTX
defines as correctly rounded, and counts the differences. div_by<448> and div_by<6> (checked on the
CPU with the FMAs emulated in tests/test_numeric.py) are run here too, beside __fdiv_rn, over the
amax range the kernels see."""
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

// counts[0]: rcp_rn_in_range(b) != __frcp_rn(b) for b = 2^(e - 127) x (1 + m / 2^23), e in [e_lo, e_hi);
// counts[1], counts[2]: div_by<448>(a), div_by<6>(a) != __fdiv_rn over the same floats a.
// first[0..2]: the bits of one failing input, for the message.
__global__ void compare(int e_lo, int e_hi, unsigned long long* counts, uint32_t* first) {
  const uint64_t total = uint64_t(e_hi - e_lo) << 23;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < total; i += uint64_t(gridDim.x) * blockDim.x) {
    const uint32_t bits = (uint32_t(e_lo + (i >> 23)) << 23) | uint32_t(i & 0x7FFFFF);
    const float b = __uint_as_float(bits);
    if (__float_as_uint(kernelgen::rcp_rn_in_range(b)) != __float_as_uint(__frcp_rn(b))) {
      atomicAdd(&counts[0], 1ull);
      first[0] = bits;
    }
    if (__float_as_uint(kernelgen::div_by<448>(b)) != __float_as_uint(__fdiv_rn(b, 448.0f))) {
      atomicAdd(&counts[1], 1ull);
      first[1] = bits;
    }
    if (__float_as_uint(kernelgen::div_by<6>(b)) != __float_as_uint(__fdiv_rn(b, 6.0f))) {
      atomicAdd(&counts[2], 1ull);
      first[2] = bits;
    }
  }
}

void run(tvm::ffi::TensorView counts, tvm::ffi::TensorView first, int64_t e_lo, int64_t e_hi) {
  compare<<<1024, 256>>>(static_cast<int>(e_lo), static_cast<int>(e_hi),
                         static_cast<unsigned long long*>(counts.data_ptr()), static_cast<uint32_t*>(first.data_ptr()));
}
"""


def test_range_check_free_reciprocal_and_divisions_match_ieee(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from tvm_ffi.cpp import load_inline

    major, minor = torch.cuda.get_device_capability()
    monkeypatch.setenv("TVM_FFI_CUDA_ARCH_LIST", f"{major}.{minor}")  # tvm-ffi's own build: this GPU only
    monkeypatch.setenv("CUDA_HOME", str(knobs.cuda_home()))
    module = load_inline("kernelgen_numeric_check", cuda_sources=SOURCE, functions=["run"],
                         extra_include_paths=[str(resources.include_dir())], build_directory=str(tmp_path))
    counts = torch.zeros(3, dtype=torch.int64, device="cuda")
    first = torch.zeros(3, dtype=torch.int32, device="cuda")
    # Every scale a quantizer makes lies in [1e-4 / 448, FLT_MAX / 448], inside [2^-125, 2^125): biased
    # exponents 2 .. 251. amax, the dividend of div_by, lies in [1e-4, FLT_MAX]: exponents 113 .. 254.
    module.run(counts, first, 2, 252)
    torch.cuda.synchronize()
    rcp_bad = int(counts[0])  # the division counts of this range include quotients below the normal range
    assert rcp_bad == 0, f"rcp_rn_in_range differs from RN(1/b) at {rcp_bad} inputs, e.g. bits {int(first[0]) & 0xFFFFFFFF:#010x}"
    counts.zero_()
    module.run(counts, first, 113, 255)
    torch.cuda.synchronize()
    _, div448_bad, div6_bad = (int(c) for c in counts.cpu())
    assert div448_bad == 0 and div6_bad == 0, (div448_bad, div6_bad, [hex(int(f) & 0xFFFFFFFF) for f in first.cpu()])
