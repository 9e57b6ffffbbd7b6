"""GPU tier: every shipped variant against the reference on real hardware, streams, graphs, guards at runtime.

The configurations the tuner may choose are checked as a sample by default (tests/launch_sample.py: the default
launch and one configuration for each value of each launch parameter) and every one under the marker `sweep`
(`-m sweep` or KERNELGEN_SWEEP=1); the routes the tuning records give this GPU are always checked."""
from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kernelgen import knobs
from kernelgen.build import driver, toolchain
from kernelgen.build.lifecycle import build
from kernelgen.codegen import guards
from kernelgen.errors import LayoutMismatch
from kernelgen.measure.inputs import make_inputs
from kernelgen.measure.verify import expected, verify
from kernelgen.runtime.op import Op
from kernelgen.spec.parse import load_spec, shipped_variants
from kernelgen.spec.variant import AXES, Launch, Variant
from kernelgen.tune.space import candidates, default_space
from launch_sample import cases as config_cases, config_index, every, local_capability, representative

HERE = local_capability()  # the GPU tier checks the launches the tuner may choose on this GPU

pytestmark = pytest.mark.gpu

SHIPPED = shipped_variants()


@pytest.fixture(scope="module")
def shipped_ops(session_cache: Path) -> dict[str, Op]:
    archs = toolchain.resolve_archs(None)
    artifacts = build(SHIPPED, toolchain.detect(), archs, session_cache)
    return {a.variant.name: Op(a) for a in artifacts}


def inputs_and_expected(op: Op, num_tokens: int, seed: int) -> tuple[dict, Any]:
    """Random inputs on the GPU and the cache the reference writes from them."""
    inputs = make_inputs(op.variant, num_tokens, 16, "cuda", seed=seed)
    return inputs, expected(op.variant, inputs)


def config_runner(op: Op, index: int, pdl: bool) -> Any:
    """verify()'s run(...) for configuration `index` of op's plan, launched with or without PDL."""
    def run(x, w, f, p, o, c, eps, bias, scale=None):  # noqa: ANN001
        op.launch_config(index, pdl, x, w, bias, f, p, o, c, scale, eps)
    return run


def config_failures(op: Op, v: Variant, tokens: Any, pages: int = 4, only: Launch | None = None) -> list[tuple]:
    """Each configuration op's plan compiles (`only`: that one), with and without PDL, against the reference at
    each token count (`tokens`: a tuple, or a function of the configuration giving one); the failures."""
    failures = []
    for index, config in enumerate(op.plan.configs):
        if only is not None and index != config_index(op.plan, v, only):
            continue
        for pdl in (False, True):
            for n in tokens(config) if callable(tokens) else tokens:
                report = verify(v.with_launch(config), config_runner(op, index, pdl), n, pages, "cuda", seed=n + index)
                if not report.ok:
                    failures.append((v.name, config.id, pdl, n, report.as_dict()))
    return failures


@pytest.mark.parametrize("num_tokens", [1, 37, 4096])
@pytest.mark.parametrize("name", [v.name for v in SHIPPED])
def test_shipped_variant_matches_reference(shipped_ops: dict[str, Op], name: str, num_tokens: int) -> None:
    op = shipped_ops[name]
    report = verify(op.variant, op, num_tokens, 4, "cuda", seed=num_tokens)
    assert report.ok, report.as_dict()


def test_runs_on_torch_current_stream(shipped_ops: dict[str, Op]) -> None:
    import torch

    op = shipped_ops["dsv4_indexer_bf16_p64"]
    inputs, want = inputs_and_expected(op, 2048, seed=7)
    x_ready = inputs["x"]
    x = torch.full_like(x_ready, float("nan"))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # if the kernel ran on another stream it would read x before the copy
        x.copy_(x_ready)
        op(x, inputs["weight"], inputs["freqs"], inputs["positions"], inputs["out_loc"], inputs["kvcache"])
    torch.cuda.synchronize()
    assert torch.equal(inputs["kvcache"], want)


