"""launch.bracket_codes: e4m3 codes of a correctly rounded divide read off one multiply (numeric.cuh
e4m3_codes_bracketed), as a tuner candidate.

Where a store's e4m3 codes are of RN(v / s) (vLLM's scaled_convert with its per-tensor k_scale; its indexer's per-token
scale), the flag takes q0 = RN(v x RN(1 / s)) and converts RN(q0 (1 - 2^-21)) and RN(q0 (1 + 2^-21)): the true quotient
lies strictly between them, the conversion is monotone, so where the two codes agree they are the quotient's; where
they differ (a quotient within about 2^-21 of an e4m3 rounding midpoint) the kernel divides. Same bytes: the sequence
is replayed here step by step (each product exact in float64, one rounding) against the correctly rounded quotient's
codes on quotients at every e4m3 midpoint and a few float32 steps from it, for divisors across the range the kernel
admits; a bracket one rounding narrower fails the same replay, so the check can fail. The tuner checks every `.bc`
candidate's bytes against the reference before it may choose one."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from kernelgen.codegen.launch import resolve
from kernelgen.layout.codec import e4m3_decode, e4m3_encode
from kernelgen.spec.launchparams import BY_NAME
from kernelgen.spec.parse import load_spec
from kernelgen.spec.variant import Launch
from kernelgen.tune.space import candidates, default_space

from sass_ops import SASS, sass_ops
from test_lean_math import correctly_rounded

F32 = np.float32
WIDTH = 2.0 ** -21  # numeric.cuh kBracketBelow / kBracketAbove
MAX_DIVIDEND = 2.0 ** 60  # kBracketMaxDividend; the divisor's range is lean_div_bits' [2^-60, 2^60]


def _codes(q: np.ndarray) -> np.ndarray:
    return e4m3_encode(torch.from_numpy(np.ascontiguousarray(q, dtype=F32))).numpy()


def bracketed(a: np.ndarray, b: np.ndarray, width: float = WIDTH) -> tuple[np.ndarray, np.ndarray]:
    """(codes, agreed): numeric.cuh e4m3_codes_bracketed step by step; codes hold where agreed."""
    y = correctly_rounded(np.ones_like(b), b).astype(np.float64)  # rcp_rn_in_range: RN(1 / b)
    q0 = (a.astype(np.float64) * y).astype(F32)  # the product of two floats is exact in float64: one rounding
    below = (q0.astype(np.float64) * float(F32(1 - width))).astype(F32)
    above = (q0.astype(np.float64) * float(F32(1 + width))).astype(F32)
    lo, hi = _codes(below), _codes(above)
    return lo, lo == hi


def _midpoints() -> np.ndarray:
    """Every positive e4m3 rounding midpoint (between neighbouring codes, subnormals included) and the saturation
    bound's neighbourhood: the quotients where the code turns."""
    values = np.sort(np.unique(e4m3_decode(torch.arange(0, 0x7F, dtype=torch.uint8)).numpy().astype(np.float64)))
    mids = (values[:-1] + values[1:]) / 2
    return np.concatenate([mids, [448.0, 464.0, 480.0]]).astype(F32)


