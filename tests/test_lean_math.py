"""launch.lean_math: the stores' correctly rounded library operations, computed lean, as a tuner candidate.

Where a store divides every value by a scale shared by many values (vLLM's per-tensor k_scale, its indexer's per-token
scale, V4.1 fp4's group scales), CUDA's div.rn runs per value a reciprocal, two quotient corrections, a range check
(FCHK) and a branch around a slow-path call. With the flag the reciprocal is RN(1 / b) once (rcp_rn_in_range, equal
to __frcp_rn over [2^-125, 2^125): tests/test_numeric_gpu.py) and each value takes the two corrections and an
integer range check; a value or divisor outside [2^-60, 2^60] sends the whole array through div.rn. fp8_ds_mla's
exp2f(ceilf(log2f(x))) group scale is read off x's bits where log2f's rounding cannot move the ceiling, and a row
rounded through bf16 takes one paired convert per two values. Same bytes: the sequence is replayed here in exact
arithmetic on hard quotients (near rounding midpoints), the GPU tier runs it beside the IEEE ops for every float,
and the tuner checks each `.lm` candidate's bytes against the reference before it may choose one."""
from __future__ import annotations

import numpy as np
import pytest

from kernelgen.codegen.launch import resolve
from kernelgen.spec.launchparams import BY_NAME
from kernelgen.spec.parse import load_spec
from kernelgen.spec.variant import Launch
from kernelgen.tune.space import candidates, default_space, group_candidates, group_space

from sass_ops import SASS, sass_ops
from test_numeric import _round_sum_to_f32

F32 = np.float32
LO, HI = 2.0 ** -60, 2.0 ** 60  # numeric.cuh kLeanDivLo / kLeanDivHi


def _rn(x: np.ndarray) -> np.ndarray:
    """RN_f32 of float64 values that are exact (one rounding)."""
    return x.astype(F32)


