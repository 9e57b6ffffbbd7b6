"""Pure tier: the independent float64 oracle accepts the reference, rounds as stated, and catches shared mistakes."""
from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from typing import Any

import pytest
import torch

from kernelgen.layout import codec
from kernelgen.layout.layout import layout_of
from kernelgen.layout.pages import write_fields
from kernelgen.measure import oracle, reference, verify
from kernelgen.measure.inputs import make_inputs
from kernelgen.measure.oracle import OracleReport, check_against_oracle
from kernelgen.spec.parse import shipped_variants
from kernelgen.spec.variant import TORCH_DTYPES, Variant

pytestmark = pytest.mark.pure

TOKENS = 256
SHIPPED = {v.name: v for v in shipped_variants()}
Writer = Callable[[Variant, dict[str, Any], torch.Tensor, float], None]


def reference_writer(v: Variant, inputs: dict[str, Any], cache: torch.Tensor, eps: float) -> None:
    reference.store(v, inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"], inputs["out_loc"], cache,
                    eps, inputs["bias"], scale=inputs["scale"])


def judge(v: Variant, writer: Writer = reference_writer, eps: float = 1e-6, x_scale: float = 1.0,
          seed: int = 3) -> OracleReport:
    """Write a poisoned cache with writer and hold it to the oracle (which always gets the true eps)."""
    inputs = make_inputs(v, TOKENS, 1, "cpu", seed=seed)
    if x_scale != 1.0:  # re-quantized to the input dtype, so writer and oracle see the same x
        inputs["x"] = (inputs["x"].double() * x_scale).to(getattr(torch, TORCH_DTYPES[v.input_dtype]))
    cache = inputs["kvcache"].clone()
    writer(v, inputs, cache, eps)
    return check_against_oracle(v, cache, inputs, eps=eps, poison=inputs["kvcache"])


# ---- (a) the replaying reference meets the textbook math on every shipped variant ----

@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_reference_passes_oracle(name: str) -> None:
    report = judge(SHIPPED[name])
    assert report.ok, report
    assert report.rows > TOKENS // 2
    # Not vacuous: values off the correctly rounded code are rare, and those more than one code
    # off (cancellation outputs, tiny next to their row) rarer still.
    code_fields = [f for f in report.fields if f.name not in ("scale", "scales")]
    codes = sum(f.checked for f in code_fields)
    assert sum(f.near for f in code_fields) <= codes // 500
    assert report.wide <= codes // 5000 + 2
    # round_norm_bf16: where a row's float32 window straddles a bf16 boundary it spans that bf16 step (2^-8)
    assert report.window < (1e-2 if SHIPPED[name].round_norm_bf16 else 1e-3)


@pytest.mark.parametrize("name", ["dsv32_indexer_bf16_p64", "dsv4_indexer_bf16_p64", "dsv4_mainkv_bf16_p64",
                                  "example_ln_neox_head", "example_d1024_r128", "example_fp8_infp32"])
def test_float32_rows_lie_inside_the_first_order_bound(name: str) -> None:
    """The bound is derived, not tuned: the float32 rows stay inside it even without SAFETY."""
    v = SHIPPED[name]
    inputs = make_inputs(v, TOKENS, 1, "cpu", seed=5)
    keep = oracle.written(v, inputs["out_loc"], inputs["positions"], inputs["kvcache"].shape[0] * v.page_size, 4096)
    pos = None if inputs["positions"] is None else inputs["positions"][keep]
    y32 = reference.rows(v, inputs["x"][keep], inputs["weight"], inputs["freqs"], pos, 1e-6, inputs["bias"])
    rows = oracle.oracle_rows(v, inputs["x"][keep], inputs["weight"], inputs["freqs"], pos, 1e-6, inputs["bias"])
    assert bool(((y32.double() - rows.value).abs() <= rows.bound() / oracle.SAFETY).all())


def test_oracle_is_independent_of_reference_and_codec() -> None:
    tree = ast.parse(inspect.getsource(oracle))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert not any(m and ("reference" in m or "codec" in m) for m in imported), imported


