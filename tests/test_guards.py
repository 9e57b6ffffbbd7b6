"""Guards: the Python precheck and the generated static_asserts reject the same variants with the same words."""
from __future__ import annotations

import os
import random

import pytest

from kernelgen.build import toolchain
from kernelgen.build.lifecycle import compile_only
from kernelgen.codegen.guards import GUARDS, precheck, violations
from kernelgen.codegen.render import render_variant
from kernelgen.errors import GuardViolation
from kernelgen.spec.variant import AXES, Launch, Variant

# One variant per guard that breaks that guard and no other.
VIOLATIONS: dict[str, Variant] = {
    "head_dim_range": Variant("g_head_dim_range", head_dim=1088, launch=Launch(32, 0, 2)),
    "head_dim_multiple_of_16": Variant("g_head_dim_multiple_of_16", head_dim=72, launch=Launch(4, 0, 2)),
    "hadamard_pow2": Variant("g_hadamard_pow2", head_dim=192, hadamard=True),
    "rope_dim_multiple_of_4": Variant("g_rope_dim_multiple_of_4", rope_dim=18, launch=Launch(0, 0, 2)),
    "rope_fits": Variant("g_rope_fits", head_dim=64, rope_dim=128),
    "neox_aligned": Variant("g_neox_aligned", head_dim=192, rope_dim=128, rope_style="neox"),
    "page_size_pow2": Variant("g_page_size_pow2", page_size=48),
    "heads_range": Variant("g_heads_range", heads=129),
    "norm_bias_needs_layer": Variant("g_norm_bias_needs_layer", norm_bias=True),
    "token_slots_one_per_page": Variant("g_token_slots_one_per_page", slots="token", page_size=16),
    "hnd_needs_pages": Variant("g_hnd_needs_pages", heads=4, slots="token", page_size=1, kv_layout="hnd"),
    "joint_pool_needs_pages": Variant("g_joint_pool_needs_pages", heads=4, slots="token", page_size=1, kv_pool="joint"),
    "packed_pool_needs_one_record": Variant("g_packed_pool_needs_one_record", kv_pool="packed", store="fp8_e4m3"),
    "scale_order_needs_byte_scales": Variant("g_scale_order_needs_byte_scales", store="fp8_e4m3", scale_order="token4"),
    "scale_order_groups_one_heads_tokens": Variant("g_scale_order_groups_one_heads_tokens", heads=4, store="nvfp4_kv",
                                                   page_size=16, scale_order="token4"),
    "rope_then_norm_needs_both": Variant("g_rope_then_norm_needs_both", norm="none", norm_order="rope_then_norm"),
    "round_needs_quantized_store": Variant("g_round_needs_quantized_store", round_through_bf16=True),
    "flashmla_shape": Variant("g_flashmla_shape", head_dim=256, store="fp8_flashmla"),
    "flashmla_no_hadamard": Variant("g_flashmla_no_hadamard", head_dim=512, store="fp8_flashmla", hadamard=True),
    "vec_width": Variant("g_vec_width", input_dtype="fp32", launch=Launch(0, 0, 8)),
    "threads_per_token_pow2": Variant("g_threads_per_token_pow2", head_dim=512, launch=Launch(256, 0, 2)),
    "hadamard_exchange_fits": Variant("g_hadamard_exchange_fits", head_dim=1024, hadamard=True, launch=Launch(128, 4, 8)),
    "neox_partner_in_one_warp": Variant("g_neox_partner_in_one_warp", head_dim=256, rope_dim=128, rope_style="neox",
                                        launch=Launch(64, 0, 2)),
    "rope_whole_vectors": Variant("g_rope_whole_vectors", rope_dim=36, launch=Launch(0, 0, 8)),
    "neox_partner_reach": Variant("g_neox_partner_reach", rope_dim=96, rope_style="neox", rope_place="head",
                                  launch=Launch(8, 0, 8)),
    "threads_tile_row": Variant("g_threads_tile_row", launch=Launch(32, 0, 8)),
    "values_per_thread": Variant("g_values_per_thread", head_dim=1024, launch=Launch(8, 0, 8)),
    "block_shape": Variant("g_block_shape", launch=Launch(16, 1, 8)),
    "fp4_group_span": Variant("g_fp4_group_span", store="fp4_e2m1", launch=Launch(2, 0, 8)),
    "store_words": Variant("g_store_words", head_dim=64, store="fp4_e2m1", page_size=1),
    "flashmla_group_span": Variant("g_flashmla_group_span", head_dim=512, store="fp8_flashmla", launch=Launch(16, 0, 2)),
    "nvfp4_dsv4_shape": Variant("g_nvfp4_dsv4_shape", head_dim=256, store="nvfp4_dsv4"),
    "nvfp4_dsv4_no_hadamard": Variant("g_nvfp4_dsv4_no_hadamard", head_dim=512, store="nvfp4_dsv4", hadamard=True),
    "nvfp4_group_span": Variant("g_nvfp4_group_span", store="nvfp4", launch=Launch(2, 0, 4)),
    "nvfp4_kv_group_span": Variant("g_nvfp4_kv_group_span", store="nvfp4_kv", launch=Launch(2, 0, 4)),
    "mxfp4_group_span": Variant("g_mxfp4_group_span", store="mxfp4", launch=Launch(2, 0, 8)),
    "min_blocks_fit": Variant("g_min_blocks_fit", launch=Launch(32, 8, 4, min_blocks=16)),
    "early_reads_one_token": Variant("g_early_reads_one_token",
                                     launch=Launch(32, 2, 4, pdl=True, loop=True, early_reads=True)),
    "warm_pass_early_reads": Variant("g_warm_pass_early_reads", launch=Launch(32, 2, 4, pdl=True, warm_pass=True)),
    "norm_nope_needs_tail_rope": Variant("g_norm_nope_needs_tail_rope", norm_dims="nope", rope_place="head"),
    "norm_nope_needs_rms": Variant("g_norm_nope_needs_rms", norm="layer", norm_dims="nope"),
    "rope_sections_cover_the_rope": Variant("g_rope_sections_cover_the_rope", rope_style="mrope", rope_table="halves",
                                            rope_sections=(8, 8, 8)),
    "x_head_stride_spans_a_head": Variant("g_x_head_stride_spans_a_head", heads=2, x_head_stride=136),
    "mrope_reads_a_cos_sin_cache": Variant("g_mrope_reads_a_cos_sin_cache", rope_style="mrope_interleaved",
                                           rope_sections=(8, 12, 12)),
    "fp8dsmla_shape": Variant("g_fp8dsmla_shape", head_dim=512, store="fp8_ds_mla"),
    "fp8v41_shape": Variant("g_fp8v41_shape", head_dim=256, store="fp8_v41"),
    "fp8v41i_shape": Variant("g_fp8v41i_shape", head_dim=1024, store="fp8_v41_interleaved"),
    "fp4v41_shape": Variant("g_fp4v41_shape", head_dim=128, store="fp4_v41"),
    "fp4v41i_shape": Variant("g_fp4v41i_shape", head_dim=256, store="fp4_v41_interleaved"),
    "fp8v41_group_span": Variant("g_fp8v41_group_span", head_dim=512, store="fp8_v41", launch=Launch(8, 0, 2)),
    "fp8v41i_group_span": Variant("g_fp8v41i_group_span", head_dim=512, store="fp8_v41_interleaved",
                                  launch=Launch(8, 0, 2)),
}


