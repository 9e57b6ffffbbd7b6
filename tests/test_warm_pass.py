"""launch.warm_pass: an early_reads launch runs each token's path twice from one copy of its code, first before the PDL
wait on a zero row that writes nothing, then on the token's row after it, so that the instructions after the wait are
fetched already when it returns. A tuner candidate a spec opts into (`tune: {warm_pass: [false, true]}`), offered only
with early_reads; the bytes are early_reads' (the dry pass writes nothing), which the GPU tier checks here and the
tuner checks for every candidate. The build tier reads the SASS: one wait, one copy of the path."""
from __future__ import annotations

from pathlib import Path

import pytest

from kernelgen.codegen.guards import precheck
from kernelgen.codegen.launch import resolve
from kernelgen.codegen.render import render_variant
from kernelgen.errors import GuardViolation
from kernelgen.spec.launchparams import BY_NAME
from kernelgen.spec.parse import load_spec
from kernelgen.spec.variant import Launch
from kernelgen.tune.space import candidates, default_space, group_candidates, group_space, rejection

from sass_ops import SASS, sass_sequence

DSV4 = load_spec("dsv4_mainkv")
V41 = DSV4.variant("dsv4_mainkv_v41_p64")
OPT_IN = {"early_reads": (False, True), "warm_pass": (False, True)}


@pytest.mark.pure
def test_the_table_holds_warm_pass_as_a_compiled_flag_that_needs_early_reads() -> None:
    p = BY_NAME["warm_pass"]
    assert p.kind is bool and p.compiled and p.cpp == "kWarmPass" and p.token == "wp"
    assert p.requires == ("early_reads",) and p.guards == ("warm_pass_early_reads",)
    lid = "t128.b1.v4.pf.pdl.er.lm.wp"
    assert Launch.from_id(lid).warm_pass and Launch.from_id(lid).id == lid
    assert not Launch.from_id("t128.b1.v4.pf.pdl.er.lm").warm_pass  # ids written before it keep their meaning


@pytest.mark.pure
def test_only_a_space_that_opts_in_offers_it_and_only_beside_early_reads() -> None:
    assert not any(c.warm_pass for c in candidates(V41, default_space(V41))[0])
    assert DSV4.tune_overrides()["warm_pass"] == (False, True)  # the shipped DeepSeek-V4 main-KV spec opts in
    plain = candidates(V41, default_space(V41, {"early_reads": (False, True)}))[0]
    valid, _ = candidates(V41, default_space(V41, OPT_IN))
    warm = [c for c in valid if c.warm_pass]
    assert warm and all(c.early_reads and c.pdl for c in warm)
    assert len(warm) == sum(c.early_reads for c in plain) and len(valid) == len(plain) + len(warm)
    g = resolve(load_spec("attention_prep").group("qwen3_8b_bf16"))
    grouped = group_candidates(g, group_space(g, OPT_IN))[0]
    assert any(c.warm_pass for c in grouped) and all(c.early_reads for c in grouped if c.warm_pass)


@pytest.mark.pure
def test_without_early_reads_it_is_refused_in_the_guards_words() -> None:
    bad = Launch.from_id("t128.b1.v4.pf.pdl.wp")
    why = rejection(V41, bad)
    assert why and "launch.warm_pass" in why and "early_reads" in why and "warm_pass_early_reads" in why
    with pytest.raises(GuardViolation, match="launch.warm_pass runs a token's path once before the PDL wait"):
        precheck(V41.with_launch(bad))
    text = render_variant(V41.with_launch(Launch.from_id("t128.b1.v4.pf.pdl.er.wp")))
    assert "static_assert(!kWarmPass || kEarlyReads," in text and "static constexpr bool kWarmPass = true;" in text


@pytest.mark.pure
def test_the_dry_pass_goes_the_whole_way_and_reads_no_operand_of_the_kernel_before() -> None:
    """What the passes do, in the device code's words: the first runs with dry set (its row out of range, so every
    store is off) and its warp goes past the write vote (both orders of norm and RoPE), so all the path's code runs
    before the wait; it reads neither the weights nor the scale (the kernel before may write them), which the second
    reads after the wait; the second runs on the other set of exchange slots."""
    from kernelgen import resources

    kernel = (resources.template_dir() / "kernelgen" / "kernel.cuh").read_text()
    norm = (resources.template_dir() / "kernelgen" / "norm.cuh").read_text()
    loop = kernel[kernel.index("for (int pass = 0; pass < 2; ++pass)"):]
    assert loop.index("pdl_wait_then_release();") < loop.index("f.in_range = in_range;") < loop.index(
        "fetch_row(f, p, token, head, lane);") < loop.index("process(f, p, parity ^ pass, o, pass == 0);")
    assert "f.in_range = false;  // the dry pass" in kernel
    assert kernel.count("if (!__any_sync(kWarp, write || dry)) return;") == 2  # norm then RoPE, and RoPE then norm
    assert "if (!dry) load_weights(o, r, p);" in kernel and "if (!dry) global_scale = " in kernel
    assert "if constexpr (!Cfg::kPrefetch && !Cfg::kWarmPass) load_weights(o, r, p);" in norm


