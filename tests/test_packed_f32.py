"""Blackwell's packed float32 arithmetic as a tuner candidate (launch.packed_f32): FADD2/FMUL2/FFMA2 on sm_100 and
sm_103 round each component as the scalar op, so the norm's scaling, RoPE's products, the Hadamard's butterflies and
the quantized stores' scaling may run in pairs. It is a launch table entry bound to the GPUs that have it: the tuner
offers it only there (where it checks the candidate's bytes against the reference before timing it, as it checks
every candidate) and never on sm_90 or sm_120; the sm_100a build holds the packed instructions, the sm_90a and
sm_120a builds of the same configuration the scalar code, unchanged."""
from __future__ import annotations

import math

import pytest

from kernelgen import knobs
from kernelgen.codegen.launch import geometry, resolve
from kernelgen.errors import TuningError
from kernelgen.spec.launchparams import BY_NAME, PACKED_F32_CAPABILITIES
from kernelgen.spec.parse import load_spec
from kernelgen.spec.variant import Launch
from kernelgen.tune.space import candidates, default_space, group_candidates, group_space

from sass_ops import sass_ops
from simulated_flag import simulated_search

FP8_INDEXER = load_spec("dsv4_indexer").variant("dsv4_indexer_fp8_p64")
QWEN3 = load_spec("attention_prep").group("qwen3_8b_bf16")


@pytest.mark.pure
def test_the_table_binds_packed_f32_to_sm100_and_sm103() -> None:
    p = BY_NAME["packed_f32"]
    assert p.capabilities == PACKED_F32_CAPABILITIES == ("10.0", "10.3") and p.compiled and p.cpp == "kPackedF32"
    assert p.values(FP8_INDEXER) == (False, True) and p.default is False
    lid = "t4.b16.v8.pdl.hw.pk.mb24"  # the flag sits after the other flags, before the optional ints
    assert Launch.from_id(lid).packed_f32 and Launch.from_id(lid).id == lid
    assert not Launch.from_id("t4.b16.v8.pdl").packed_f32  # ids written before the parameter keep their meaning


@pytest.mark.pure
@pytest.mark.parametrize("capability, offered", [("9.0", False), (None, False), ("12.0", False), ("12.1", False),
                                                 ("10.0", True), ("10.3", True)])
def test_the_space_offers_it_only_on_the_gpus_that_have_it(capability: str | None, offered: bool) -> None:
    valid, _ = candidates(FP8_INDEXER, default_space(FP8_INDEXER, capability=capability))
    assert any(c.packed_f32 for c in valid) == offered
    g = resolve(QWEN3)
    grouped, _ = group_candidates(g, group_space(g, capability=capability))
    assert any(c.packed_f32 for c in grouped) == offered


@pytest.mark.pure
def test_a_spec_asking_for_it_on_hopper_is_refused_in_one_line() -> None:
    with pytest.raises(TuningError, match=r"^tune: packed_f32 \[False, True\]: its other values need a GPU of compute "
                                          r"capability 10.0, 10.3; this one is 9.0: give packed_f32: \[false\] or tune "
                                          r"on such a GPU$"):
        default_space(FP8_INDEXER, {"packed_f32": (False, True)}, capability="9.0")


@pytest.mark.pure
def test_a_simulated_b200_tuning_run_chooses_it_and_a_hopper_run_never_sees_it() -> None:
    """The tuner's simulated timer: on a fake sm_100 GPU the packed build is 15% faster, so it wins every bucket;
    the same search on sm_90 has no such candidate to time."""
    runs = simulated_search(FP8_INDEXER, "packed_f32", ("10.0", "9.0"), 0.85)
    assert all(c.packed_f32 for c in runs["10.0"][1]) and not any(c.packed_f32 for c in runs["9.0"][1])
    assert any(lid.endswith(".pk") for lid in runs["10.0"][0]) and not any(".pk" in lid for lid in runs["9.0"][0])


PACKED_CASES = [("dsv4_indexer", "dsv4_indexer_fp8_p64", "t4.b16.v8.pk"),
                ("dsv4_indexer", "dsv4_indexer_fp4_p64", "t16.b4.v8.pk"),
                ("dsv4_mainkv", "dsv4_mainkv_fp8mla_p64", "t8.b32.v8.lp.pk"),
                ("example", "example_ln_neox_head", "t8.b8.v8.pk")]


@pytest.mark.build
@pytest.mark.skipif(knobs.cuobjdump() is None, reason="needs cuobjdump to read the SASS (the test extra's "
                    "nvidia-cuda-cuobjdump, CUDA's, or KERNELGEN_CUOBJDUMP=path)")
@pytest.mark.parametrize("spec, name, lid", PACKED_CASES, ids=[c[1] for c in PACKED_CASES])
def test_packed_products_are_never_contracted_into_an_add(spec: str, name: str, lid: str) -> None:
    """ptxas turns a packed multiply feeding a packed add into FFMA2 (one rounding, not two: other bits than the
    reference). The only FFMA2 the packed sm_100a build may hold are the Hadamard's lane butterflies (sign * v +
    other, an FMA by design): log2(threads_per_token) stages x chunks x vec / 2 pairs. The norm with bias, LayerNorm
    centering, interleaved and neox RoPE, the Hadamard, and the fp8, fp4 and FlashMLA stores are covered."""
    ops = sass_ops(spec, name, [lid], "sm_100a")[lid]
    v = load_spec(spec).variant(name).with_launch(Launch.from_id(lid))
    g = geometry(v)
    lane_pairs = int(math.log2(g.threads_per_token)) * g.chunks * g.vec // 2 if v.hadamard else 0
    assert ops.get("FMUL2", 0) > 0, f"{name} {lid}: no packed multiply: the packed path is not in use"
    assert ops.get("FFMA2", 0) == lane_pairs, f"{name} {lid}: {ops.get('FFMA2')} FFMA2, want {lane_pairs}"


@pytest.mark.build
@pytest.mark.skipif(knobs.cuobjdump() is None, reason="needs cuobjdump to read the SASS (the test extra's "
                    "nvidia-cuda-cuobjdump, CUDA's, or KERNELGEN_CUOBJDUMP=path)")
def test_the_hopper_build_of_the_flag_is_the_scalar_code() -> None:
    """On a GPU without packed float32 the flag is a no-op: the sm_90a machine code of a .pk configuration is
    instruction for instruction that of the same configuration without it, and holds no packed op (sm_120a takes
    the same preprocessor branch: __CUDA_ARCH__ is neither 1000 nor 1030)."""
    spec, name, lid = PACKED_CASES[0]
    got = sass_ops(spec, name, [lid, lid.removesuffix(".pk")], "sm_90a")
    assert got[lid] == got[lid.removesuffix(".pk")]
    assert not any(op.split(".")[0] in ("FADD2", "FMUL2", "FFMA2") for op in got[lid])
