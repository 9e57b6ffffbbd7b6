"""The RoPE table's layout (`rope_table`): kernelgen's (cos, sin) pairs, or the cos-half / sin-half rows of
vLLM's and FlashInfer's cos_sin_cache. Pure tier: the same angles in either layout give the same bytes, by the
reference and by the float64 oracle; tests/test_gpu.py holds the kernel to it."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from kernelgen.measure import reference
from kernelgen.measure.inputs import make_inputs, rope_table
from kernelgen.measure.oracle import check_against_oracle
from kernelgen.spec.variant import Variant


CASES = [
    Variant("t_neox_full", head_dim=128, rope_dim=128, rope_place="head", rope_style="neox", store="bf16"),
    Variant("t_neox_tail", head_dim=256, rope_dim=64, rope_style="neox", store="fp8_e4m3"),
    Variant("t_ilv_tail", head_dim=128, rope_dim=64, store="fp4_e2m1"),
    Variant("t_heads", head_dim=128, heads=4, rope_dim=128, rope_place="head", rope_style="neox", norm="rms",
            store="fp8_scaled", page_size=16),
]


@pytest.mark.pure
def test_halves_table_is_the_pairs_table_reordered() -> None:
    pairs, halves = rope_table(64, 100), rope_table(64, 100, "halves")
    assert torch.equal(halves[:, :32], pairs[:, 0::2]) and torch.equal(halves[:, 32:], pairs[:, 1::2])


@pytest.mark.pure
@pytest.mark.parametrize("v", CASES, ids=lambda v: v.name)
def test_the_same_angles_in_either_layout_store_the_same_bytes(v: Variant) -> None:
    h = replace(v, rope_table="halves")
    inputs = make_inputs(v, 200, 8, "cpu", seed=7)
    assert torch.equal(make_inputs(h, 200, 8, "cpu", seed=7)["freqs"],
                       torch.cat([inputs["freqs"][:, 0::2], inputs["freqs"][:, 1::2]], dim=1))
    want = inputs["kvcache"].clone()
    reference.store(v, inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"], inputs["out_loc"], want,
                    bias=inputs["bias"], scale=inputs["scale"])
    halves = dict(inputs, freqs=make_inputs(h, 200, 8, "cpu", seed=7)["freqs"])
    got = inputs["kvcache"].clone()
    reference.store(h, halves["x"], halves["weight"], halves["freqs"], halves["positions"], halves["out_loc"], got,
                    bias=halves["bias"], scale=halves["scale"])
    assert torch.equal(got, want)
    report = check_against_oracle(h, got, halves, poison=inputs["kvcache"])
    assert sum(report.violations.values()) == 0 and report.rows > 100
    # the pairs table read as halves is another rotation: the oracle must see it
    wrong = check_against_oracle(h, want, dict(inputs), poison=inputs["kvcache"])
    assert sum(wrong.violations.values()) > 0


@pytest.mark.pure
def test_one_table_layout_keeps_the_content_key() -> None:
    v = CASES[0]
    assert replace(v, rope_table="pairs").content_key() == v.content_key()
    assert replace(v, rope_table="halves").content_key() != v.content_key()


@pytest.mark.build
def test_halves_variants_compile_for_every_target() -> None:
    from kernelgen.build import toolchain
    from kernelgen.build.lifecycle import compile_only

    variants = [replace(v, rope_table="halves") for v in CASES]
    results = compile_only(variants, toolchain.detect(), ("sm_90a", "sm_100a", "sm_120a"))
    assert [r for r in results if not r.ok] == [] and len(results) == 12