# ---- (b) golden rounding ----

BF16_GOLDEN = [  # float32 bits -> bf16 bits, round to nearest, ties to even
    (0x3F800000, 0x3F80),  # 1.0 exact
    (0x3F807FFF, 0x3F80),  # just below the half-way point: down
    (0x3F808000, 0x3F80),  # 1 + 2^-8, a tie: to the even code 0x3F80 (truncation agrees)
    (0x3F808001, 0x3F81),  # just above the tie: up (truncation would give 0x3F80)
    (0x3F818000, 0x3F82),  # a tie between 0x3F81 and 0x3F82: up to the even one (truncation: 0x3F81)
    (0x3F80FFFF, 0x3F81),  # up (truncation: 0x3F80)
    (0x3FFF8000, 0x4000),  # a tie above 0x3FFF (odd): carries into the exponent, 2.0
    (0x40490FDB, 0x4049),  # pi: down
    (0xC0490FDB, 0xC049),  # -pi: symmetric
    (0xBF818000, 0xBF82),  # negative tie: to even
    (0x00008000, 0x0000),  # subnormal tie between 0 and 0x0001: to even (zero)
    (0x00018000, 0x0002),  # subnormal tie between 0x0001 and 0x0002: to even
    (0x80008000, 0x8000),  # negative subnormal tie: -0
    (0x7F7FFFFF, 0x7F80),  # largest float32 rounds to +inf in bf16
]


def _f32(bits: int) -> torch.Tensor:
    return torch.tensor([bits - (1 << 32) if bits >= 1 << 31 else bits], dtype=torch.int32).view(torch.float32)


@pytest.mark.parametrize("f32_bits,bf16_bits", BF16_GOLDEN, ids=[f"{a:08x}" for a, _ in BF16_GOLDEN])
def test_bf16_golden_bits(f32_bits: int, bf16_bits: int) -> None:
    assert int(oracle.bf16_bits(_f32(f32_bits).double())[0]) == bf16_bits


def test_bf16_rounds_from_float64_without_double_rounding() -> None:
    # 1 + 2^-8 + 2^-40 is above the tie; through float32 it would become the tie and round down.
    x = torch.tensor([1 + 2.0 ** -8 + 2.0 ** -40, -(1 + 2.0 ** -8 + 2.0 ** -40)], dtype=torch.float64)
    assert oracle.bf16_bits(x).tolist() == [0x3F81, 0xBF81]
    assert int(oracle.bf16_bits(x.float().double())[0]) == 0x3F80


def test_bf16_agrees_with_torch_rne_on_random_float32() -> None:
    g = torch.Generator().manual_seed(0)
    bits = torch.randint(-(1 << 31), (1 << 31) - 1, (200_000,), generator=g, dtype=torch.int64).to(torch.int32)
    bits = bits & ~torch.tensor(0x7FFF, dtype=torch.int32) | torch.tensor(0x8000, dtype=torch.int32)  # many ties
    x = torch.cat([bits.view(torch.float32), torch.randn(200_000, generator=g)])
    x = x[torch.isfinite(x) & (x.abs() < 3e38)]
    want = x.to(torch.bfloat16).view(torch.int16).to(torch.int64) & 0xFFFF
    assert torch.equal(oracle.bf16_bits(x.double()), want)


@pytest.mark.parametrize("value,want", [
    (1.0625, 1.0),  # tie between 1.0 and 1.125: to the even mantissa
    (1.1875, 1.25),  # tie between 1.125 and 1.25: to even
    (1.0626, 1.125),
    (447.0, 448.0),
    (464.0, 448.0),  # would round to 480 (NaN in e4m3fn): saturates
    (1e9, 448.0),
    (2.0 ** -10, 0.0),  # half the smallest subnormal 2^-9: tie to zero
    (3 * 2.0 ** -10, 2.0 ** -8),  # tie between 1 and 2 subnormal steps: to even (2)
    (-1.0625, -1.0),
])
def test_e4m3_golden(value: float, want: float) -> None:
    assert float(oracle.round_to(torch.tensor([value], dtype=torch.float64), oracle.E4M3)[0]) == want


