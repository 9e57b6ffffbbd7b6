"""The device code's division by a quantizer's largest code (numeric.cuh div_by<D>) is correctly rounded,
and its power-of-two scale exponent (pow2_scale_exponent<D>) is ceil(log2) of that quotient.

The kernel computes a / D as q0 = RN(a * c), r = RN(a - q0 * D) (one FMA), q = RN(q0 + r * c) (one FMA)
with c = RN(1 / D) and no range check. D = odd * 2^k, so scaling a by a power of two scales every step
exactly: the mantissa of a alone decides the rounding, and all 2^23 mantissas are checked here, at the
exponents the kernel sees (amax is floored at 1e-4 and finite), with the FMAs emulated exactly. The
scale exponent is read off a's bits without dividing; by the same argument every mantissa at a few
exponents is a complete check. It is checked twice: the rule in numpy (a pure test), and numeric.cuh's
own code built for the host with nvcc (a build test); tests/test_numeric_gpu.py runs it on the GPU."""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from kernelgen import resources
from kernelgen.build.toolchain import find_nvcc

F32 = np.float32


def _round_sum_to_f32(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """RN_f32(x + y) for float64 x, y whose exact sum float64 may not hold (one rounding, not two)."""
    s = x + y
    err = (x - (s - (s - x))) + (y - (s - x))  # TwoSum: s + err == x + y exactly
    f = s.astype(F32)
    back = f.astype(np.float64)
    # s exactly halfway between two floats: float32(s) broke the tie to even; the exact sum lies on
    # err's side of that midpoint, so round towards it instead.
    other = np.where(s > back, np.nextafter(f, F32(np.inf)), np.nextafter(f, F32(-np.inf)))
    halfway = (s != back) & (np.abs(s - back) == np.abs(other.astype(np.float64) - s))
    towards_other = np.sign(err) == np.sign(other.astype(np.float64) - s)
    return np.where(halfway & (err != 0), np.where(towards_other, other, f), f)


def kernel_div(a: np.ndarray, d: int) -> np.ndarray:
    """div_by<D> as the device runs it (every product below is exact in float64)."""
    c = F32(1.0 / d)
    q0 = (a.astype(np.float64) * np.float64(c)).astype(F32)  # 24 x 24 bits: exact, one rounding
    r = (a.astype(np.float64) - q0.astype(np.float64) * d).astype(F32)  # the FMA's exact remainder, rounded once
    return _round_sum_to_f32(q0.astype(np.float64), r.astype(np.float64) * np.float64(c))


def is_correctly_rounded(a: np.ndarray, d: int, q: np.ndarray) -> np.ndarray:
    """q is the float nearest a / d (ties to even): compare exact remainders with both neighbours."""
    a64 = a.astype(np.float64)
    err = np.abs(a64 - q.astype(np.float64) * d)
    up = np.abs(a64 - np.nextafter(q, F32(np.inf)).astype(np.float64) * d)
    down = np.abs(a64 - np.nextafter(q, F32(0)).astype(np.float64) * d)
    even = (q.view(np.uint32) & 1) == 0
    return ((err < up) | ((err == up) & even)) & ((err < down) | ((err == down) & even))


@pytest.mark.parametrize("d", [448, 6, 127])
@pytest.mark.parametrize("exponent", [-14, 0, 40, 127])
def test_division_by_a_constant_is_correctly_rounded_for_every_mantissa(d: int, exponent: int) -> None:
    mantissas = np.arange(1 << 23, dtype=np.uint32)
    a = ((np.uint32(exponent + 127) << np.uint32(23)) | mantissas).view(F32)
    q = kernel_div(a, d)
    ok = is_correctly_rounded(a, d, q)
    assert ok.all(), f"a / {d} misrounded for a = {a[~ok][:4].tolist()}"


def test_the_check_catches_a_misrounded_quotient() -> None:
    a = np.array([1.0, 1.5, 3.0], dtype=F32)
    q = (a.astype(np.float64) / 7).astype(F32)
    assert is_correctly_rounded(a, 7, q).all()
    assert not is_correctly_rounded(a, 7, np.nextafter(q, F32(np.inf))).any()
    # without the Markstein step (q0 alone) some quotients by 448 are off by an ulp
    m = ((np.uint32(127) << np.uint32(23)) | np.arange(1 << 16, dtype=np.uint32)).view(F32)
    q0 = (m.astype(np.float64) * np.float64(F32(1 / 448))).astype(F32)
    assert not is_correctly_rounded(m, 448, q0).all()


def scale_exponent(a: np.ndarray, d: int) -> np.ndarray:
    """pow2_scale_exponent<D> as the device computes it: a's exponent minus D's, plus one when a's
    mantissa bits exceed D's (a floored at 1e-4 first)."""
    k = d.bit_length() - 1
    d_mantissa = (d << (23 - k)) & 0x7FFFFF
    bits = np.maximum(a, F32(1e-4)).view(np.uint32).astype(np.int64)
    return (bits >> 23) - 127 - k + ((bits & 0x7FFFFF) > d_mantissa)


def ceil_log2_of_quotient(a: np.ndarray, d: int) -> np.ndarray:
    """ceil(log2(RN_f32(max(a, 1e-4) / d))): the float64 quotient rounded to float32 is the correctly
    rounded one (53 >= 2 x 24 + 2 bits: the double rounding is innocuous for a division)."""
    q = (np.maximum(a, F32(1e-4)).astype(np.float64) / d).astype(F32)
    bits = q.view(np.uint32).astype(np.int64)
    return (bits >> 23) - 127 + ((bits & 0x7FFFFF) != 0)


@pytest.mark.parametrize("d", [448, 6, 8])
@pytest.mark.parametrize("exponent", [-14, -13, 0, 40, 127])
def test_scale_exponent_from_bits_is_ceil_log2_of_the_quotient_for_every_mantissa(d: int, exponent: int) -> None:
    mantissas = np.arange(1 << 23, dtype=np.uint32)
    a = ((np.uint32(exponent + 127) << np.uint32(23)) | mantissas).view(F32)
    mine, want = scale_exponent(a, d), ceil_log2_of_quotient(a, d)
    bad = mine != want
    assert not bad.any(), f"scale exponent for a / {d} wrong at a = {a[bad][:4].tolist()}"


def test_the_exponent_check_catches_an_off_by_one_threshold() -> None:
    # a threshold one mantissa step off fails: >= for > (or D's mantissa - 1) at a = 448, D's mantissa + 1
    # at the float just above 448
    a = np.array([448.0, np.nextafter(F32(448.0), F32(np.inf))], dtype=F32)
    want = ceil_log2_of_quotient(a, 448)
    assert want.tolist() == [0, 1] and (scale_exponent(a, 448) == want).all()
    bits = a.view(np.uint32).astype(np.int64)
    for wrong in ((bits & 0x7FFFFF) >= 0x600000, (bits & 0x7FFFFF) > 0x5FFFFF, (bits & 0x7FFFFF) > 0x600001):
        assert ((bits >> 23) - 127 - 8 + wrong != want).any()


HOST_CHECK = r"""
#include <cstdio>
#include "kernelgen/numeric.cuh"

// numeric.cuh's pow2_scale_exponent<Q>, run on the host, against ceil_log2 of the quotient rounded once
// (the float64 quotient rounded to float32: 53 >= 2 x 24 + 2 bits, so the double rounding is innocuous).
template <int Q>
long check(uint32_t bits) {
  float a;
  std::memcpy(&a, &bits, sizeof a);
  const float q = static_cast<float>(static_cast<double>(fmaxf(a, kernelgen::kAmaxFloor)) / Q);
  if (kernelgen::pow2_scale_exponent<Q>(a) == kernelgen::ceil_log2(q)) return 0;
  std::printf("%d %08x\n", Q, bits);
  return 1;
}

int main() {
  long bad = 0;
  for (int e : {-14, -13, 0, 40, 127})  // every mantissa at five exponents
    for (uint32_t m = 0; m < (1u << 23) && bad < 8; ++m) {
      const uint32_t bits = (uint32_t(e + 127) << 23) | m;
      bad += check<448>(bits) + check<6>(bits);
    }
  for (uint32_t e = 0; e < 255; ++e)  // every exponent, a spread of mantissas and the thresholds' neighbours
    for (uint32_t m : {0u, 1u, 0x3FFFFFu, 0x400000u, 0x400001u, 0x5FFFFFu, 0x600000u, 0x600001u, 0x7FFFFFu, 0x2468ACu})
      bad += check<448>((e << 23) | m) + check<6>((e << 23) | m);
  std::printf("%ld\n", bad);
  return bad != 0;
}
"""


@pytest.mark.build
def test_numeric_cuh_scale_exponent_built_for_the_host_is_ceil_log2_of_the_quotient(tmp_path: Path) -> None:
    nvcc = find_nvcc()
    assert nvcc is not None
    source = tmp_path / "check.cu"
    source.write_text(HOST_CHECK)
    binary = tmp_path / "check"
    built = subprocess.run([str(nvcc), "-std=c++17", "-O2", "-arch=sm_90a", f"-I{resources.include_dir()}",
                            str(source), "-o", str(binary)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    ran = subprocess.run([str(binary)], capture_output=True, text=True)
    assert ran.returncode == 0, f"pow2_scale_exponent differs from ceil_log2(RN(a / Q)) at (Q, bits of a): {ran.stdout}"
