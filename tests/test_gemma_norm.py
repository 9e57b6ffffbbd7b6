"""Gemma's RMSNorm (`norm: rms_gemma`): the normed row times (1 + weight), the sum rounded to float32. Pure
tier: the reference equals plain RMSNorm with the weight 1 + w, the float64 oracle accepts it and rejects
plain RMSNorm's bytes; the build tier compiles it for every target; tests/test_gpu.py holds the kernel to it."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from kernelgen.measure import reference
from kernelgen.measure.inputs import make_inputs
from kernelgen.measure.oracle import check_against_oracle
from kernelgen.spec.parse import load_spec
from kernelgen.spec.variant import Variant

GEMMA = [
    Variant("g_d256_neox", head_dim=256, heads=4, rope_dim=128, rope_place="head", rope_style="neox",
            norm="rms_gemma", store="bf16", page_size=16),
    Variant("g_fp8", head_dim=128, rope_dim=64, norm="rms_gemma", store="fp8_e4m3"),
]


def _store(v, inputs, weight) -> torch.Tensor:
    cache = inputs["kvcache"].clone()
    reference.store(v, inputs["x"], weight, inputs["freqs"], inputs["positions"], inputs["out_loc"], cache,
                    scale=inputs["scale"])
    return cache


@pytest.mark.pure
@pytest.mark.parametrize("v", GEMMA, ids=lambda v: v.name)
def test_gemma_norm_is_rms_norm_times_one_plus_weight(v: Variant) -> None:
    inputs = make_inputs(v, 120, 8, "cpu", seed=3)
    w = 0.2 * torch.randn(v.head_dim, generator=torch.Generator().manual_seed(1))  # Gemma's weights sit near 0
    got = _store(v, inputs, w)
    assert torch.equal(got, _store(replace(v, norm="rms"), inputs, 1.0 + w))
    ok = check_against_oracle(v, got, dict(inputs, weight=w), poison=inputs["kvcache"])
    assert sum(ok.violations.values()) == 0 and ok.rows > 50
    plain = _store(replace(v, norm="rms"), inputs, w)
    assert sum(check_against_oracle(v, plain, dict(inputs, weight=w), poison=inputs["kvcache"]).violations.values()) > 0


@pytest.mark.pure
@pytest.mark.parametrize("spelling", ["rms_gemma", "gemma", "gemma_rms", "rms_1p"])
def test_spec_spells_gemma_norm_several_ways(spelling: str, tmp_path) -> None:
    """The value itself loads; the other spellings are refused with a did-you-mean naming rms_gemma."""
    from kernelgen.errors import SpecError

    path = tmp_path / "g.yaml"
    path.write_text(f"family: fused_norm_rope_store\nname: g\nvariants:\n  - name: a\n    norm: {spelling}\n")
    if spelling == "rms_gemma":
        assert load_spec(path).variants[0].norm == "rms_gemma"
    else:
        with pytest.raises(SpecError, match="rms_gemma"):
            load_spec(path)


@pytest.mark.build
def test_gemma_norm_compiles_for_every_target() -> None:
    from kernelgen.build import toolchain
    from kernelgen.build.lifecycle import compile_only

    results = compile_only(GEMMA, toolchain.detect(), ("sm_90a", "sm_100a", "sm_120a"))
    assert [r for r in results if not r.ok] == [] and len(results) == 6
