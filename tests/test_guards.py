"""Guards: the Python precheck and the generated static_asserts reject the same variants with the same words."""
from __future__ import annotations

import pytest

from kernelgen.build import toolchain
from kernelgen.build.lifecycle import compile_only
from kernelgen.codegen.guards import GUARDS, precheck, violations
from kernelgen.codegen.render import render_variant
from kernelgen.errors import GuardViolation
from kernelgen.spec.variant import Launch, Variant

# One variant per guard that breaks that guard and no other.
VIOLATIONS: dict[str, Variant] = {
    "head_dim_range": Variant("g_head_dim_range", head_dim=1088, launch=Launch(32, 0, 2)),
    "head_dim_multiple_of_64": Variant("g_head_dim_multiple_of_64", head_dim=96, rope_dim=32),
    "hadamard_pow2": Variant("g_hadamard_pow2", head_dim=192, hadamard=True),
    "rope_dim_choice": Variant("g_rope_dim_choice", rope_dim=16),
    "rope_fits": Variant("g_rope_fits", head_dim=64, rope_dim=128),
    "neox_aligned": Variant("g_neox_aligned", head_dim=192, rope_dim=128, rope_style="neox"),
    "page_size_pow2": Variant("g_page_size_pow2", page_size=48),
    "norm_bias_needs_layer": Variant("g_norm_bias_needs_layer", norm_bias=True),
    "round_needs_quantized_store": Variant("g_round_needs_quantized_store", round_through_bf16=True),
    "flashmla_shape": Variant("g_flashmla_shape", head_dim=256, store="fp8_flashmla"),
    "flashmla_no_hadamard": Variant("g_flashmla_no_hadamard", head_dim=512, store="fp8_flashmla", hadamard=True),
    "vec_width": Variant("g_vec_width", input_dtype="fp32", launch=Launch(0, 0, 8)),
    "threads_per_token_pow2": Variant("g_threads_per_token_pow2", head_dim=512, launch=Launch(64, 0, 8)),
    "threads_tile_row": Variant("g_threads_tile_row", launch=Launch(32, 0, 8)),
    "values_per_thread": Variant("g_values_per_thread", head_dim=1024, launch=Launch(8, 0, 8)),
    "block_shape": Variant("g_block_shape", launch=Launch(16, 1, 8)),
    "fp4_group_span": Variant("g_fp4_group_span", store="fp4_e2m1", launch=Launch(2, 0, 8)),
    "flashmla_group_span": Variant("g_flashmla_group_span", head_dim=512, store="fp8_flashmla", launch=Launch(16, 0, 2)),
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