@pytest.mark.parametrize("value,want", [
    (0.25, 0.0), (0.2501, 0.5), (0.75, 0.5), (1.25, 1.0), (1.75, 1.5), (2.5, 2.0), (3.5, 3.0), (5.0, 4.0),
    (5.01, 6.0), (100.0, 6.0), (-0.75, -0.5), (-0.76, -1.0),
])
def test_e2m1_golden_threshold_rule(value: float, want: float) -> None:
    """The fp4 layout's rule: a value strictly above a midpoint takes the larger code (ties toward zero)."""
    assert float(oracle.round_to(torch.tensor([value], dtype=torch.float64), oracle.E2M1)[0]) == want


def test_ceil_log2_is_exact_at_powers_of_two() -> None:
    t = torch.tensor([1.0, 2.0 ** -20, 1.0000000001, 0.75, 6.0 / 6.0, 2.0 ** 30 * (1 - 2.0 ** -52)],
                     dtype=torch.float64)
    assert oracle.ceil_log2(t).tolist() == [0, -20, 1, 0, 0, 30]


def test_decoders_read_every_code() -> None:
    codes = torch.arange(256, dtype=torch.uint8)[None, :]
    e4m3 = oracle._decode_e4m3(codes)
    want = codes.view(torch.float8_e4m3fn).to(torch.float64)
    assert torch.equal(e4m3.isnan(), want.isnan()) and torch.equal(e4m3[~e4m3.isnan()], want[~want.isnan()])
    assert torch.equal(oracle._decode_e2m1(codes), codec.e2m1_decode(codec.unpack_nibbles(codes)).double())


# ---- (c) mistakes the replaying reference would share, caught by the oracle ----

def rows_writer(transform: Callable[[torch.Tensor], torch.Tensor]) -> Writer:
    """A writer that post-processes the reference's float32 rows before the normal encode."""
    def write(v: Variant, inputs: dict[str, Any], cache: torch.Tensor, eps: float) -> None:
        y = transform(reference.rows(v, inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"], eps,
                                     inputs["bias"]))
        keep = reference.written_rows(v, inputs["out_loc"], inputs["positions"], inputs["freqs"], cache)
        loc = torch.where(keep, inputs["out_loc"].long(), -1)
        write_fields(layout_of(v), cache, loc, codec.encode(layout_of(v), y, v.round_through_bf16))
    return write


def truncate_to_bf16(y: torch.Tensor) -> torch.Tensor:
    """Chop the low 16 bits: on the bf16 grid already, so the encoder's own rounding keeps it."""
    return (y.view(torch.int32) & ~torch.tensor(0xFFFF, dtype=torch.int32)).view(torch.float32)


def drop_eps(v: Variant, inputs: dict[str, Any], cache: torch.Tensor, eps: float) -> None:
    reference_writer(v, inputs, cache, 0.0)


def flip_sin(v: Variant, inputs: dict[str, Any], cache: torch.Tensor, eps: float) -> None:
    freqs = inputs["freqs"].clone()
    freqs[:, 1::2] = -freqs[:, 1::2]
    reference_writer(v, {**inputs, "freqs": freqs}, cache, eps)


def assert_caught(report: OracleReport, fields: tuple[str, ...]) -> None:
    assert not report.ok, report
    for name in fields:
        assert report.violations[name] > 0, report


SMALL_NORM = {"eps": 1e-2, "x_scale": 1e-4}  # mean(x^2) ~ 1e-7: eps dominates, so dropping it shows
DROP_EPS = [("dsv4_indexer_bf16_p64", ("values",)), ("dsv32_indexer_fp8_p64", ("scale",)),
            ("dsv4_indexer_fp4_p64", ("scales",)), ("dsv4_mainkv_fp8mla_p64", ("scales", "rope"))]