@pytest.mark.build
@SASS
@pytest.mark.parametrize("spec, name, lid", [
    ("dsv4_mainkv", "dsv4_mainkv_v41_p64", "t128.b1.v4.pf.pdl.er.lm"),
    ("dsv4_mainkv", "dsv4_mainkv_uniform_fp8_p64", "t64.b1.v8.pf.pdl.er"),
    ("attention_prep", "llama3_8b_fp8_k", "t16.b4.v8.pf.pdl.er")])
def test_one_wait_and_one_copy_of_the_path(spec: str, name: str, lid: str) -> None:
    """sm_90a: the warm build waits once (one ACQBULK), holds the path's stores and conversions once (the loop is not
    unrolled: as many as the early_reads build) and each load once; its code grows by the loop's few instructions, not by
    a second path."""
    instance = lid.replace(".pdl", "")
    got = sass_sequence(spec, name, [lid, lid + ".wp"], "sm_90a")
    early, warm = got[instance], got[instance + ".wp"]
    assert warm.count("ACQBULK") == early.count("ACQBULK") == 1
    for family in ("STG", "F2FP", "SHFL", "BAR"):
        assert sum(op.startswith(family) for op in warm) == sum(op.startswith(family) for op in early), family
    assert len(warm) < 1.25 * len(early), (len(warm), len(early))
    # the index and cos/sin loads before the loop, as early_reads has them; x's, the weights' and the scale's in the
    # loop after the wait in program order (the dry pass runs past it): no load is doubled
    loads_before = [[op for op in ops[:ops.index("ACQBULK")] if op.startswith("LDG")] for ops in (early, warm)]
    assert sorted(loads_before[0]) == sorted(loads_before[1])  # the same loads (the order is the scheduler's)
    assert sum(op.startswith("LDG") for op in warm) == sum(op.startswith("LDG") for op in early)


@pytest.mark.build
def test_its_candidates_compile_for_every_target() -> None:
    """A sample of an opted-in variant's and group's `.wp` candidates compiles for sm_90a, sm_100a and sm_120a (a
    group member's block runs the two passes in the group kernel)."""
    from launch_sample import sample_compile_failures

    g = resolve(load_spec("attention_prep").group("llama3_8b_fp8"))
    assert not sample_compile_failures(g, [c for c in group_candidates(g, group_space(g, OPT_IN))[0] if c.warm_pass])
    assert not sample_compile_failures(V41, [c for c in candidates(V41, default_space(V41, OPT_IN))[0] if c.warm_pass])


@pytest.mark.gpu
def test_it_writes_the_early_reads_bytes(session_cache: Path) -> None:
    """The DeepSeek-V4 main-KV writers (V4.1 fp8 and fp4, uniform fp8, FlashMLA fp8), an fp8 GQA K append and the
    DeepSeek-V4 fp8 indexer (its Hadamard crosses warps), each with `.wp` launches of one to four warps per token, with
    and without PDL, write the reference's bytes at 1, 37 and 300 tokens (padding, skipped slots and rows outside the
    cos/sin table included, as in every check). A token of several warps runs its second pass on the other set of
    exchange slots, so a warp ahead in it cannot overwrite what another still reads in the first."""
    from kernelgen.build import toolchain
    from kernelgen.build.lifecycle import build
    from kernelgen.codegen.launch import ALL_TOKENS, plan_routes
    from kernelgen.runtime.op import Op

    from test_gpu import config_failures

    variants = [DSV4.variant(n) for n in ("dsv4_mainkv_v41_p64", "dsv4_mainkv_v41_fp4_p64",
                                          "dsv4_mainkv_uniform_fp8_p64", "dsv4_mainkv_fp8mla_p64")]
    variants.append(load_spec("attention_prep").variant("llama3_8b_fp8_k"))
    variants.append(load_spec("dsv4_indexer").variant("dsv4_indexer_fp8_p64"))  # a Hadamard across two warps
    plans = []
    for v in variants:
        ids = {512: ("t128.b1.v4.pf.pdl.er.wp", "t32.b2.v8.pf.pdl.er.lm.wp", "t64.b1.v8.pdl.er.wp"),
               128: ("t16.b4.v8.pf.pdl.er.wp", "t32.b2.v4.pdl.er.lm.wp")}[v.head_dim]
        if v.hadamard:
            ids += ("t64.b2.v2.pf.pdl.er.wp",)
        launches = tuple(Launch.from_id(i) for i in ids)
        plans.append(plan_routes(v, [(ALL_TOKENS, launches[0])], launches))
    artifacts = build(variants, toolchain.detect(), toolchain.resolve_archs(None), session_cache, launch_plans=plans)
    failures = []
    for v, artifact in zip(variants, artifacts):
        failures += config_failures(Op(artifact), v, (1, 37, 300), pages=8)
    assert not failures, failures