def test_cuda_graph_capture_and_replay(shipped_ops: dict[str, Op]) -> None:
    import torch

    op = shipped_ops["dsv4_indexer_fp8_p64"]
    inputs, want = inputs_and_expected(op, 512, seed=11)
    poison = inputs["kvcache"].clone()
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        op(inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"], inputs["out_loc"], inputs["kvcache"])
    torch.cuda.synchronize()
    assert torch.equal(inputs["kvcache"], poison), "capture must record the launch, not run it"
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(inputs["kvcache"], want)


def test_wrong_pool_raises_and_writes_nothing(shipped_ops: dict[str, Op]) -> None:
    import torch

    op = shipped_ops["dsv4_indexer_fp8_p64"]
    inputs = make_inputs(op.variant, 64, 4, "cuda", seed=3)
    bf16_pool = torch.full((4, 16384), 0xAB, dtype=torch.uint8, device="cuda")
    with pytest.raises(Exception, match="kvcache rows are 16384 bytes but dsv4_indexer_fp8_p64 writes 8448-byte pages"):
        op(inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"], inputs["out_loc"], bf16_pool)
    with pytest.raises(Exception, match="16384"):  # the exported symbol checks too, without the Python layer
        op.launch(inputs["x"], inputs["weight"], None, inputs["freqs"], inputs["positions"], inputs["out_loc"],
                  bf16_pool, None, 1e-6)
    torch.cuda.synchronize()
    assert bool((bf16_pool == 0xAB).all())


def test_heads_read_from_a_slice_of_packed_qkv(shipped_ops: dict[str, Op]) -> None:
    """A multi-head K append reading K's columns of the packed projection (rows strided) writes what the
    reference writes from a contiguous K."""
    import torch

    op = shipped_ops["qwen3_8b_k_bf16_p16"]
    v = op.variant
    inputs, want = inputs_and_expected(op, 300, seed=6)
    width, q = v.heads * v.head_dim, 32 * v.head_dim
    qkv = torch.randn(300, q + 2 * width, device="cuda").to(torch.bfloat16)
    qkv[:, q:q + width] = inputs["x"]
    op(qkv[:, q:q + width], inputs["weight"], inputs["freqs"], inputs["positions"], inputs["out_loc"], inputs["kvcache"])
    torch.cuda.synchronize()
    assert torch.equal(inputs["kvcache"], want)


def test_int32_indices_and_strided_rows(shipped_ops: dict[str, Op]) -> None:
    import torch

    op = shipped_ops["dsv4_indexer_fp4_p64"]
    inputs, want = inputs_and_expected(op, 300, seed=5)
    wide = torch.randn(300, 3 * 128, device="cuda").to(torch.bfloat16)
    wide[:, 128:256] = inputs["x"]
    op(wide[:, 128:256], inputs["weight"], inputs["freqs"], inputs["positions"].int(), inputs["out_loc"].int(),
       inputs["kvcache"])
    torch.cuda.synchronize()
    assert torch.equal(inputs["kvcache"], want)


def _random_variant(rng: random.Random, i: int) -> Variant:
    """A random point of the spec space that passes every guard."""
    while True:
        settings = {axis: rng.choice(choices) for axis, (_, choices) in AXES.items() if choices}
        settings.update(
            head_dim=rng.choice([64, 128, 192, 256, 320, 512, 1024]),
            rope_dim=rng.choice([0, 32, 64, 128]),
            norm_bias=rng.random() < 0.5, hadamard=rng.random() < 0.5,
            page_size=rng.choice([1, 2, 8, 64, 128]), round_through_bf16=rng.random() < 0.3,
        )
        v = Variant(name=f"prop_{i}", **settings)
        if rng.random() < 0.3:  # sometimes a non-default launch
            v = replace(v, launch=replace(v.launch, tokens_per_block=rng.choice([2, 4, 8, 16, 32])))
        if not guards.violations(v):
            return v


def test_random_variants_match_reference(session_cache: Path) -> None:
    rng = random.Random(2026)
    variants = [_random_variant(rng, i) for i in range(24)]
    artifacts = build(variants, toolchain.detect(), toolchain.resolve_archs(None), session_cache)
    failures = []
    for i, a in enumerate(artifacts):
        op = Op(a)
        report = verify(op.variant, op, 777, 4, "cuda", seed=i)
        if not report.ok:
            failures.append((a.variant, report.as_dict()))
    assert not failures, failures


def test_symbol_and_python_refuse_each_bad_tensor_with_the_same_words(shipped_ops: dict[str, Op]) -> None:
    """The exported symbol (C++, generated from the check table) and the Python op (the same table)
    refuse each bad tensor with the same message, and nothing is written."""
    import torch

    op = shipped_ops["dsv32_indexer_fp8_p64"]  # LayerNorm with bias: every argument is used
    inputs = make_inputs(op.variant, 64, 16, "cuda", seed=1)
    names = ("x", "weight", "bias", "freqs", "positions", "out_loc", "kvcache")
    good = [inputs[k] for k in names]
    op.checker.check(*good)
    x = good[0]
    bad = {
        "x": [x.float(), x[:, :64], x.t().contiguous().t(), x.cpu(), x.reshape(-1)[4:4 + 63 * 128].view(63, 128)],
        "weight": [good[1].bfloat16(), good[1][:64], good[1].cpu(), torch.zeros(256, device="cuda")[1:129]],
        "bias": [good[2][:64], good[2].double(), good[2].cpu()],
        "freqs": [good[3][:, :32], good[3].double(), good[3].t().contiguous().t()],
        "positions": [good[4][:10], good[4].float(), good[4].repeat(2)[::2]],
        "out_loc": [good[5][:10], good[5].float(), good[5].cpu(), good[5].repeat(2)[::2]],
        "kvcache": [torch.zeros(4, 16384, dtype=torch.uint8, device="cuda"), good[6].view(torch.int8),
                    good[6].view(-1)[4:4 + 8448 * 2].view(2, 8448), good[6].cpu(),
                    torch.zeros(4, 2 * 8448, dtype=torch.uint8, device="cuda")[:, :8448]],
    }
    kinds = set()
    for name, cases in bad.items():
        for case in cases:
            args = list(good)
            args[names.index(name)] = case
            if name == "x":  # the rows of x decide N: keep the index tensors in step
                n = case.shape[0]
                args[4], args[5] = good[4][:n].contiguous(), good[5][:n].contiguous()
                if case.device.type == "cpu":  # all on the CPU: the device check of x is the one that fails
                    args = [a.cpu() for a in args]
            failed = op.checker.first_failure(*args)
            assert failed is not None and failed.arg == name, (name, failed)
            kinds.add(failed.kind)
            with pytest.raises(LayoutMismatch) as python_said:
                op.checker.check(*args)
            before = good[6].clone()
            with pytest.raises(Exception) as symbol_said:  # the exported symbol refuses it on its own
                op.launch(*args, None, 1e-6)
            assert str(symbol_said.value) == str(python_said.value), (name, str(symbol_said.value))
            with pytest.raises(LayoutMismatch):  # and the op says it in the same words
                op(args[0], args[1], args[3], args[4], args[5], args[6], bias=args[2])
            torch.cuda.synchronize()
            assert torch.equal(good[6], before), f"nothing is written when {name} is refused"
    assert kinds == {c.kind for c in op.checker.checks}, kinds


def test_dispatch_runs_the_routed_configuration(session_cache: Path) -> None:
    """The plain entry point picks the configuration of the route for x.size(0), PDL included, also
    under CUDA-graph capture; each result is exact against the reference for that configuration."""
    import torch

    from kernelgen.codegen.launch import ALL_TOKENS, plan_routes
    from kernelgen.runtime.op import load_variant
    from kernelgen.spec.parse import load_spec
    from kernelgen.spec.variant import Launch

    v = load_spec("dsv4_indexer").variant("dsv4_indexer_bf16_p64")
    small, large = Launch(32, 2, 4, True, True), Launch(4, 16, 8)
    plan = plan_routes(v, [(64, small), (ALL_TOKENS, large)])
    op = load_variant(v, cache_dir=session_cache, plan=plan)
    assert op.plan == plan and len(op.plan.configs) == 2
    for n in (1, 37, 64, 65, 4096):
        inputs = make_inputs(op.variant, n, 16, "cuda", seed=n)
        want = expected(v.with_launch(plan.launch_for(n)), inputs)
        op(inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"], inputs["out_loc"], inputs["kvcache"])
        torch.cuda.synchronize()
        assert torch.equal(inputs["kvcache"], want), n
    inputs = make_inputs(op.variant, 8, 16, "cuda", seed=5)
    want = expected(v.with_launch(small), inputs)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # a PDL launch inside capture
        op(inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"], inputs["out_loc"], inputs["kvcache"])
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(inputs["kvcache"], want)


TUNER_VARIANTS = [next(s for s in SHIPPED if s.name == name) for name in (
    "dsv4_indexer_fp8_p64", "dsv4_indexer_fp4_p1", "dsv4_mainkv_fp8mla_p64", "dsv32_indexer_bf16_p64",
    "dsv4_mainkv_nvfp4_p64", "vllm_dsv32_indexer_fp8vllm_p64", "vllm_dsv32_indexer_fp8vllmue8m0_p64", "example_nvfp4",
    "example_nvfp4_d64_neox", "qwen3_8b_k_bf16_p16", "gptoss_k_bf16_p16", "llama3_8b_k_fp8_p16",
    "dsv4_mainkv_v41_p64", "dsv4_mainkv_v41_new_p64", "dsv4_mainkv_v41_fp4_p64", "dsv4_mainkv_v41_fp4_new_p64",
    "dsv4_mainkv_uniform_fp8_p64", "deepseek_v3_kv_bf16_p64", "deepseek_v3_kv_fp8_p64", "deepseek_v3_kv_fp8dsmla_p64")]

HALVES = [
    Variant("halves_neox_full", head_dim=128, rope_dim=128, rope_place="head", rope_style="neox", rope_table="halves",
            store="bf16"),
    Variant("halves_ilv_tail", head_dim=256, rope_dim=64, rope_table="halves", store="fp8_e4m3"),
    Variant("halves_heads", head_dim=128, heads=8, rope_dim=128, rope_place="head", rope_style="neox",
            rope_table="halves", norm="rms", store="fp8_scaled", page_size=16),
    Variant("halves_neox_d64", head_dim=64, rope_dim=32, rope_place="head", rope_style="neox", rope_table="halves",
            store="bf16", input_dtype="fp16"),
    Variant("gemma_d256_heads", head_dim=256, heads=4, rope_dim=128, rope_place="head", rope_style="neox",
            norm="rms_gemma", store="bf16", page_size=16),
    Variant("gemma_fp8", head_dim=128, rope_dim=64, norm="rms_gemma", store="fp8_e4m3", weight_dtype="bf16"),
]


def tuner_candidates(v: Variant) -> list[Launch]:
    """The launches the tuner may choose for v: its default space, narrowed or extended by its spec's `tune:`."""
    return candidates(v, default_space(v, load_spec(v.spec_name).tune_overrides() if v.spec_name else None,
                                       capability=HERE))[0]


def candidate_ops(variants: list[Variant], pick: Any, cache: Path) -> dict[str, Op]:
    """Each variant built with the tuner's plan (tune.runner.tuning_plan: the default launch routed, the others
    compiled beside it) over pick(its candidates), in one ninja graph."""
    from kernelgen.tune.runner import tuning_plan

    plans = [tuning_plan(v, pick(tuner_candidates(v))) for v in variants]
    artifacts = build(variants, toolchain.detect(), toolchain.resolve_archs(None), cache, launch_plans=plans)
    return {a.variant.name: Op(a) for a in artifacts}


@pytest.fixture(scope="module")
def sample_ops(session_cache: Path) -> dict[str, Op]:
    return candidate_ops(TUNER_VARIANTS + HALVES, representative, session_cache)


@pytest.fixture(scope="module")
def sweep_ops(session_cache: Path) -> dict[str, Op]:
    return candidate_ops(TUNER_VARIANTS + HALVES, every, session_cache)


@pytest.mark.parametrize("v, config", config_cases(TUNER_VARIANTS, tuner_candidates, representative))
def test_a_sample_of_the_configurations_the_tuner_may_choose_is_exact(sample_ops: dict[str, Op], v: Variant,
                                                                      config: Launch) -> None:
    """The fast tier's sample of the launches the tuner may choose (tests/launch_sample.py), each with and without
    PDL, writes the reference's bytes; test_every_configuration_the_tuner_may_choose_is_exact (sweep) runs them all."""
    failures = config_failures(sample_ops[v.name], v, (1, 300), only=config)
    assert not failures, failures


@pytest.mark.sweep
@pytest.mark.parametrize("v, config", config_cases(TUNER_VARIANTS, tuner_candidates, every))
def test_every_configuration_the_tuner_may_choose_is_exact(sweep_ops: dict[str, Op], v: Variant,
                                                           config: Launch) -> None:
    """Every launch the tuner may choose, with and without PDL, writes the reference's bytes."""
    failures = config_failures(sweep_ops[v.name], v, (1, 300), only=config)
    assert not failures, failures


@pytest.mark.parametrize("v, config", config_cases(HALVES, tuner_candidates, representative))
def test_cos_sin_halves_and_gemma_norm_are_exact_for_a_sample_of_the_candidates(sample_ops: dict[str, Op],
                                                                                v: Variant, config: Launch) -> None:
    """vLLM's and FlashInfer's cos_sin_cache layout (cos of every pair, then every sin) and Gemma's RMSNorm
    times (1 + w): the sampled launches the tuner may choose, with and without PDL, write the reference's bytes."""
    failures = config_failures(sample_ops[v.name], v, (1, 300), only=config)
    assert not failures, failures


@pytest.mark.sweep
@pytest.mark.parametrize("v, config", config_cases(HALVES, tuner_candidates, every))
def test_cos_sin_halves_and_gemma_norm_are_exact_for_every_candidate(sweep_ops: dict[str, Op], v: Variant,
                                                                     config: Launch) -> None:
    """As the sample's test, for every launch the tuner may choose."""
    failures = config_failures(sweep_ops[v.name], v, (1, 300), only=config)
    assert not failures, failures


@pytest.mark.parametrize("name", ["dsv4_indexer_fp8_p64", "dsv4_indexer_fp4_p64", "dsv4_indexer_bf16_p64",
                                  "dsv4_mainkv_fp8mla_p64", "dsv32_indexer_fp8_p64", "dsv4_mainkv_nvfp4_p64",
                                  "vllm_dsv32_indexer_fp8vllm_p64", "vllm_dsv32_indexer_fp8vllmue8m0_p64",
                                  "example_nvfp4", "example_nvfp4_d64_neox", "qwen3_8b_k_bf16_p16",
                                  "llama3_8b_v_fp8_p16"])
def test_awkward_rows_write_the_defined_bytes(shipped_ops: dict[str, Op], name: str) -> None:
    """NaN, inf and overflowing rows become canonical NaN rows, zero rows stay finite, exactly as the reference."""
    import torch

    op = shipped_ops[name]
    inputs = make_inputs(op.variant, 64, 4, "cuda", seed=4)
    x = inputs["x"]
    x[1, 3], x[2, 5], x[3, 7] = float("nan"), float("inf"), float("-inf")
    x[4, :] = 1e30 * torch.tensor([1.0, -1.0], device="cuda").repeat(x.shape[1] // 2)
    x[5, :] = 0.0
    want = expected(op.variant, inputs)
    op(inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"], inputs["out_loc"], inputs["kvcache"],
       bias=inputs["bias"], scale=inputs["scale"])
    torch.cuda.synchronize()
    assert torch.equal(inputs["kvcache"], want)


@pytest.mark.parametrize("eps", [0.0, 1e-35, 1e-6, 2.0 ** 101])
@pytest.mark.parametrize("name", ["dsv4_indexer_bf16_p64", "dsv4_mainkv_fp8mla_p64", "dsv32_indexer_fp8_p64"])
def test_norm_is_exact_for_every_eps(shipped_ops: dict[str, Op], name: str, eps: float) -> None:
    """The norm's reciprocal root runs without range checks for 2^-101 <= eps <= 2^100 and as sqrt.rn then
    rcp.rn otherwise (numeric.cuh inv_sqrt_rn): both write the reference's bytes. Rows 1-5 are written
    (free slots, positions in range): a zero row, a subnormal mean square, one that underflows to zero, a
    single tiny value (subnormal also after LayerNorm's centering, dsv32), and an all -0.0 row. With eps = 0
    a fast path taken by mistake turns the subnormal rows into NaN rows."""
    import torch

    op = shipped_ops[name]
    inputs = make_inputs(op.variant, 64, 4, "cuda", seed=5)
    x, out_loc, positions = inputs["x"], inputs["out_loc"], inputs["positions"]
    taken = set(out_loc.tolist())
    free = [slot for slot in range(inputs["kvcache"].shape[0] * op.variant.page_size) if slot not in taken][:5]
    out_loc[1:6] = torch.tensor(free, device="cuda", dtype=out_loc.dtype)
    if positions is not None:
        positions[1:6] = torch.arange(5, device="cuda", dtype=positions.dtype)
    x[1, :] = 0.0
    x[2, :] = 1e-20  # squares near 1e-40: a subnormal mean square
    x[3, :] = 1e-30  # squares underflow to zero
    x[4, :] = 0.0
    x[4, 0] = 1e-19
    x[5, :] = -0.0
    want = expected(op.variant, inputs, eps)
    op(inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"], inputs["out_loc"], inputs["kvcache"],
       eps=eps, bias=inputs["bias"])
    torch.cuda.synchronize()
    assert torch.equal(inputs["kvcache"], want)


@pytest.mark.parametrize("name", ["example_nvfp4", "llama3_8b_k_fp8_p16"])
def test_a_captured_graph_reads_the_global_scale_at_replay(shipped_ops: dict[str, Op], name: str) -> None:
    """nvfp4's g and fp8_scaled's k_scale are device tensors: a graph captured with one value writes the bytes
    of the value the tensor holds at replay; a wrong scale tensor is refused by the symbol and the op in the
    same words."""
    import torch

    op = shipped_ops[name]
    inputs = make_inputs(op.variant, 300, 16, "cuda", seed=31)
    args = [inputs[k] for k in ("x", "weight", "freqs", "positions", "out_loc", "kvcache")]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        op(*args, scale=inputs["scale"])
    inputs["scale"].fill_(3.3)
    want = expected(op.variant, inputs)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(inputs["kvcache"], want)
    before = inputs["kvcache"].clone()
    for bad in (inputs["scale"].double(), inputs["scale"].cpu(), inputs["scale"].repeat(2), None):
        with pytest.raises(LayoutMismatch, match="scale must") as python_said:
            op(*args, scale=bad)
        if bad is not None:
            with pytest.raises(Exception) as symbol_said:
                op.launch(args[0], args[1], None, *args[2:], bad, 1e-6)
            assert str(symbol_said.value) == str(python_said.value)
    torch.cuda.synchronize()
    assert torch.equal(inputs["kvcache"], before)


def test_torch_custom_op_under_compile_graphs_and_streams(shipped_ops: dict[str, Op]) -> None:
    """torch.ops.kernelgen.<variant>: torch.compile(fullgraph=True) writes the same bytes as eager,
    CUDA-graph capture and replay too, and the op runs on the current stream."""
    import torch

    from kernelgen.runtime.torch_ops import register

    op = shipped_ops["dsv4_indexer_bf16_p64"]
    f = register(op)
    torch.library.opcheck(f, (lambda i: (i["x"], i["weight"], i["freqs"], i["positions"], i["out_loc"],
                                         i["kvcache"]))(make_inputs(op.variant, 16, 4, "cuda", seed=1)))

    def step(x, w, fr, pos, loc, cache):
        f(x * 1.0, w, fr, pos, loc, cache)

    inputs, want = inputs_and_expected(op, 300, seed=21)
    args = [inputs[k] for k in ("x", "weight", "freqs", "positions", "out_loc", "kvcache")]
    torch.compile(step, fullgraph=True)(*args)
    torch.cuda.synchronize()
    assert torch.equal(inputs["kvcache"], want)

    inputs, want = inputs_and_expected(op, 64, seed=22)
    args = [inputs[k] for k in ("x", "weight", "freqs", "positions", "out_loc", "kvcache")]
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        f(*args)  # warm up on a side stream, then capture
    torch.cuda.current_stream().wait_stream(side)
    inputs["kvcache"].copy_(inputs_and_expected(op, 64, seed=22)[0]["kvcache"])
    with torch.cuda.graph(graph):
        f(*args)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(inputs["kvcache"], want)


def test_end_to_end_kv_store_example_from_an_export_without_nvcc(tmp_path: Path) -> None:
    """examples/kv_store.py: pools from the layout API, prefill, a graph-replayed decode step, loaded
    from export directories in a process where nvcc is not reachable; bytes checked against the reference."""
    import os
    import subprocess
    import sys

    from kernelgen.runtime.export import export
    from kernelgen.spec.parse import load_spec

    arch = toolchain.resolve_archs(None)
    export([load_spec("dsv4_indexer").variant("dsv4_indexer_bf16_p64")], arch, tmp_path / "index")
    export([load_spec("dsv4_mainkv").variant("dsv4_mainkv_fp8mla_p64")], arch, tmp_path / "mainkv")
    env = {k: v for k, v in os.environ.items() if k != "KERNELGEN_CACHE_DIR"}
    env["CUDA_HOME"] = "/nonexistent-cuda"
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not (Path(p) / "nvcc").exists())
    example = Path(__file__).resolve().parents[1] / "examples" / "kv_store.py"
    done = subprocess.run([sys.executable, str(example), str(tmp_path / "index"), str(tmp_path / "mainkv")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "token writes checked against the reference" in done.stdout


def test_a_wheel_of_an_export_writes_the_jit_ops_bytes(shipped_ops: dict[str, Op], tmp_path: Path) -> None:
    """The wheel round trip on a GPU (issue 38 item 6): a launch group and a variant exported for this GPU, packed as
    a wheel, pip-installed into a folder and imported from there in a process that cannot import kernelgen: each op
    writes the bytes the JIT op writes on the same inputs."""
    import os
    import subprocess
    import sys

    import torch

    from kernelgen.runtime.export import export
    from kernelgen.runtime.wheel import build_wheel
    from kernelgen.spec.parse import load_spec

    spec = load_spec("dsv4_mainkv")
    export([spec.variant("dsv4_mainkv_v41_p64")], toolchain.resolve_archs(None), tmp_path / "export")
    wheel = build_wheel(tmp_path / "export", tmp_path, "roundtrip")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                    str(tmp_path / "site"), str(wheel)], check=True, timeout=300)
    op = shipped_ops["dsv4_mainkv_v41_p64"]
    inputs, _ = inputs_and_expected(op, 300, seed=5)
    torch.save({k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}, tmp_path / "in.pt")
    jit = inputs["kvcache"].clone()
    op(inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"], inputs["out_loc"], jit)
    script = (
        "import sys, torch\n"
        "class B:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'kernelgen': raise ImportError(name)\n"
        "sys.meta_path.insert(0, B())\n"
        "import roundtrip\n"
        f"i = {{k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in torch.load({str(tmp_path / 'in.pt')!r}).items()}}\n"
        "op = roundtrip.load('dsv4_mainkv_v41_p64')\n"
        "out = i['kvcache'].clone()\n"
        "op(i['x'], i['weight'], i['freqs'], i['positions'], i['out_loc'], out)\n"
        f"torch.save(out.cpu(), {str(tmp_path / 'out.pt')!r})\n")
    env = dict(os.environ)  # kernelgen may be on the path: the finder above refuses it
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert torch.equal(torch.load(tmp_path / "out.pt"), jit.cpu())


def test_bench_command_writes_its_json(tmp_path: Path) -> None:
    """`kernelgen bench` end to end: one row per (variant, N) with the routed launch, compulsory bytes and
    % of the roofline consistent with the time, the empty-kernel floor measured beside every row, and the
    run's floor the lowest of all its measurements."""
    import json

    from kernelgen.cli import main

    out = tmp_path / "bench.json"
    assert main(["bench", "dsv4_indexer", "--variants", "dsv4_indexer_bf16_p64", "--tokens", "1,4096",
                 "--workload", "decode", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [(r["variant"], r["tokens"]) for r in data["rows"]] == [("dsv4_indexer_bf16_p64", 1),
                                                                    ("dsv4_indexer_bf16_p64", 4096)]
    floors = data["floor_us_start_end"] + [r["floor_us"] for r in data["rows"]]
    assert data["floor_us"] == min(floors) > 0 and data["roofline_gbs"] > 100
    for r in data["rows"]:
        assert r["us"] > r["floor_us"] / 2 and r["launch"]
        tbps = r["bytes"] / (r["us"] * 1e-6) / 1e12
        assert abs(tbps - r["tbps"]) < 0.01 and abs(100 * tbps * 1e3 / data["roofline_gbs"] - r["roofline_pct"]) < 0.2


@pytest.mark.parametrize("name", ["dsv4_indexer_fp8_p64", "dsv4_indexer_fp4_p64", "dsv4_mainkv_fp8mla_p64"])
def test_looping_configurations_are_exact_over_many_waves(session_cache: Path, name: str) -> None:
    """A looping launch (one wave of blocks walks the tokens, next token prefetched) writes the reference's
    bytes when each block walks many tokens, padding, skipped slots and the ragged last block included."""
    from kernelgen.codegen.launch import ALL_TOKENS, plan_routes
    from kernelgen.spec.variant import Launch

    v = next(s for s in SHIPPED if s.name == name)
    looped = [Launch(8, 8, 8, loop=True), Launch(16, 4, 8, True, loop=True)]
    plan = plan_routes(v, [(ALL_TOKENS, looped[0])], tuple(looped))
    [artifact] = build([v], toolchain.detect(), toolchain.resolve_archs(None), session_cache, launch_plans=[plan])
    failures = config_failures(Op(artifact), v, (1, 5000, 100_003))
    assert not failures, failures


def test_tokens_of_several_warps_are_exact(session_cache: Path) -> None:
    """Tokens of 64 and 128 threads (two and four warps) reduce across warps through shared memory: the
    LayerNorm's two sums, the fp8 per-token amax and the NaN vote, plain and looping, with and without
    PDL, match the reference; a NaN in one freqs row reaches the warps that hold no roped dim."""
    import torch

    from kernelgen.codegen.launch import ALL_TOKENS, plan_routes
    from kernelgen.spec.variant import Launch

    variants = [
        Variant("mw_ln_neox_fp8", head_dim=512, rope_dim=64, rope_place="head", rope_style="neox", norm="layer",
                norm_bias=True, store="fp8_e4m3", weight_dtype="bf16", page_size=16),
        next(s for s in SHIPPED if s.name == "dsv4_mainkv_fp8mla_p64"),
        next(s for s in SHIPPED if s.name == "dsv4_mainkv_bf16_p1"),
    ]
    launches = [Launch(64, 1, 8, True), Launch(64, 4, 8, loop=True), Launch(128, 1, 4, True), Launch(128, 2, 4, loop=True)]
    plans = [plan_routes(v, [(ALL_TOKENS, launches[0])], tuple(launches)) for v in variants]
    artifacts = build(variants, toolchain.detect(), toolchain.resolve_archs(None), session_cache, launch_plans=plans)
    failures = []
    for v, artifact in zip(variants, artifacts):
        op = Op(artifact)
        failures += config_failures(op, v, (1, 300, 40_000), pages=64)
        for index, config in enumerate(op.plan.configs):
            for pdl in (False, True):
                inputs = make_inputs(v.with_launch(config), 300, 64, "cuda", seed=index)
                pos, loc = inputs["positions"], inputs["out_loc"]
                slots = inputs["kvcache"].shape[0] * v.page_size
                k = int(torch.nonzero((pos < inputs["freqs"].shape[0]) & (loc >= 0) & (loc < slots))[0])
                clean = expected(v.with_launch(config), inputs)
                inputs["freqs"][pos[k]] = float("nan")  # the roped dims sit in one warp of the token
                want = expected(v.with_launch(config), inputs)
                assert not torch.equal(want, clean), "the NaN freqs row must change a written row"
                config_runner(op, index, pdl)(inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"],
                                              inputs["out_loc"], inputs["kvcache"], 1e-6, inputs["bias"])
                torch.cuda.synchronize()
                if not torch.equal(inputs["kvcache"], want):
                    failures.append((v.name, config.id, pdl, "NaN freqs row"))
    assert not failures, failures


def test_hadamard_across_warps_is_exact(session_cache: Path) -> None:
    """The Hadamard stages over the warp bits of a token of 64 or 128 threads swap the row between warps
    through shared memory: plain and looping (where a block's warps walk many tokens and the buffers
    alternate by token parity), with and without PDL, at head_dim 1024 (fp4 through bf16),
    512 (bf16 store) and 128 (the fp8 indexer, two values per thread), every byte is the reference's."""
    from kernelgen.codegen.launch import ALL_TOKENS, plan_routes
    from kernelgen.spec.variant import Launch

    cases = [
        (next(s for s in SHIPPED if s.name == "example_d1024_r128"),
         [Launch(128, 1, 8, True), Launch(128, 2, 8, loop=True), Launch(64, 4, 8, True, loop=True), Launch(64, 1, 4)]),
        (Variant("mw_hadamard_bf16_d512", head_dim=512, rope_dim=64, hadamard=True, store="bf16", page_size=16),
         [Launch(128, 1, 4, True), Launch(128, 4, 4, loop=True), Launch(64, 2, 8)]),
        (next(s for s in SHIPPED if s.name == "dsv4_indexer_fp8_p64"),
         [Launch(64, 1, 2, True), Launch(64, 8, 2, True, loop=True)]),
    ]
    variants = [v for v, _ in cases]
    plans = [plan_routes(v, [(ALL_TOKENS, ls[0])], tuple(ls)) for v, ls in cases]
    artifacts = build(variants, toolchain.detect(), toolchain.resolve_archs(None), session_cache, launch_plans=plans)
    failures = []
    for v, artifact in zip(variants, artifacts):
        failures += config_failures(Op(artifact), v, (1, 300, 40_000), pages=64)
    assert not failures, failures


@pytest.fixture(scope="module")
def tuned_builds(session_cache: Path) -> None:
    """Every shipped variant's tuned dispatch for this GPU built in one ninja graph, so that the load_variant of
    each case below finds its library in the cache instead of compiling one variant at a time."""
    from kernelgen.tune import lookup
    from kernelgen.tune.gpu import current

    gpu = current()
    plans = [lookup.tuned(v, [gpu] if gpu is not None else []).plan for v in SHIPPED]
    build(SHIPPED, toolchain.detect(), toolchain.resolve_archs(None), session_cache, launch_plans=plans)


@pytest.mark.parametrize("name", [v.name for v in SHIPPED])
def test_every_configuration_of_the_tuned_dispatch_is_exact(session_cache: Path, tuned_builds: None,
                                                            name: str) -> None:
    """The dispatch the shipped records give this GPU (what load_variant serves; the variant's default launch
    on a GPU without records): each configuration it routes to, whatever bucket reaches it, with and without
    PDL, writes the reference's bytes; a looping one also over 100003 tokens, where its blocks walk many tokens."""
    from kernelgen.runtime.op import load_variant

    v = next(s for s in SHIPPED if s.name == name)
    op = load_variant(v, cache_dir=session_cache)
    failures = config_failures(op, v, lambda config: (1, 300, 100_003) if config.loop else (1, 300))
    assert not failures, failures


def test_the_driver_reports_what_torch_reports_without_importing_it() -> None:
    """The local GPU from libcuda (a process that never imports torch) is the one torch reports: the target and
    the identity the tuning records are keyed by (issue 38 item 1)."""
    import json
    import subprocess
    import sys

    import torch

    from kernelgen.tune.gpu import from_properties

    code = ("import json, sys; from kernelgen.build.driver import properties; from kernelgen.build.toolchain import "
            "local_arch; p = properties(); print(json.dumps([p.__dict__, local_arch(), 'torch' in sys.modules]))")
    got, arch, imported = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                     check=True).stdout)
    assert not imported
    p = torch.cuda.get_device_properties(0)
    assert (got["name"], got["major"], got["minor"], got["multi_processor_count"], got["total_memory"]) == (
        p.name, p.major, p.minor, p.multi_processor_count, p.total_memory)
    mine, torchs = from_properties(type("P", (), got)), from_properties(p)
    assert mine.slug == torchs.slug and mine.matches(torchs)  # the identity the tuning records are keyed by
    if torchs.bandwidth_gbs:  # torch builds that report the memory clock agree on the bandwidth too
        assert mine == torchs
    assert arch == f"sm_{p.major}{p.minor}" + ("a" if p.major >= 9 else "")


def test_nvml_reports_the_capability_the_driver_reports() -> None:
    """The target a build reads from NVML (no cuInit) is the driver's and torch's, on this machine's GPUs."""
    import json
    import subprocess
    import sys

    import torch

    code = ("import json, sys; from kernelgen.build import driver; "
            "got = driver.capability(); print(json.dumps([driver._nvml_capabilities(), got, "
            "driver._libcuda.cache_info().currsize, 'torch' in sys.modules]))")
    nvml, got, cuinit, imported = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                                            text=True, check=True).stdout)
    assert not imported
    p = torch.cuda.get_device_properties(0)
    assert nvml and [p.major, p.minor] in nvml
    assert got == [p.major, p.minor]
    # the driver (cuInit) was asked only where NVML could not be certain (mixed GPUs, GPUs named by UUID)
    certain = driver.capability_from_nvml([tuple(c) for c in nvml], knobs.visible_devices())
    assert cuinit == (0 if certain else 1)
