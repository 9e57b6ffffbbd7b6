"""Reads before the PDL wait (launch.early_reads) as a tuner candidate a spec opts into: a PDL launch reads each
token's slot, position(s) and cos/sin row before griddepcontrol.wait, so only x (and the weights and scales) follow
the wait: one round of memory latency after it instead of two. It assumes the kernel launched before writes none of
those inputs, so the default space never offers it; a spec's `tune: {early_reads: [false, true]}` makes that promise.
The bytes are the default's (the same loads in another order); the tuner checks every candidate against the
reference on the GPU. The build tier reads the SASS: the index and cos/sin loads sit before the wait (ACQBULK)."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from kernelgen.codegen.guards import precheck
from kernelgen.codegen.launch import resolve
from kernelgen.errors import GuardViolation
from kernelgen.spec.launchparams import BY_NAME
from kernelgen.spec.parse import load_spec, parse_spec
from kernelgen.spec.variant import Launch
from kernelgen.tune.space import candidates, default_space, group_candidates, group_space, rejection

from sass_ops import SASS, sass_sequence

SPEC = load_spec("attention_prep")
OPT_IN = {"early_reads": (False, True)}
ATTN = SPEC.variant("qwen3_8b_bf16_k")


@pytest.mark.pure
def test_the_table_holds_early_reads_as_a_compiled_flag_that_needs_pdl() -> None:
    p = BY_NAME["early_reads"]
    assert p.kind is bool and p.compiled and p.cpp == "kEarlyReads" and p.token == "er" and p.requires == ("pdl",)
    lid = "t32.b2.v4.pf.pdl.er.mb4"
    assert Launch.from_id(lid).early_reads and Launch.from_id(lid).id == lid
    assert not Launch.from_id("t32.b2.v4.pf.pdl.rr").early_reads  # ids written before the parameter keep their meaning


@pytest.mark.pure
def test_the_default_space_never_offers_it() -> None:
    for name in ("qwen3_8b_bf16_k", "llama3_8b_bf16_q", "qwen3_vl_8b_k"):
        v = SPEC.variant(name)
        assert not any(c.early_reads for c in candidates(v, default_space(v))[0])


@pytest.mark.pure
def test_an_opted_in_space_offers_it_with_pdl_alone() -> None:
    v = SPEC.variant("qwen3_8b_bf16_k")
    plain = candidates(v, default_space(v))[0]
    valid, _ = candidates(v, default_space(v, OPT_IN))
    early = [c for c in valid if c.early_reads]
    assert early and all(c.pdl for c in early)
    # one early twin per PDL launch of the default space: the space grows by half, not double
    assert len(early) == sum(c.pdl for c in plain) and len(valid) == len(plain) + len(early)


@pytest.mark.pure
def test_a_looping_grid_refuses_it_in_the_guards_words() -> None:
    v = SPEC.variant("qwen3_8b_bf16_k")
    why = rejection(v, Launch.from_id("t8.b8.v8.lp.pdl.er"))
    assert why and "launch.early_reads" in why and "launch.loop" in why and "early_reads_one_token" in why
    with pytest.raises(GuardViolation, match="launch.early_reads reads one token"):
        precheck(v.with_launch(Launch.from_id("t8.b8.v8.lp.pdl.er")))


@pytest.mark.pure
def test_a_group_space_offers_it_where_the_spec_opts_in() -> None:
    g = resolve(SPEC.group("qwen3_8b_bf16"))
    grouped, _ = group_candidates(g, group_space(g, OPT_IN))
    assert any(c.early_reads for c in grouped) and all(c.pdl for c in grouped if c.early_reads)
    assert not any(c.early_reads for c in group_candidates(g, group_space(g))[0])


@pytest.mark.pure
def test_a_spec_opts_in_through_its_tune_section() -> None:
    spec = parse_spec("family: fused_norm_rope_store\nname: er\nmodels:\n"
                      "  - {name: m, num_q_heads: 8, num_kv_heads: 1, head_dim: 128}\n"
                      "tune:\n  early_reads: [false, true]\n", "er.yaml")
    v = spec.variant("m_k")
    assert any(c.early_reads for c in candidates(v, default_space(v, spec.tune_overrides()))[0])


def _loads_before_wait(ops: list[str]) -> int:
    return sum(op.startswith("LDG") for op in ops[:ops.index("ACQBULK")])


@pytest.mark.build
@SASS
@pytest.mark.parametrize("name, lid, indices, cos_sin", [
    ("llama3_8b_bf16_k", "t32.b2.v4.pdl", 4, "LDG.E.128"),  # slot and position, an int32 and an int64 form each
    ("qwen3_8b_bf16_k", "t16.b4.v4.pf.pdl", 4, "LDG.E.128"),
    ("qwen3_vl_8b_k", "t16.b4.v4.pf.pdl", 8, "LDG.E"),  # M-RoPE: three positions, its cos/sin a scalar per value
    ("qwen3_vl_8b_k", "t16.b4.v4.pf.pdl.rr", 8, "LDG.E.128")])  # ... or whole vectors of each stream's row
def test_the_indices_and_cos_sin_are_read_before_the_wait(name: str, lid: str, indices: int, cos_sin: str) -> None:
    """sm_90a: the default launch reads nothing before griddepcontrol.wait (ACQBULK); the early one its slot and
    position loads and its cos/sin, and x and the weights after the wait, and no load twice."""
    instance = lid.replace(".pdl", "")
    got = sass_sequence("attention_prep", name, [lid, lid + ".er"], "sm_90a")
    plain, early = got[instance], got[instance + ".er"]
    assert _loads_before_wait(plain) == 0
    before = [op for op in early[:early.index("ACQBULK")] if op.startswith("LDG")]
    # the cos/sin loads: at least two of their width beyond the index loads of that width (the default kernel's
    # ordinary loads are its index loads; its cos/sin loads are read-only ones)
    assert len(before) > indices and before.count(cos_sin) >= plain.count(cos_sin) + 2, before
    assert not any(op.endswith(".CONSTANT") for op in before)  # x and the weights (read-only loads) after it
    assert sum(op.startswith("LDG") for op in early) == sum(op.startswith("LDG") for op in plain)  # no load twice


@pytest.mark.build
def test_the_early_candidates_of_a_group_compile_for_every_target() -> None:
    """A sample of an opted-in group's `.er` candidates compiles for sm_90a, sm_100a and sm_120a (the group kernel
    waits inside each member's block)."""
    from kernelgen.build import toolchain
    from kernelgen.build.lifecycle import compile_only
    from kernelgen.tune.runner import tuning_plan

    from launch_sample import representative

    for name in ("qwen3_vl_8b", "cake_64_8_fp8"):
        g = resolve(SPEC.group(name))
        early = representative([c for c in group_candidates(g, group_space(g, OPT_IN))[0] if c.early_reads])
        assert len(early) >= 3
        results = compile_only([g], toolchain.detect(), ("sm_90a", "sm_100a", "sm_120a"), plan=tuning_plan(g, early))
        assert results and all(r.ok for r in results), [r.message for r in results if not r.ok]


