"""GPU tier of launch groups (one launch writes a layer's Q output and K/V caches): every member's bytes equal
its reference, for every shipped group, the launches the tuner may choose, under CUDA graphs, in place.

The launches the tuner may choose are checked as a sample by default (tests/launch_sample.py: the default launch
and one configuration for each value of each launch parameter) and every one under the marker `sweep`
(`-m sweep` or KERNELGEN_SWEEP=1); the routes the tuning records give this GPU are always checked."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kernelgen.build import toolchain
from kernelgen.build.lifecycle import build
from kernelgen.codegen.launch import plan_routes, ALL_TOKENS
from kernelgen.errors import LayoutMismatch
from kernelgen.measure.inputs import group_inputs, member_inputs
from kernelgen.measure.verify import expected, verify_group
from kernelgen.runtime.group_op import GroupOp
from kernelgen.spec.parse import load_spec, parse_spec, shipped_specs
from kernelgen.spec.variant import Launch
from kernelgen.tune.space import group_candidates, group_space
from engine_readers import fp4_rows
from launch_sample import cases as config_cases, config_index, every, local_capability, representative

HERE = local_capability()  # the GPU tier checks the launches the tuner may choose on this GPU

pytestmark = pytest.mark.gpu

GROUPS = [g for spec in shipped_specs() for g in spec.groups]


def prompt_batch(op: GroupOp, g: Any, lengths: list[int], reach: float, seed: int = 11) -> tuple[Any, dict, Any]:
    """A batch of prompts laid end to end (positions 0.. of each), their tokens in randomly placed pages plus 3
    spare ones: the group's variant for that token count, its inputs on the GPU, and the slots (out_loc). Per-tensor
    scales are calibrated as an engine sets them: amax x 1.5 / reach (reach: the largest code the store's scale maps
    amax to; 1.5 covers rotation's growth, |x| <= sqrt2 amax)."""
    import torch

    page = g.member("k").page_size
    pages_per = [-(-n // page) for n in lengths]
    table = torch.randperm(sum(pages_per) + 3, device="cuda")[:sum(pages_per)].split(pages_per)
    positions = torch.cat([torch.arange(n, device="cuda") for n in lengths])
    out_loc = torch.cat([t[torch.arange(n, device="cuda") // page] * page + torch.arange(n, device="cuda") % page
                         for t, n in zip(table, lengths)])
    v_ = op.variant_for(int(positions.numel()))
    inputs = group_inputs(v_, int(positions.numel()), sum(pages_per) + 3, "cuda", seed=seed)
    inputs["positions"], inputs["out_loc"] = positions, out_loc
    for role in ("k", "v"):
        if g.names(role)["scale"] in inputs:
            inputs[g.names(role)["scale"]].fill_(float(inputs[role].float().abs().max()) * 1.5 / reach)
    return v_, inputs, out_loc


def last_token_attention(q: Any, k: Any, v: Any, lengths: list[int]) -> Any:
    """Decode attention of a batch of prompts laid end to end: the last token of each prompt (q [N, Hq, D]) attends
    to its whole prompt (k, v [N, Hkv, D], GQA: each KV head serves Hq / Hkv query heads), torch SDPA; [prompts,
    Hq, D]."""
    import torch
    import torch.nn.functional as F

    group = q.shape[1] // k.shape[1]
    outs, start = [], 0
    for length in lengths:
        kk = k[start:start + length].repeat_interleave(group, dim=1).transpose(0, 1)[None]
        vv = v[start:start + length].repeat_interleave(group, dim=1).transpose(0, 1)[None]
        outs.append(F.scaled_dot_product_attention(q[start + length - 1][None, :, None], kk, vv)[0, :, 0])
        start += length
    return torch.stack(outs)


SHIPPED_NAMES = {s.name for s in shipped_specs()}  # the axis groups' spec is this file's own


def tuner_candidates(g: Any) -> list[Launch]:
    """The launches the tuner may choose for a group: its first member's space that every member accepts, narrowed or
    extended by its spec's `tune:` (attention_prep's early_reads)."""
    overrides = load_spec(g.spec_name).tune_overrides() if g.spec_name in SHIPPED_NAMES else None
    return group_candidates(g, group_space(g, overrides, capability=HERE))[0]


def group_op(g: Any, cache: Path, launches: list | None = None) -> GroupOp:
    from kernelgen.codegen.launch import default_plan, launch_variant

    plan = default_plan(g) if launches is None else plan_routes(launch_variant(g), [(ALL_TOKENS, launches[0])],
                                                                  tuple(launches))
    [artifact] = build([g], toolchain.detect(), toolchain.resolve_archs(None), cache, launch_plans=[plan])
    return GroupOp(artifact)


def failures_of(reports: list) -> list:
    return [r.as_dict() for r in reports if not r.ok]


def launch_failures(op: GroupOp, g: Any, config: Launch, pdls: tuple[bool, ...] = (False, True),
                    tokens: tuple[int, ...] = (1, 300)) -> list:
    """Configuration `config` of op's plan, launched with each PDL flag at each token count, against every
    member's reference; the failures."""
    index = config_index(op.plan, g, config)
    launch = op.plan.configs[index]
    bad = []
    for pdl in pdls:
        for n in tokens:
            def run(eps: float, **tensors: Any) -> None:
                op.launch_config(index, pdl, op.tensors(tensors), eps)
            reports = verify_group(g.with_launch(launch), run, n, 4, "cuda", seed=n + index)
            bad += [(launch.id, pdl, n, f) for f in failures_of(reports)]
    return bad


@pytest.fixture(scope="module")
def default_builds(session_cache: Path) -> None:
    """Every shipped group (and each of AXIS_GROUPS) with its default launch, built in one ninja graph (group_op
    then finds each one in the cache instead of compiling one group at a time)."""
    from kernelgen.codegen.launch import default_plan

    build(GROUPS + AXIS_GROUPS, toolchain.detect(), toolchain.resolve_archs(None), session_cache,
          launch_plans=[default_plan(g) for g in GROUPS + AXIS_GROUPS])


@pytest.mark.parametrize("num_tokens", [1, 37, 4096])
@pytest.mark.parametrize("g", GROUPS, ids=lambda g: g.name)
def test_shipped_group_matches_every_members_reference(session_cache: Path, default_builds: None, g: Any,
                                                       num_tokens: int) -> None:
    op = group_op(g, session_cache)
    reports = verify_group(op.variant_for(num_tokens), op, num_tokens, 8, "cuda", seed=num_tokens)
    assert not failures_of(reports), failures_of(reports)
    assert num_tokens == 1 or all(r.written_rows > 0 for r in reports)  # the draw writes rows of every member


def candidate_ops(groups: list[Any], pick: Any, cache: Path) -> dict[str, GroupOp]:
    """Each group built with pick(the launches the tuner may choose) (the default routed, the others compiled
    beside it): one build, so ninja compiles the groups in parallel."""
    from kernelgen.codegen.launch import launch_variant

    plans = []
    for g in groups:
        cands = tuner_candidates(g)
        plans.append(plan_routes(launch_variant(g), [(ALL_TOKENS, cands[0])], tuple(pick(cands))))
    artifacts = build(groups, toolchain.detect(), toolchain.resolve_archs(None), cache, launch_plans=plans)
    return {a.variant.name: GroupOp(a) for a in artifacts}


@pytest.fixture(scope="module")
def sample_group_ops(session_cache: Path) -> dict[str, GroupOp]:
    return candidate_ops(GROUPS + AXIS_GROUPS, representative, session_cache)


@pytest.fixture(scope="module")
def sweep_group_ops(session_cache: Path) -> dict[str, GroupOp]:
    return candidate_ops(GROUPS + AXIS_GROUPS, every, session_cache)


@pytest.mark.parametrize("g, config", config_cases(GROUPS, tuner_candidates, representative))
def test_a_sample_of_the_launches_the_tuner_may_choose_is_exact(sample_group_ops: dict[str, GroupOp], g: Any,
                                                                config: Launch) -> None:
    """The fast tier's sample of the launches the tuner may choose (tests/launch_sample.py), each with and without
    PDL, writes every member's reference bytes; test_every_launch_the_tuner_may_choose_is_exact (sweep) runs them
    all."""
    bad = launch_failures(sample_group_ops[g.name], g, config)
    assert not bad, bad[:5]


@pytest.mark.sweep
@pytest.mark.parametrize("g, config", config_cases(GROUPS, tuner_candidates, every))
def test_every_launch_the_tuner_may_choose_is_exact(sweep_group_ops: dict[str, GroupOp], g: Any,
                                                    config: Launch) -> None:
    bad = launch_failures(sweep_group_ops[g.name], g, config)
    assert not bad, bad[:5]


@pytest.fixture(scope="module")
def tuned_group_builds(session_cache: Path) -> None:
    """Every shipped group's tuned dispatch for this GPU built in one ninja graph, so that the load of each case
    below finds its library in the cache instead of compiling one group at a time."""
    from kernelgen.tune import lookup
    from kernelgen.tune.gpu import current

    gpu = current()
    plans = [lookup.tuned(g, [gpu] if gpu is not None else []).plan for g in GROUPS]
    build(GROUPS, toolchain.detect(), toolchain.resolve_archs(None), session_cache, launch_plans=plans)


@pytest.mark.parametrize("g", GROUPS, ids=lambda g: g.name)
def test_every_configuration_of_a_groups_tuned_dispatch_is_exact(session_cache: Path, tuned_group_builds: None,
                                                                 g: Any) -> None:
    """The dispatch the shipped records give this GPU (what load_group_kernel serves; the group's default launch
    on a GPU without records): each configuration it routes to, with and without PDL, writes every member's
    reference bytes; a looping one also over 100003 tokens, where its blocks walk many tokens."""
    from kernelgen.runtime.group_op import load_group_kernel

    op = load_group_kernel(g, cache_dir=session_cache)
    bad = []
    for config in op.plan.configs:
        bad += launch_failures(op, g, config, tokens=(1, 300, 100_003) if config.loop else (1, 300))
    assert not bad, bad[:5]


def test_q_written_in_place_into_the_packed_projection(session_cache: Path) -> None:
    """q_out = the Q columns of qkv itself: Q is normed and rotated in place, K and V appended, one launch."""
    import torch

    g = next(g for g in GROUPS if g.name == "qwen3_8b_bf16")
    op = group_op(g, session_cache)
    inputs = group_inputs(op.variant_for(64), 64, 8, "cuda", seed=3)
    q_role = member_inputs(op.variant_for(64), "q", inputs)
    want_q = expected(op.variant_for(64).member("q"), q_role)
    qkv = inputs["qkv"]
    op(**{k: t for k, t in inputs.items() if k not in ("qkv", "q", "k", "v", "q_out")}, qkv=qkv, q_out=qkv[:, :4096])
    got = qkv[:, :4096].contiguous().view(torch.uint8)
    written = q_role["positions"] < q_role["freqs"].shape[0]
    assert torch.equal(got[written], want_q[written])


def test_graph_replay_reads_new_inputs(session_cache: Path) -> None:
    import torch

    g = next(g for g in GROUPS if g.name == "llama3_8b_fp8")
    op = group_op(g, session_cache)
    v = op.variant_for(16)
    inputs = group_inputs(v, 16, 8, "cuda", seed=1)
    args = op.tensors({k: t for k, t in inputs.items() if k != "qkv"})
    op.launch(args, 1e-6)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        op.launch(args, 1e-6)
    fresh = group_inputs(v, 16, 8, "cuda", seed=2)
    for name in ("qkv", "k_scale", "v_scale", "positions", "out_loc", "freqs"):
        inputs[name].copy_(fresh[name])
    for role in ("q", "k", "v"):
        out = g.names(role)["kvcache"]
        inputs[out].copy_(fresh[out])
    wanted = {role: expected(v.member(role), member_inputs(v, role, inputs)) for role in ("q", "k", "v")}
    graph.replay()
    torch.cuda.synchronize()
    for role in ("q", "k", "v"):
        assert torch.equal(inputs[g.names(role)["kvcache"]], wanted[role]), role


def test_symbol_and_python_refuse_bad_tensors_with_the_same_words(session_cache: Path) -> None:
    import torch

    g = next(g for g in GROUPS if g.name == "qwen3_8b_bf16")
    op = group_op(g, session_cache)
    inputs = {k: t for k, t in group_inputs(op.variant_for(8), 8, 4, "cuda", seed=5).items() if k != "qkv"}
    bad = {
        "k": inputs["k"][:4],  # fewer rows than q
        "k_weight": inputs["k_weight"].to(torch.bfloat16),
        "k_cache": inputs["k_cache"][:, :100],
        "q_out": inputs["q_out"][:, :8192:2],
        "positions": inputs["positions"].float(),
    }
    for name, tensor in bad.items():
        args = op.tensors({**inputs, name: tensor})
        with pytest.raises(ValueError) as symbol:
            op.launch(args, 1e-6)
        with pytest.raises(LayoutMismatch) as python:
            op.checker.check(dict(zip(op.args, args)))
        assert str(python.value) in str(symbol.value), (name, str(symbol.value), str(python.value))


@pytest.mark.parametrize("name", ["qwen3_8b_bf16", "llama3_8b_fp8"])
def test_attention_reads_the_caches_a_group_wrote(session_cache: Path, name: str) -> None:
    """A consumer: paged decode attention (torch SDPA over the pages gathered by a page table, GQA) over the
    K/V caches and the Q output one group launch wrote for a batch of prompts gives the same output as over the
    reference's caches, and is close to attention over the unquantized rows."""
    import torch

    from kernelgen.measure import reference

    g = next(g for g in GROUPS if g.name == name)
    op = group_op(g, session_cache)
    lengths = [37, 16, 1, 90]
    v_, inputs, out_loc = prompt_batch(op, g, lengths, 448.0)
    n = int(out_loc.numel())
    wanted = {role: expected(v_.member(role), member_inputs(v_, role, inputs)) for role in g.roles}
    op(**{k: t for k, t in inputs.items() if k != "qkv"})
    d = g.member("k").head_dim

    def decode(role: str, cache: torch.Tensor) -> torch.Tensor:
        mine = member_inputs(v_, role, inputs)
        return op.layouts[role].decode(cache, mine["out_loc"], mine["scale"])  # [N, heads, D] float32

    got = {r: decode(r, inputs[g.names(r)["kvcache"]]) for r in g.roles}
    ref = {r: decode(r, wanted[r]) for r in g.roles}
    out_kernel = last_token_attention(got["q"], got["k"], got["v"], lengths)
    out_reference = last_token_attention(ref["q"], ref["k"], ref["v"], lengths)
    assert torch.equal(out_kernel, out_reference)
    exact = {}
    for role, mv in v_.members:  # the rows before quantization (float32), as the model would attend to them
        mine = member_inputs(v_, role, inputs)
        exact[role] = reference.rows(mv.row_variant, mine["x"].reshape(n * mv.heads, d), mine["weight"], mine["freqs"],
                                     mine["positions"].repeat_interleave(mv.heads), 1e-6).reshape(n, mv.heads, d)
    ideal = last_token_attention(exact["q"], exact["k"], exact["v"], lengths)
    # bf16 caches: rounding only. fp8 (e4m3, 2.7% per value at these calibrated scales; measured on the CPU over
    # three seeds): 6.1-6.4% after the peaked softmax of these unnormalized rows. A misread layout or a scale
    # applied wrongly is off by O(1).
    tol = 0.02 if g.member("k").store == "bf16" else 0.1
    assert float((out_kernel - ideal).norm() / ideal.norm()) < tol


def test_group_torch_op_under_compile_matches_eager(session_cache: Path) -> None:
    """torch.ops.kernelgen.<group> traced by torch.compile(fullgraph=True) writes what the eager op writes."""
    import torch

    from kernelgen.runtime.torch_ops import register_group

    g = next(g for g in GROUPS if g.name == "cake_64_8_fp8")
    op = group_op(g, session_cache)
    torch_op = register_group(op)
    inputs = {k: t for k, t in group_inputs(op.variant_for(64), 64, 8, "cuda", seed=9).items() if k != "qkv"}
    eager = {k: t.clone() for k, t in inputs.items()}
    op(**eager)

    @torch.compile(fullgraph=True)
    def prep(*args: torch.Tensor) -> None:
        torch_op(*args, eps=1e-6)

    prep(*(inputs[a] for a in op.args))
    for role in g.roles:
        out = g.names(role)["kvcache"]
        assert torch.equal(inputs[out], eager[out]), role


@pytest.mark.parametrize("g", GROUPS, ids=lambda g: g.name)
def test_every_value_a_group_writes_is_within_the_float64_oracle(session_cache: Path, default_builds: None,
                                                                  g: Any) -> None:
    from kernelgen.measure.oracle import check_group_against_oracle

    op = group_op(g, session_cache)
    v = op.variant_for(300)
    inputs = {k: t for k, t in group_inputs(v, 300, 8, "cuda", seed=21).items() if k != "qkv"}
    poisons = {role: inputs[g.names(role)["kvcache"]].clone() for role in g.roles}
    op(**inputs)
    reports = check_group_against_oracle(v, inputs, poisons=poisons)
    assert all(r.ok and r.rows > 0 for r in reports), [r.violations for r in reports]


AXIS_MODELS = {
    "hnd": "{name: hnd_layer, num_q_heads: 16, num_kv_heads: 4, head_dim: 128, qk_norm: rms, kv_store: fp8_scaled, "
           "kv_layout: hnd}",
    "rope_then_norm": "{name: rope_first, num_q_heads: 8, num_kv_heads: 2, head_dim: 128, qk_norm: rms, "
                      "norm_order: rope_then_norm, q_store: fp8_e4m3, kv_store: fp8_scaled}",
    "joint_hnd": "{name: joint_fp8, num_q_heads: 16, num_kv_heads: 4, head_dim: 64, qk_norm: rms_gemma, "
                 "kv_store: fp8_scaled, kv_pool: joint, kv_layout: hnd}",
    "fp16_joint": "{name: fp16_layer, num_q_heads: 8, num_kv_heads: 2, head_dim: 128, qk_norm: rms, input_dtype: fp16, "
                  "q_store: fp16, kv_store: fp16, kv_pool: joint}",
    "q_static_fp8": "{name: q_static, num_q_heads: 16, num_kv_heads: 2, head_dim: 128, q_store: fp8_scaled, "
                    "kv_store: fp8_scaled}",
    "neox_rotary24_d96": "{name: neox24, num_q_heads: 8, num_kv_heads: 2, head_dim: 96, rotary_dim: 24, qk_norm: rms, "
                         "kv_store: fp8_scaled}",
    "gptj_rotary96_d160": "{name: gptj96, num_q_heads: 8, num_kv_heads: 2, head_dim: 160, rotary_dim: 96, "
                          "rope_style: interleaved, rope_table: pairs, q_store: fp8_e4m3}",
}
# kv_layout: hnd (pages [heads, page_size, head_dim]), norm_order: rope_then_norm, a joint K/V pool (with HND pages),
# an fp16 model (fp16 in, fp16 Q and K/V), a static-scale fp8 Q (q_scale), and rotary dims that are not powers of
# two on head dims that are not either (NeoX 24 of 96: partners by shuffle; interleaved 96 of 160): one group each.
AXIS_GROUPS = [parse_spec(f"family: fused_norm_rope_store\nname: axes\nmodels:\n  - {model}\n", "axes.yaml").groups[0]
               for model in AXIS_MODELS.values()]
AXIS_IDS = dict(zip((g.name for g in AXIS_GROUPS), AXIS_MODELS))  # group name -> the case id (fp16_joint, ...)


def axis_cases(pick: Any) -> list[Any]:
    """(group, configuration) params of the unshipped-axes groups, with ids 'fp16_joint-<launch id>'."""
    return [pytest.param(*p.values, id=f"{AXIS_IDS[p.values[0].name]}-{p.values[1].id}")
            for p in config_cases(AXIS_GROUPS, tuner_candidates, pick)]


@pytest.mark.parametrize("g", AXIS_GROUPS, ids=list(AXIS_MODELS))
def test_unshipped_axes_are_within_the_float64_oracle(session_cache: Path, default_builds: None, g: Any) -> None:
    """The unshipped axes above, at the group's default launch: every value written is within the float64 oracle."""
    from kernelgen.measure.oracle import check_group_against_oracle

    op = group_op(g, session_cache)
    inputs = {k: t for k, t in group_inputs(op.variant_for(300), 300, 8, "cuda", seed=21).items() if k != "qkv"}
    poisons = {role: inputs[g.names(role)["kvcache"]].clone() for role in g.roles}
    op(**inputs)
    reports = check_group_against_oracle(op.variant_for(300), inputs, poisons=poisons)
    assert all(r.ok and r.rows > 0 for r in reports), [r.violations for r in reports]


@pytest.mark.parametrize("g, config", axis_cases(representative))
def test_unshipped_axes_are_exact_for_a_sample_of_the_launches_the_tuner_may_choose(
        sample_group_ops: dict[str, GroupOp], g: Any, config: Launch) -> None:
    """The unshipped axes above: the fast tier's sample of the candidate launches writes the reference's bytes."""
    bad = launch_failures(sample_group_ops[g.name], g, config, pdls=(False,))
    assert not bad, bad[:5]


@pytest.mark.sweep
@pytest.mark.parametrize("g, config", axis_cases(every))
def test_unshipped_axes_are_exact_for_every_launch_the_tuner_may_choose(sweep_group_ops: dict[str, GroupOp], g: Any,
                                                                        config: Launch) -> None:
    """The unshipped axes above: every candidate launch writes the reference's bytes."""
    bad = launch_failures(sweep_group_ops[g.name], g, config, pdls=(False,))
    assert not bad, bad[:5]


def test_a_typed_joint_pool_is_passed_whole_as_kv_cache(session_cache: Path) -> None:
    """qwen3_8b_joint called as an engine with FlashInfer's pool calls it: kv_cache = one bf16 tensor
    [num_pages, 2, page_size, Hkv, D]; K lands in pool[:, 0], V in pool[:, 1], as the reference writes them."""
    import torch

    g = next(g for g in GROUPS if g.name == "qwen3_8b_joint")
    op = group_op(g, session_cache)
    v = op.variant_for(64)
    inputs = group_inputs(v, 64, 8, "cuda", seed=13)
    kc = inputs["k_cache"]
    pool = torch.as_strided(kc, (kc.shape[0], 2, kc.shape[1]), (kc.stride(0), kc.shape[1], 1))
    typed = pool.view(torch.bfloat16).view(pool.shape[0], 2, 16, 8, 128)
    wanted = {role: expected(v.member(role), member_inputs(v, role, inputs)) for role in g.roles}
    rest = {k: t for k, t in inputs.items() if k not in ("q", "k", "v", "k_cache", "v_cache")}
    op(**rest, kv_cache=typed)
    for role in g.roles:
        assert torch.equal(inputs[g.names(role)["kvcache"]], wanted[role]), role


@pytest.mark.parametrize("name", ["llama3_8b_vllm_bf16", "llama3_8b_vllm_fp8", "qwen3_8b_vllm_fp8_pth",
                                  "qwen3_8b_vllm_int8_pth"])
def test_vllms_packed_cache_read_as_vllm_reads_it(session_cache: Path, name: str) -> None:
    """A consumer of kv_pool: packed: the group called as vLLM would call it (kv_cache = vLLM's one tensor
    [num_blocks, block_size, Hkv, 2 x D], bf16 or uint8 fp8; with per-token-head scales 2 x (D + 4) bytes) writes
    the pool the reference writes (K's records then V's, into one copy of the pool); paged decode attention reading
    K and V the way vLLM's backends do (kv_cache.split(D, dim=-1), fp8 codes times k_scale / v_scale; per-token-head:
    the cell [K | K scale | V | V scale] as triton_attn.py's strided float32 scale views read it) over the kernel's
    pool equals attention over the reference's pool, and is close to attention over the unquantized rows."""
    import torch

    from kernelgen.measure import reference

    g = next(g for g in GROUPS if g.name == name)
    op = group_op(g, session_cache)
    lengths, page, d, hkv = [37, 16, 1, 90], 16, 128, 8
    pages_per = [-(-n // page) for n in lengths]
    num_pages = sum(pages_per) + 3
    table = torch.randperm(num_pages, device="cuda")[:sum(pages_per)].split(pages_per)
    positions = torch.cat([torch.arange(n, device="cuda") for n in lengths])
    out_loc = torch.cat([t[torch.arange(n, device="cuda") // page] * page + torch.arange(n, device="cuda") % page
                         for t, n in zip(table, lengths)])
    n = int(positions.numel())
    v_ = op.variant_for(n)
    inputs = group_inputs(v_, n, num_pages, "cuda", seed=21)
    inputs["positions"], inputs["out_loc"] = positions, out_loc
    fp8 = g.member("k").store != "bf16"
    for role in ("k", "v"):
        if g.names(role)["scale"] in inputs:
            inputs[g.names(role)["scale"]].fill_(float(inputs[role].float().abs().max()) * 1.5 / 448)
    pool = inputs["k_cache"]._base  # uint8 [num_pages, page_stride]: vLLM's tensor, as bytes
    want = pool.clone()
    halves = op.layouts["k"].halves(want)
    for role, half in zip(("k", "v"), halves):
        mine = member_inputs(v_, role, inputs)
        reference.store(v_.member(role), mine["x"], mine["weight"], mine["freqs"], mine["positions"],
                        mine["out_loc"], half, 1e-6, None, scale=mine["scale"])
    store = g.member("k").store
    head_scales = store.endswith("_per_token_head")
    cell = 2 * (d + 4) if head_scales else 2 * d  # elements of one (slot, head) cell, as vLLM allocates it
    typed = pool.view(torch.uint8 if fp8 else torch.bfloat16).view(-1, page, hkv, cell)  # every page allocated
    rest = {k: t for k, t in inputs.items() if k not in ("q", "k", "v", "k_cache", "v_cache")}
    op(**rest, kv_cache=typed)
    assert torch.equal(pool, want)

    def vllm_kv(cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V rows of the written slots [N, Hkv, D] float32, read as vLLM's attention reads the cache."""
        cells = cache.view(torch.uint8 if fp8 else torch.bfloat16).view(-1, page, hkv, cell)[out_loc // page,
                                                                                                   out_loc % page]
        if head_scales:  # [K(D) | K scale | V(D) | V scale]: the scales are float32 views at byte D of each half
            k, ks, v, vs = cells.split([d, 4, d, 4], dim=-1)
            codes = (lambda t: t.view(torch.int8).float()) if store.startswith("int8") else \
                (lambda t: t.view(torch.float8_e4m3fn).float())
            return codes(k) * ks.contiguous().view(torch.float32), codes(v) * vs.contiguous().view(torch.float32)
        k, v = cells.split(d, dim=-1)
        if not fp8:
            return k.float(), v.float()
        ks, vs = (float(inputs[g.names(r)["scale"]]) for r in ("k", "v"))
        return k.view(torch.float8_e4m3fn).float() * ks, v.view(torch.float8_e4m3fn).float() * vs

    q = op.layouts["q"].decode(inputs["q_out"], torch.arange(n, device="cuda"))

    out_kernel = last_token_attention(q, *vllm_kv(pool), lengths)
    out_reference = last_token_attention(q, *vllm_kv(want), lengths)
    assert torch.equal(out_kernel, out_reference)
    exact = {}
    for role in ("k", "v"):
        mv, mine = v_.member(role), member_inputs(v_, role, inputs)
        exact[role] = reference.rows(mv.row_variant, mine["x"].reshape(n * hkv, d), mine["weight"], mine["freqs"],
                                     mine["positions"].repeat_interleave(hkv), 1e-6).reshape(n, hkv, d)
    ideal = last_token_attention(q, exact["k"], exact["v"], lengths)
    assert float((out_kernel - ideal).norm() / ideal.norm()) < (0.1 if fp8 else 0.02)
    if head_scales and store.startswith("int8"):  # 8-bit integers with a per-(token, head) scale: near bf16
        assert float((out_kernel - ideal).norm() / ideal.norm()) < 0.02


@pytest.mark.parametrize("name", ["llama3_8b_nvfp4", "qwen3_8b_mxfp4", "llama3_8b_nvfp4_trtllm"])
def test_fp4_caches_read_through_the_engines_tensor_views(session_cache: Path, name: str) -> None:
    """A consumer of the 4-bit K/V caches whose engines keep the scales in a tensor of their own (FlashInfer's
    NVFP4 append, SGLang's MXFP4 KV): the group writes the reference's pools, and decode attention reading K and V
    through Pages.field_view as those engines' readers do (element d from byte d // 2, odd d in the high nibble,
    times its block's scale: e4m3 x k_scale for NVFP4, 2^(byte - 127) for MXFP4) is the same over the kernel's pools
    as over the reference's, and near attention over the unquantized rows (CPU, three seeds: 0.20-0.24 NVFP4 on
    Llama's unnormalized rows, 0.12 MXFP4 on Qwen3's normed ones; a misread layout is off by O(1))."""
    import torch

    from kernelgen.measure import reference

    g = next(g for g in GROUPS if g.name == name)
    op = group_op(g, session_cache)
    lengths = [37, 16, 1, 90]
    v_, inputs, out_loc = prompt_batch(op, g, lengths, 448.0 * 6)  # amax maps near the largest code, 448 x 6
    n = int(out_loc.numel())
    wanted = {role: expected(v_.member(role), member_inputs(v_, role, inputs)) for role in g.roles}
    op(**{k: t for k, t in inputs.items() if k != "qkv"})
    for role in g.roles:
        assert torch.equal(inputs[g.names(role)["kvcache"]], wanted[role]), role
    d = g.member("k").head_dim

    def engine_read(role: str, cache: torch.Tensor) -> torch.Tensor:
        return fp4_rows(op.layouts[role], cache, out_loc, inputs.get(g.names(role)["scale"]))

    def as_pool(role: str) -> torch.Tensor:
        """The reference's pages with the kernel's page stride (a joint pool's half is a strided view; expected()
        returns its pages packed), so the engine's views read them alike."""
        cache = inputs[g.names(role)["kvcache"]]
        out = torch.empty_strided(cache.size(), cache.stride(), dtype=cache.dtype, device=cache.device)
        return out.copy_(wanted[role])

    q = op.layouts["q"].decode(inputs["q_out"], torch.arange(n, device="cuda"))
    out_kernel = last_token_attention(q, engine_read("k", inputs["k_cache"]), engine_read("v", inputs["v_cache"]),
                                      lengths)
    out_reference = last_token_attention(q, engine_read("k", as_pool("k")), engine_read("v", as_pool("v")), lengths)
    assert torch.equal(out_kernel, out_reference)
    exact = {}
    for role, mv in v_.members:
        mine = member_inputs(v_, role, inputs)
        exact[role] = reference.rows(mv.row_variant, mine["x"].reshape(n * mv.heads, d), mine["weight"], mine["freqs"],
                                     mine["positions"].repeat_interleave(mv.heads), 1e-6).reshape(n, mv.heads, d)
    ideal = last_token_attention(exact["q"], exact["k"], exact["v"], lengths)
    assert float((out_kernel - ideal).norm() / ideal.norm()) < 0.35