def _hard_cases(rng: np.random.Generator, divisors: np.ndarray, steps: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """Dividends a = RN(m b) for every midpoint m moved by up to `steps` float32 steps each way, both signs, each
    divisor: quotients at and around every point where the code turns."""
    mids = _midpoints()
    near = [mids]
    up, down = mids.copy(), mids.copy()
    for _ in range(steps):
        up, down = np.nextafter(up, F32(np.inf)), np.nextafter(down, F32(-np.inf))
        near += [up, down]
    m = np.concatenate(near)
    a = (m[None, :].astype(np.float64) * divisors[:, None].astype(np.float64)).astype(F32).ravel()
    b = np.repeat(divisors, m.size)
    sign = np.where(rng.random(a.size) < 0.5, F32(-1), F32(1))
    return a * sign, b


def _divisors(rng: np.random.Generator, n: int) -> np.ndarray:
    """Divisors across [2^-60, 2^60]: random mantissas (all-ones and zero among them) at random exponents, plus the
    range's ends and vLLM's usual k_scale of 1."""
    exps = rng.integers(-60, 60, n)
    mant = rng.integers(0, 1 << 23, n, dtype=np.int64)
    mant[:4] = [0, (1 << 23) - 1, 1, (1 << 22)]
    b = ((exps + 127).astype(np.int64) << 23 | mant).astype(np.uint32).view(F32)
    return np.concatenate([b, np.array([2.0 ** -60, 2.0 ** 60, 1.0, 0.0625, 3.0], dtype=F32)])


@pytest.mark.pure
def test_agreed_codes_are_the_correctly_rounded_quotients_codes_at_every_midpoint() -> None:
    rng = np.random.default_rng(7)
    a, b = _hard_cases(rng, _divisors(rng, 48))
    codes, agreed = bracketed(a, b)
    exact = _codes(correctly_rounded(a, b))
    assert agreed.any() and (~agreed).any()  # the hard cases reach both paths
    wrong = np.flatnonzero(agreed & (codes != exact))
    assert wrong.size == 0, f"{wrong.size} agreed codes differ, e.g. a={a[wrong[0]]!r} b={b[wrong[0]]!r}"


@pytest.mark.pure
def test_a_bracket_one_rounding_narrower_gives_wrong_codes_on_the_same_cases() -> None:
    """The replay has teeth: with 2^-24 instead of 2^-21 the two products can agree on the wrong side of a midpoint."""
    rng = np.random.default_rng(7)
    a, b = _hard_cases(rng, _divisors(rng, 48))
    codes, agreed = bracketed(a, b, width=2.0 ** -24)
    assert (agreed & (codes != _codes(correctly_rounded(a, b)))).any()


@pytest.mark.pure
def test_random_rows_rarely_take_the_divide_and_edges_agree() -> None:
    """Model-like rows (normal values over a per-tensor scale) take the divide for a few values in 10^5; zeros of both
    signs, tiny dividends (quotients far below e4m3's smallest code), dividends up to 2^60 and quotients past 448
    (saturated) agree with the correctly rounded quotient's codes wherever the bracket agrees."""
    rng = np.random.default_rng(11)
    a = (rng.standard_normal(1 << 20) * 3).astype(F32)
    b = np.full(a.size, F32(0.0123), dtype=F32)
    codes, agreed = bracketed(a, b)
    assert (~agreed).mean() < 1e-4
    assert np.array_equal(codes[agreed], _codes(correctly_rounded(a, b))[agreed])
    edge_a = np.array([0.0, -0.0, 1e-30, -1e-30, 2.0 ** -149, 2.0 ** 60, -(2.0 ** 60), 449.0, 1e20, 3.0], dtype=F32)
    for scale in (2.0 ** -60, 2.0 ** -20, 1.0, 2.0 ** 60):
        bb = np.full(edge_a.size, F32(scale), dtype=F32)
        codes, agreed = bracketed(edge_a, bb)
        exact = _codes(correctly_rounded(edge_a, bb))
        assert np.array_equal(codes[agreed], exact[agreed]), scale
        assert agreed[:2].all() and list(codes[:2]) == [0x00, 0x80]  # signed zeros keep their sign


@pytest.mark.pure
def test_the_space_offers_bracket_codes_only_where_a_store_divides_into_e4m3_codes() -> None:
    param = BY_NAME["bracket_codes"]
    offered = {}
    for spec in ("mla", "attention_prep", "vllm_dsv32_indexer", "dsv4_mainkv"):
        for v in load_spec(spec).variants:
            offered[v.name] = param.values(v)
    assert offered["deepseek_v3_kv_fp8_p64"] == (False, True)  # vLLM concat_and_cache_mla fp8: v / k_scale
    assert offered["llama3_8b_vllm_fp8_k"] == (False, True)
    assert offered["vllm_dsv32_indexer_fp8vllm_p64"] == (False, True)  # per-token scale, divided
    assert offered["deepseek_v3_kv_bf16_p64"] == (False,)
    assert offered["dsv4_mainkv_v41_p64"] == (False,)  # power-of-two scales: a multiply already
    v = load_spec("mla").variant("deepseek_v3_kv_fp8_p64")
    points, _ = candidates(v, default_space(v, {"bracket_codes": (False, True)}))
    assert any(p.bracket_codes for p in points)
    bf16 = load_spec("mla").variant("deepseek_v3_kv_bf16_p64")
    points, _ = candidates(bf16, default_space(bf16, {"bracket_codes": (False, True)}))
    assert not any(p.bracket_codes for p in points)  # a no-op there: never timed twice
    assert Launch.from_id("t32.b2.v2.pf.pdl.bc").bracket_codes
    assert resolve(v.with_launch(Launch.from_id("t32.b2.v2.bc"))).launch.id == "t32.b2.v2.bc"


@pytest.mark.build
@SASS
def test_the_bracketed_build_has_no_divide_on_its_straight_line() -> None:
    """sm_90a, the MLA fp8 cache (v / k_scale) at t16.b4.v4 (36 values a thread): div.rn's FCHK, reciprocal and
    corrections per value leave the straight line (what is left is the one out-of-line divide of the rare path), and each value
    takes two converts instead of one (the bracket's two codes, a pair per instruction)."""
    got = sass_ops("mla", "deepseek_v3_kv_fp8_p64", ["t16.b4.v4", "t16.b4.v4.bc"], "sm_90a")
    plain, bracket = got["t16.b4.v4"], got["t16.b4.v4.bc"]
    assert plain.get("FCHK", 0) >= 32 and bracket.get("FCHK", 0) <= 1, (plain.get("FCHK"), bracket.get("FCHK"))
    assert plain.get("MUFU.RCP", 0) - bracket.get("MUFU.RCP", 0) >= 32  # one per value, against the norm's and one
    convert = "F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C"
    assert bracket.get(convert, 0) >= 2 * plain.get(convert, 0) > 0  # (and the rare paths' own converts)
    assert not any(op.startswith(("STL", "LDL")) for op in bracket), "the bracketed path must not touch local memory"


@pytest.mark.build
def test_the_bracketed_candidates_compile_for_every_target() -> None:
    """A sample of the `.bc` candidates (every value of every compiled parameter among them) of the per-tensor and the
    per-token divided stores compiles for sm_90a, sm_100a and sm_120a."""
    from launch_sample import sample_compile_failures

    for spec, name in (("mla", "deepseek_v3_kv_fp8_p64"), ("vllm_dsv32_indexer", "vllm_dsv32_indexer_fp8vllm_p64")):
        v = load_spec(spec).variant(name)
        space = default_space(v, {"bracket_codes": (False, True), "lean_math": (False, True)}, capability="12.0")
        bracketed_points = [c for c in candidates(v, space)[0] if c.bracket_codes]
        assert bracketed_points and not sample_compile_failures(v, bracketed_points)


@pytest.mark.pure
def test_the_headers_constants_are_the_ones_replayed_here() -> None:
    """The device code's bracket and dividend bound are this replay's (a wider or narrower constant there would pass
    the replay above untouched)."""
    import re

    from kernelgen.resources import include_dir

    text = (include_dir() / "kernelgen" / "numeric.cuh").read_text()

    def constant(name: str) -> str:
        found = re.findall(rf"constexpr float {name} = ([^;]+);", text)
        assert len(found) == 1, name
        return found[0]

    width = f"0x1p-{-int(np.log2(WIDTH))}f"
    assert constant("kBracketBelow") == f"1.0f - {width}" and constant("kBracketAbove") == f"1.0f + {width}"
    assert constant("kBracketMaxDividend") == f"0x1p{int(np.log2(MAX_DIVIDEND))}f"


# The kernels with a divided e4m3 store (each variant or group, and launches of it), for the GPU check below.
DIVIDED = (("mla", "deepseek_v3_kv_fp8_p64", ("t16.b4.v4", "t32.b2.v2")),
           ("mla", "deepseek_v3_layer_fp8", ("t32.b2.v2",)),
           ("attention_prep", "llama3_8b_vllm_fp8", ("t8.b8.v8", "t32.b2.v4")),
           ("vllm_dsv32_indexer", "vllm_dsv32_indexer_fp8vllm_p64", ("t2.b32.v8", "t32.b2.v4")),
           ("vllm_dsv32_indexer", "vllm_dsv32_indexer_fp8vllmue8m0_p64", ("t8.b8.v8",)))
# Per-tensor scales the bracket must leave to the divide (0, negative, inf, NaN, outside [2^-60, 2^60], subnormal) or
# may take (the range's ends, 1, 3, tiny, a model's); None keeps the inputs' own.
SCALES = (None, 0.0, -1.0, math.inf, math.nan, 2.0 ** -61, 2.0 ** 61, 1e-40, 2.0 ** -60, 2.0 ** 60, 1.0, 3.0, 1e-30,
          0.0173)


def _awkward(inputs: dict, kind: str) -> None:
    """In place: rows with NaN, inf, -0, dividends past 2^60 and near FLT_MAX ('rows'); weights of 1e30 and 3e38
    ('weights'); every value an e4m3 rounding midpoint or near one ('midpoints')."""
    x = inputs["qkv"] if "qkv" in inputs else inputs["x"]
    if kind == "rows":
        x[1, 5], x[2, 7], x[13, 2] = math.nan, math.inf, -math.inf
        x[3], x[5], x[9], x[11] = 1e30, -0.0, -2e18, 3.1875
        x[4, :64], x[7, 3:9], x[14, 10:] = 3e38, 1e19, 5e37
    elif kind == "weights":
        for name, t in inputs.items():
            if name.endswith("weight") and t is not None:
                t[:48], t[48:60] = 1e30, 3e38
    elif kind == "midpoints":
        mids = torch.tensor([1.0625, 0.0029296875, 0.0009765625, 432.0, 3.1875, 0.013671875, 13.0, 104.0],
                            device=x.device)
        x.copy_(mids[torch.arange(x.numel(), device=x.device) % 8].view_as(x))


@pytest.mark.gpu
def test_bracketed_launches_write_their_twins_bytes_on_awkward_rows() -> None:
    """Every `.bc` launch of the divided stores (with and without `.lm`) writes the bytes of the same launch without
    `.bc`, on rows the tuner's random inputs never hold: NaN and inf values, dividends past 2^60 and near FLT_MAX,
    huge weights, exact e4m3 midpoints, and per-tensor scales outside the bracket's range (0, negative, inf, NaN,
    2^+-61, subnormal) as well as at its ends."""
    from dataclasses import replace

    from kernelgen.build import toolchain
    from kernelgen.build.lifecycle import build
    from kernelgen.codegen.launch import ALL_TOKENS, plan_routes
    from kernelgen.measure.inputs import call_inputs, group_inputs
    from kernelgen.runtime.op import Op

    kernels, plans, launches = [], [], []
    for spec, name, ids in DIVIDED:
        k = load_spec(spec).kernel(name)
        ls = [Launch.from_id(i + flags) for i in ids for flags in ("", ".bc", ".lm", ".lm.bc")]
        kernels.append(k), launches.append(ls), plans.append(plan_routes(k, [(ALL_TOKENS, ls[0])], tuple(ls)))
    artifacts = build(kernels, toolchain.detect(), toolchain.resolve_archs(None), None, launch_plans=plans)
    differ = []
    for k, artifact, ls in zip(kernels, artifacts, launches):
        op = Op(artifact)
        index = {c.id: i for i, c in enumerate(op.plan.configs)}
        for kind in ("random", "rows", "weights", "midpoints"):
            for scale in SCALES:
                for seed in (1, 2):
                    written = {}
                    for launch in ls:
                        # made afresh for each launch (the same seed: the same values), not cloned: a clone of a
                        # packed K/V pool's half is a tensor of its own, which the op refuses as no pool's half
                        mine = group_inputs(k, 64, 16, "cuda", seed)
                        _awkward(mine, kind)
                        for name, t in mine.items():
                            if scale is not None and name.endswith("scale") and t is not None:
                                t.fill_(scale)
                        op.launch_config(index[launch.instance.id], False, op.tensors(call_inputs(mine)), 1e-6)
                        written[launch.id] = [t for t in mine.values() if t is not None and t.dtype == torch.uint8]
                    for launch in ls:
                        if launch.bracket_codes:
                            twin = replace(launch, bracket_codes=False).id
                            if any(not torch.equal(a, b) for a, b in zip(written[launch.id], written[twin])):
                                differ.append(f"{k.name} {launch.id} {kind} scale={scale} seed={seed}")
    assert not differ, differ[:5]