@pytest.mark.parametrize("name,fields", DROP_EPS)
def test_dropped_eps_is_caught(name: str, fields: tuple[str, ...]) -> None:
    v = SHIPPED[name]
    assert judge(v, **SMALL_NORM).ok  # the small-norm inputs themselves pass
    assert_caught(judge(v, drop_eps, **SMALL_NORM), fields)


TRUNCATE = [("dsv4_indexer_bf16_p64", ("values",)), ("dsv32_indexer_bf16_p64", ("values",)),
            ("dsv4_mainkv_fp8mla_p64", ("rope",)), ("dsv4_mainkv_fp8mla_bfround_p64", ("rope",)),
            ("example_ln_neox_head", ("values",))]


@pytest.mark.parametrize("name,fields", TRUNCATE)
def test_truncating_to_bf16_is_caught(name: str, fields: tuple[str, ...]) -> None:
    report = judge(SHIPPED[name], rows_writer(truncate_to_bf16))
    assert_caught(report, fields)
    assert report.violations[fields[0]] > report.checked // 20  # about half the values, not a stray few


ROPE_SIGN = [("dsv4_indexer_bf16_p64", ("values",)), ("dsv32_indexer_bf16_p64", ("values",)),
             ("dsv4_indexer_fp8_p64", ("values",)), ("dsv4_mainkv_fp8mla_p64", ("rope",)),
             ("example_fp4_inbf16", ("values",))]


@pytest.mark.parametrize("name,fields", ROPE_SIGN)
def test_rope_sin_sign_flip_is_caught(name: str, fields: tuple[str, ...]) -> None:
    assert_caught(judge(SHIPPED[name], flip_sin), fields)


@pytest.mark.parametrize("name", ["dsv4_indexer_fp8_p64", "dsv32_indexer_fp8_p64", "example_fp8_infp32",
                                  "example_d192_norope"])
def test_scale_off_by_one_part_in_448_is_caught(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec, "E4M3_MAX", 447.0)  # the writer's scale becomes max(amax, 1e-4) / 447
    assert_caught(judge(SHIPPED[name]), ("scale",))


@pytest.mark.parametrize("name,fields", [("dsv4_indexer_fp4_p64", ("scales",)),
                                         ("dsv4_mainkv_fp8mla_p64", ("scales", "nope"))])
def test_ue8m0_exponent_one_low_is_caught(name: str, fields: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    exact = codec.ceil_log2
    monkeypatch.setattr(codec, "ceil_log2", lambda t: exact(t) - 1)  # floor where ceil was meant
    assert_caught(judge(SHIPPED[name]), fields)


HADAMARD = [("dsv4_indexer_bf16_p64", ("values",)), ("dsv32_indexer_fp8_p64", ("scale",)),
            ("dsv4_indexer_fp4_p64", ("scales",)), ("example_ln_neox_head", ("values",))]


@pytest.mark.parametrize("name,fields", HADAMARD)
def test_hadamard_without_its_scale_is_caught(name: str, fields: tuple[str, ...],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Variant, "hadamard_scale", property(lambda self: 1.0))  # oracle uses its own 1/sqrt(d)
    assert_caught(judge(SHIPPED[name]), fields)


def test_the_replaying_check_misses_what_the_oracle_catches() -> None:
    """Why the oracle exists: when kernel and reference share a mistake, verify.compare passes."""
    v = SHIPPED["dsv4_indexer_bf16_p64"]
    inputs = make_inputs(v, TOKENS, 1, "cpu", seed=3)
    kernel, ref = inputs["kvcache"].clone(), inputs["kvcache"].clone()
    for cache in (kernel, ref):
        rows_writer(truncate_to_bf16)(v, inputs, cache, 1e-6)
    assert verify.compare(v, kernel, ref, inputs["kvcache"], inputs).ok
    assert not check_against_oracle(v, kernel, inputs, poison=inputs["kvcache"]).ok