def correctly_rounded(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """RN_f32(a / b): float64's quotient cast, then moved to the neighbour whose exact remainder is smaller where the
    cast rounded twice (products of two floats are exact in float64, and a - q b is exact for q near a / b)."""
    q = _rn(a.astype(np.float64) / b.astype(np.float64))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    for _ in range(2):
        err = np.abs(a64 - q.astype(np.float64) * b64)
        up, down = np.nextafter(q, F32(np.inf)), np.nextafter(q, F32(-np.inf))
        err_up = np.abs(a64 - up.astype(np.float64) * b64)
        err_down = np.abs(a64 - down.astype(np.float64) * b64)
        even = (q.view(np.uint32) & 1) == 0
        q = np.where((err_up < err) | ((err_up == err) & ~even), up,
                     np.where((err_down < err) | ((err_down == err) & ~even), down, q))
    return q


def lean_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numeric.cuh div_corrected(a, b, RN(1 / b)) step by step, each step rounded once as the FMA rounds it."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    y = correctly_rounded(np.ones_like(b), b).astype(np.float64)
    q = _rn(a64 * y)
    q0 = q
    for _ in range(2):
        r = _rn(a64 - q.astype(np.float64) * b64)  # the remainder: exact in float64 (q within ulps of a / b)
        q = _round_sum_to_f32(q.astype(np.float64), r.astype(np.float64) * y)
    return np.copysign(q, q0)  # numpy's sums of opposite zeros give +0 as the FMA does; the device puts q0's sign back


def _floats(rng: np.random.Generator, n: int, lo_exp: int, hi_exp: int) -> np.ndarray:
    """Random float32 magnitudes with exponents in [lo_exp, hi_exp] and uniform mantissas."""
    bits = ((rng.integers(lo_exp, hi_exp + 1, n) + 127) << 23) | rng.integers(0, 1 << 23, n)
    return bits.astype(np.uint32).view(F32)


def hard_cases(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) with a / b within an ulp of a float32 rounding midpoint, b with every kind of mantissa (random, all ones,
    none), a of both signs, all inside the fast path's range."""
    rng = np.random.default_rng(seed)
    b = _floats(rng, n, -35, 35)
    b[: n // 8] = (b[: n // 8].view(np.uint32) | 0x7FFFFF).view(F32)  # mantissa all ones
    b[n // 8: n // 4] = (b[n // 8: n // 4].view(np.uint32) & 0xFF800000).view(F32)  # powers of two
    q = _floats(rng, n, -19, 19).astype(np.float64)
    ulp = np.spacing(q.astype(F32)).astype(np.float64)
    midpoint = q + ulp * rng.choice([0.5, -0.5, 0.25, 0.0], n)
    a = _rn(midpoint * b.astype(np.float64))
    return np.where(rng.random(n) < 0.5, -a, a).astype(F32), b


@pytest.mark.pure
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_lean_divide_is_correctly_rounded_near_every_kind_of_midpoint(seed: int) -> None:
    a, b = hard_cases(seed, 1 << 20)
    assert np.all((np.abs(a) >= LO) & (np.abs(a) <= HI) & (b >= LO) & (b <= HI))
    a[:4] = np.array([0.0, -0.0, 0.0, -0.0], F32)  # zero dividends keep their sign (e4m3 writes -0 as 0x80)
    want, got = correctly_rounded(a, b), lean_div(a, b)
    wrong = np.flatnonzero(want.view(np.uint32) != got.view(np.uint32))
    assert wrong.size == 0, f"{wrong.size} quotients differ, e.g. {a[wrong[0]]!r} / {b[wrong[0]]!r}"


@pytest.mark.pure
def test_the_replay_catches_a_divide_with_one_correction() -> None:
    """The check can fail: one correction step instead of two misrounds some of the hard quotients."""
    a, b = hard_cases(5, 1 << 18)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    y = correctly_rounded(np.ones_like(b), b).astype(np.float64)
    q0 = _rn(a64 * y)
    assert np.any(q0.view(np.uint32) != correctly_rounded(a, b).view(np.uint32))


@pytest.mark.pure
def test_the_range_constants_are_the_bits_of_two_to_the_sixty() -> None:
    from kernelgen.resources import include_dir

    text = (include_dir() / "kernelgen" / "numeric.cuh").read_text()
    for value, name in ((LO, "kLeanDivLo"), (HI, "kLeanDivHi")):
        assert f"constexpr uint32_t {name} = {np.array(value, F32).view(np.uint32):#010X}u".replace("0X", "0x") in text


@pytest.mark.pure
def test_the_table_holds_lean_math_as_a_compiled_flag() -> None:
    p = BY_NAME["lean_math"]
    assert p.kind is bool and p.compiled and p.cpp == "kLeanMath" and p.token == "lm" and not p.capabilities
    lid = "t32.b2.v2.pf.pdl.er.lm.mb4"
    assert Launch.from_id(lid).lean_math and Launch.from_id(lid).id == lid
    assert not Launch.from_id("t32.b2.v2.pf").lean_math  # ids written before the parameter keep their meaning


@pytest.mark.pure
@pytest.mark.parametrize("spec, name, offered", [
    ("mla", "deepseek_v3_kv_fp8_p64", True),  # vLLM's k_scale divide and the bf16 rounding
    ("mla", "deepseek_v3_kv_fp8dsmla_p64", True),  # fp8_ds_mla's power-of-two group scales
    ("mla", "deepseek_v3_q_absorbed_fp8", True),  # e4m3 codes of a row already times RN(1 / q_scale)
    ("gqa_kv", "llama3_8b_k_fp8_p16", True),
    ("dsv4_mainkv", "dsv4_mainkv_v41_fp4_p64", True),  # V4.1 fp4's divided e4m3 group scales
    ("dsv4_mainkv", "dsv4_mainkv_v41_p64", True),  # SGLang's V4.1 rounds the row through bf16
    ("mla", "deepseek_v3_kv_bf16_p64", False),
    ("dsv4_mainkv", "dsv4_mainkv_fp8mla_p64", False),
    ("dsv4_indexer", "dsv4_indexer_fp8_p64", False),
])
def test_the_space_offers_it_only_where_a_store_has_such_an_operation(spec: str, name: str, offered: bool) -> None:
    v = load_spec(spec).variant(name)
    valid, _ = candidates(v, default_space(v))
    assert {c.lean_math for c in valid} == ({False, True} if offered else {False})


@pytest.mark.pure
def test_a_group_is_offered_it_where_any_member_has_use_for_it() -> None:
    """deepseek_v3_layer_fp8's first member is the fp8 query; the flag is offered for the group through its KV member
    as well (a flag's value that one member has no use for leaves that member's code as it is)."""
    g = resolve(load_spec("mla").group("deepseek_v3_layer_fp8"))
    grouped, _ = group_candidates(g, group_space(g))
    assert any(c.lean_math for c in grouped)


@pytest.mark.build
@SASS
def test_the_lean_build_drops_the_per_value_range_checks_and_converts() -> None:
    """sm_90a, the launch the H200 record chose for the MLA fp8 cache at small N: div.rn's FCHK per value (18) becomes
    the one in the out-of-range call, and the bf16 rounding's 18 single converts become 9 paired ones."""
    got = sass_ops("mla", "deepseek_v3_kv_fp8_p64", ["t32.b2.v2.pf", "t32.b2.v2.pf.lm"], "sm_90a")
    plain, lean = got["t32.b2.v2.pf"], got["t32.b2.v2.pf.lm"]
    assert plain.get("FCHK", 0) >= 16 and lean.get("FCHK", 0) <= 1, (plain.get("FCHK"), lean.get("FCHK"))
    assert plain.get("F2F.BF16.F32", 0) >= 16 and lean.get("F2F.BF16.F32", 0) == 0
    assert not any(op.startswith(("STL", "LDL")) for op in lean), "the lean path must not touch local memory"


@pytest.mark.build
@SASS
def test_the_lean_ds_mla_scale_calls_no_libm_on_its_straight_line() -> None:
    """fp8_ds_mla's exp2f(ceilf(log2f(x))) per group becomes integer work on x's bits; the library calls stay in one
    out-of-line function (exp2f's MUFU.EX2 and ceilf's FRND.CEIL once, against once per group)."""
    got = sass_ops("mla", "deepseek_v3_kv_fp8dsmla_p64", ["t32.b2.v2.pf", "t32.b2.v2.pf.lm"], "sm_90a")
    plain, lean = got["t32.b2.v2.pf"], got["t32.b2.v2.pf.lm"]
    for op in ("MUFU.EX2", "FRND.CEIL"):
        assert plain.get(op, 0) >= 4 and lean.get(op, 0) <= 1, (op, plain.get(op), lean.get(op))


# Per flag that is a no-op elsewhere (LaunchParam.noop_elsewhere): a kernel it is not offered to, a launch, and the
# target where the flag would otherwise change code (hw_convert's instruction exists on sm_100a only).
NOOP_EXAMPLES = {
    "lean_math": ("mla", "deepseek_v3_kv_bf16_p64", "t32.b2.v2.pf", "sm_90a"),
    "bracket_codes": ("mla", "deepseek_v3_kv_bf16_p64", "t32.b2.v2.pf", "sm_90a"),
    "rope_rows": ("attention_prep", "qwen3_8b_bf16_q", "t4.b16.v8", "sm_90a"),
    "hw_convert": ("mla", "deepseek_v3_kv_bf16_p64", "t32.b2.v2.pf", "sm_100a"),
}


@pytest.mark.build
@SASS
@pytest.mark.parametrize("flag", sorted(NOOP_EXAMPLES))
def test_elsewhere_the_flag_is_a_no_op(flag: str) -> None:
    """A kernel the flag is not offered to (a store with no such operation, one position stream, no ties-even e2m1)
    compiles the same machine code with and without it; every flag the table marks a no-op elsewhere has its case."""
    from kernelgen.spec.launchparams import BY_NAME, LAUNCH_PARAMS

    assert set(NOOP_EXAMPLES) == {p.name for p in LAUNCH_PARAMS if p.noop_elsewhere}
    spec, name, base, arch = NOOP_EXAMPLES[flag]
    param = BY_NAME[flag]
    assert param.values(load_spec(spec).variant(name)) == (False,), "the example must be a kernel it is not offered to"
    got = sass_ops(spec, name, [base, f"{base}.{param.token}"], arch)
    assert got[base] == got[f"{base}.{param.token}"]


@pytest.mark.pure
def test_a_spec_wide_tune_section_times_the_flag_only_where_it_changes_the_code() -> None:
    """`tune: {lean_math: [false, true]}` (or rope_rows, hw_convert: the flags that are a no-op elsewhere) keeps the
    other value for the kernels that have use for it and the default alone for the rest."""
    from kernelgen.spec.launchparams import LAUNCH_PARAMS

    assert {p.name for p in LAUNCH_PARAMS if p.noop_elsewhere} == {"hw_convert", "rope_rows", "lean_math",
                                                                   "bracket_codes"}
    mla = load_spec("mla")
    bf16, fp8 = mla.variant("deepseek_v3_kv_bf16_p64"), mla.variant("deepseek_v3_kv_fp8_p64")
    assert default_space(bf16, {"lean_math": (False, True)}).get("lean_math") == (False,)
    assert default_space(bf16, {"lean_math": (True,)}).get("lean_math") == (False,)
    assert default_space(fp8, {"lean_math": (False, True)}).get("lean_math") == (False, True)
    assert default_space(fp8, {"lean_math": (False,)}).get("lean_math") == (False,)


@pytest.mark.build
@SASS
def test_the_lean_per_tensor_fp8_store_drops_the_multiply_by_one() -> None:
    """A per-tensor fp8 K append (the row already times the scale): one FMUL per stored value fewer (t16.b4.v8 holds 8
    values a thread), nothing else added."""
    got = sass_ops("gqa_kv", "llama3_8b_k_fp8_p16", ["t16.b4.v8.pf", "t16.b4.v8.pf.lm"], "sm_90a")
    plain, lean = got["t16.b4.v8.pf"], got["t16.b4.v8.pf.lm"]
    assert plain.get("FMUL", 0) - lean.get("FMUL", 0) == 8
    assert sum(plain.values()) - sum(lean.values()) == 8


@pytest.mark.build
def test_the_lean_candidates_compile_for_every_target() -> None:
    """A sample of the `.lm` candidates (every value of every compiled parameter among them, as the GPU tier samples)
    of the stores that use it compiles for sm_90a, sm_100a and sm_120a, the Blackwell builds with their own paths
    (hw_convert's e2m1 beside the lean divide of V4.1 fp4)."""
    from launch_sample import sample_compile_failures

    for spec, name in (("mla", "deepseek_v3_kv_fp8dsmla_p64"), ("dsv4_mainkv", "dsv4_mainkv_v41_fp4_p64")):
        v = load_spec(spec).variant(name)
        lean = [c for c in candidates(v, default_space(v, capability="12.0"))[0] if c.lean_math]
        assert not sample_compile_failures(v, lean)
