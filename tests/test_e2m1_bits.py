"""Pure tier: the device's software e2m1 rounding (templates/kernelgen/numeric.cuh) is integer and float32
arithmetic on a value's bits; its constants, read from the header, give the codes of the grid's rounding for every
float near every grid point and threshold (the whole range [0, 16] was checked once, 47 s with numpy: no mismatch).
NVFP4's, MXFP4's and DeepSeek-V4.1's codes round to nearest even (e2m1_nibble_rne), the indexer's fp4 ties down
(e2m1_nibble)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.pure
HEADER = (Path(__file__).resolve().parents[1] / "templates" / "kernelgen" / "numeric.cuh").read_text()
GRID = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)


def constant(name: str) -> int:
    found = re.search(rf"constexpr uint32_t {name} = ([^;]+);", HEADER)
    assert found is not None, name
    return int(eval(found.group(1).replace("u", ""))) % 2 ** 32  # e.g. 0x1FFFFFu - (252u << 22), wrapping as uint32


def nearest(a: np.ndarray, ties_even: bool) -> np.ndarray:
    """The index of the grid value nearest to min(a, 6); a tie to the even index, or down."""
    a = np.minimum(a.astype(np.float64), 6.0)
    hi = np.clip(np.searchsorted(GRID, a), 1, 7)
    below, above = a - GRID[hi - 1], GRID[hi] - a
    up = (above < below) | ((above == below) & ((hi % 2 == 0) if ties_even else False))
    return np.where(a <= 0, 0, np.where(up, hi, hi - 1)).astype(np.uint32)


def device_rne(a: np.ndarray) -> np.ndarray:
    """e2m1_nibble_rne's index: min(a, 6); below 2 the bits of RN(a + 2^22) less 2^22's, else the bits plus
    kE2m1RneBias plus the kept mantissa bit, shifted by 22."""
    a = np.minimum(a, np.float32(6.0)).astype(np.float32)
    low = ((a + np.float32(2.0 ** 22)).view(np.uint32) - np.uint32(constant("kE2m1Half"))).astype(np.uint32)
    bits = a.view(np.uint32)
    high = (bits + np.uint32(constant("kE2m1RneBias")) + ((bits >> 22) & 1)) >> 22
    return np.where(a < np.float32(2.0), low, high).astype(np.uint32)


def device_ties_down(a: np.ndarray) -> np.ndarray:
    """e2m1_nibble's index: b = max(a, RU(a / 2 + 1/2)) for a = min(a, 6), (bits(b) + kE2m1Bias) >> 22; RU is taken
    here as the next float up from the float64 sum where that is not a float32."""
    a = np.minimum(a, np.float32(6.0)).astype(np.float32)
    exact = a.astype(np.float64) * 0.5 + 0.5
    half = exact.astype(np.float32)
    half = np.where(half.astype(np.float64) < exact, np.nextafter(half, np.float32(np.inf)), half)
    b = np.maximum(a, half)
    return ((b.view(np.uint32) + np.uint32(constant("kE2m1Bias"))) >> 22).astype(np.uint32) & 7


def near_every_step() -> np.ndarray:
    """Every float within 4096 ulps of each grid point and threshold, a stride over [0, 16], and inf."""
    points = np.concatenate([GRID, (GRID[1:] + GRID[:-1]) / 2, [8.0, 16.0]]).astype(np.float32)
    bits = points.view(np.uint32)[:, None].astype(np.int64) + np.arange(-4096, 4097)
    bits = bits[(bits >= 0)].astype(np.uint32)
    stride = np.arange(0, np.float32(16.0).view(np.uint32), 9973, dtype=np.uint32)
    return np.concatenate([bits.view(np.float32).ravel(), stride.view(np.float32), [np.float32(np.inf)]])


def test_the_nearest_even_bits_are_the_grids_rounding() -> None:
    a = near_every_step()
    assert np.array_equal(device_rne(a), nearest(a, ties_even=True))


def test_a_wrong_constant_would_be_caught() -> None:
    a = near_every_step()
    bad = np.minimum(a, np.float32(6.0))
    bits = bad.view(np.uint32)
    off_by_one = (bits + np.uint32((constant("kE2m1RneBias") + 1) % 2 ** 32) + ((bits >> 22) & 1)) >> 22  # ties all round up
    assert not np.array_equal(np.where(bad < 2, device_rne(a), off_by_one), nearest(a, ties_even=True))


def test_the_ties_down_bits_are_the_indexers_thresholds() -> None:
    a = near_every_step()
    assert np.array_equal(device_ties_down(a), nearest(a, ties_even=False))