@pytest.mark.pure
def test_every_guard_has_a_violating_example() -> None:
    assert set(VIOLATIONS) == {g.id for g in GUARDS}
    assert len({g.id for g in GUARDS}) == len(GUARDS)


@pytest.mark.pure
def test_messages_are_plain_c_string_literals() -> None:
    # The template pastes messages into "..." verbatim; quotes, backslashes or newlines would break it.
    for g in GUARDS:
        assert not set(g.message) & {'"', "\\", "\n"}, g.id


@pytest.mark.pure
@pytest.mark.parametrize("guard", GUARDS, ids=lambda g: g.id)
def test_precheck_rejects_with_guard_message(guard) -> None:
    v = VIOLATIONS[guard.id]
    assert [g.id for g in violations(v)] == [guard.id]
    with pytest.raises(GuardViolation) as info:
        precheck(v)
    assert str(info.value) == f"variant {v.name}: {guard.message} [guard {guard.id}]"
    with pytest.raises(GuardViolation):
        render_variant(v)  # nothing is rendered for a forbidden variant


@pytest.mark.pure
def test_norm_over_the_nope_dims_needs_some_nope_dims() -> None:
    """norm_dims: nope with the whole row roped would normalize nothing: refused by the same guard."""
    v = Variant("g_norm_nope_all_roped", head_dim=64, rope_dim=64, rope_place="tail", norm_dims="nope")
    assert [g.id for g in violations(v)] == ["norm_nope_needs_tail_rope"]
    assert violations(Variant("ok", head_dim=128, rope_dim=64, rope_place="tail", norm_dims="nope")) == []