@pytest.mark.pure
def test_the_tuner_checks_an_early_reads_instance_at_every_verify_count_though_it_runs_only_with_pdl(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """GpuTimer checks a PDL launch at 37 tokens beside its instance's check without PDL; an early_reads instance
    has no launch without PDL, so its PDL launch is checked at VERIFY_TOKENS too. A PDL launch after its instance
    passed without PDL adds 37 alone; one whose instance failed without PDL fails without running."""
    from kernelgen.tune import worker
    from kernelgen.tune.search import Failed

    base = resolve(ATTN).launch
    plain, pdl = replace(base, pdl=False), replace(base, pdl=True)
    early = replace(pdl, early_reads=True)
    timer = worker.GpuTimer.__new__(worker.GpuTimer)
    timer.v, timer.verified = ATTN, {}
    timer.op = SimpleNamespace(plan=SimpleNamespace(configs=[base.instance, early.instance]))
    ran: list[tuple[str, int]] = []
    wrong: set[str] = set()

    def reports(idx: int, launch: Launch, n: int, seed: int) -> list[Any]:
        ran.append((launch.id, n))
        return [SimpleNamespace(ok=launch.id not in wrong, as_dict=lambda: {"n": n})]

    monkeypatch.setattr(timer, "_reports", reports)
    timer._verify(early)
    assert ran == [(early.id, n) for n in (*worker.VERIFY_TOKENS, 37)]
    ran.clear()
    timer._verify(plain)
    timer._verify(pdl)
    assert ran == [(plain.id, n) for n in worker.VERIFY_TOKENS] + [(pdl.id, 37)]
    timer.verified.clear()
    ran.clear()
    wrong.add(plain.id)
    for launch in (plain, pdl):
        with pytest.raises(Failed):
            timer._verify(launch)
    assert ran == [(plain.id, worker.VERIFY_TOKENS[0])]
