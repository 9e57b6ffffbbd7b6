"""Pure tier: the GPU verifier accepts the reference and catches each kind of wrong write."""
from __future__ import annotations

import pytest
import torch

from kernelgen.measure import reference
from kernelgen.measure.verify import verify
from kernelgen.spec.variant import Variant

pytestmark = pytest.mark.pure

BF16 = Variant("v_bf16", head_dim=128, hadamard=True, store="bf16", page_size=4)
FP8 = Variant("v_fp8", head_dim=128, hadamard=True, store="fp8_e4m3", page_size=4)


def reference_run(v: Variant, tamper=None):
    def run(x, w, f, p, loc, cache, eps, bias, scale):
        reference.store(v, x, w, f, p, loc, cache, eps, bias, scale=scale)
        if tamper:
            tamper(cache, loc)
    return run


def first_written(loc: torch.Tensor) -> int:
    return int(loc[(loc >= 0) & (loc < 10**6)][0])


def test_reference_passes() -> None:
    for v in (BF16, FP8):
        report = verify(v, reference_run(v), 200, 1, "cpu", seed=1)
        assert report.ok and report.skipped_rows > 0, report


def test_a_changed_bf16_value_fails() -> None:
    def flip(cache, loc):
        slot = first_written(loc)
        cache[slot // 4, (slot % 4) * 256] ^= 1
    report = verify(BF16, reference_run(BF16, flip), 200, 1, "cpu", seed=1)
    assert report.bf16_mismatches == 1 and not report.ok


def test_a_write_outside_the_slots_fails() -> None:
    def stray(cache, loc):
        used = set(loc.tolist())
        free = next(s for s in range(cache.shape[0] * 4) if s not in used)  # the pool has slots to spare
        cache[free // 4, (free % 4) * 256] ^= 0xFF
    report = verify(BF16, reference_run(BF16, stray), 200, 1, "cpu", seed=1)
    assert report.outside_changed == 1 and not report.ok


def test_codes_two_steps_off_and_wrong_scales_fail() -> None:
    def bump_code(cache, loc):
        slot = first_written(loc)
        cache[slot // 4, (slot % 4) * 128] ^= 0x02  # two steps in the e4m3 mantissa
    assert verify(FP8, reference_run(FP8, bump_code), 200, 1, "cpu", seed=2).code_far == 1

    def bump_scale(cache, loc):
        slot = first_written(loc)
        cache[slot // 4, 128 * 4 + (slot % 4) * 4] ^= 0x04  # fp32 scale off by 4 ulps
    report = verify(FP8, reference_run(FP8, bump_scale), 200, 1, "cpu", seed=2)
    assert report.scale_max_ulp == 4 and not report.ok


def test_exact_means_exact_one_code_one_step_off_or_one_scale_ulp_fails() -> None:
    def nudge_code(cache, loc):
        slot = first_written(loc)
        code = int(cache[slot // 4, (slot % 4) * 128])
        cache[slot // 4, (slot % 4) * 128] = code + 1 if (code & 0x7F) < 0x7E else code - 1  # one step
    report = verify(FP8, reference_run(FP8, nudge_code), 200, 1, "cpu", seed=3)
    assert report.code_mismatches == 1 and report.code_far == 0 and not report.ok

    def nudge_scale(cache, loc):
        slot = first_written(loc)
        cache[slot // 4, 128 * 4 + (slot % 4) * 4] ^= 0x01  # fp32 scale one ulp off
    report = verify(FP8, reference_run(FP8, nudge_scale), 200, 1, "cpu", seed=3)
    assert report.scale_max_ulp == 1 and not report.ok