@pytest.mark.pure
def test_bf16_store_at_head_dim_128_is_allowed() -> None:
    v = Variant("dsv4_indexer_bf16_p64", head_dim=128, hadamard=True, store="bf16", page_size=64)
    assert violations(v) == []
    source = render_variant(v)
    for g in GUARDS:
        assert f'"{g.message}"' in source  # every guard is rendered as a static_assert


@pytest.mark.build
def test_static_asserts_fire_with_the_same_message() -> None:
    """Render each violating variant with the precheck bypassed; nvcc must fail with message M."""
    results = compile_only(list(VIOLATIONS.values()), toolchain.detect(), ("sm_90a",), check=False)
    got = {r.variant: r.message for r in results}
    for guard_id, v in VIOLATIONS.items():
        message = next(g.message for g in GUARDS if g.id == guard_id)
        assert got[v.name] == f'static assertion failed with "{message}"', (guard_id, got[v.name])


def _random_variant(rng: random.Random, i: int) -> Variant:
    """Any point of the spec space, guards or not: head_dim, rope, norm, stores, pages, dtypes, launch."""
    settings = {axis: rng.choice(choices) for axis, (_, choices) in AXES.items() if choices}
    settings.update(head_dim=rng.choice([64, 80, 96, 128, 160, 192, 256, 320, 448, 512, 576, 1024]),
                    rope_dim=rng.choice([0, 16, 24, 32, 64, 96, 128]), norm_bias=rng.random() < 0.3,
                    hadamard=rng.random() < 0.4, page_size=rng.choice([1, 2, 3, 16, 64, 256]),
                    round_through_bf16=rng.random() < 0.2)
    launch = Launch(rng.choice([0, 0, 2, 4, 8, 16, 32, 64, 128]), rng.choice([0, 0, 1, 2, 8]), rng.choice([0, 0, 2, 4, 8]))
    return Variant(name=f"prop_{i}", launch=launch, **settings)


@pytest.mark.build
def test_precheck_accepts_exactly_what_nvcc_compiles() -> None:
    """Variants drawn from the whole spec space: the precheck accepts one if and only if nvcc compiles it
    (a sample in CI; KERNELGEN_PROPERTY_SAMPLES=200 for a longer run)."""
    rng = random.Random(int(os.environ.get("KERNELGEN_PROPERTY_SEED", "7")))
    samples = int(os.environ.get("KERNELGEN_PROPERTY_SAMPLES", "8"))
    accepted, rejected = [], []
    while len(accepted) < samples or len(rejected) < samples:
        v = _random_variant(rng, len(accepted) + len(rejected))
        (rejected if violations(v) else accepted).append(v)
    chosen = accepted[:samples] + rejected[:samples]
    results = compile_only(chosen, toolchain.detect(), ("sm_90a",), check=False)
    compiled = {r.variant: r.ok for r in results}
    wrong = [(v, [g.id for g in violations(v)], compiled[v.name]) for v in chosen
             if compiled[v.name] != (not violations(v))]
    assert not wrong, wrong
