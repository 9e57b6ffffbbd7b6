"""The device code's division by a quantizer's largest code (numeric.cuh div_by<D>) is correctly rounded.

The kernel computes a / D as q0 = RN(a * c), r = RN(a - q0 * D) (one FMA), q = RN(q0 + r * c) (one FMA)
with c = RN(1 / D) and no range check. D = odd * 2^k, so scaling a by a power of two scales every step
exactly: the mantissa of a alone decides the rounding, and all 2^23 mantissas are checked here, at the
exponents the kernel sees (amax is floored at 1e-4 and finite), with the FMAs emulated exactly."""
from __future__ import annotations

import numpy as np
import pytest

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


@pytest.mark.parametrize("d", [448, 6])
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
