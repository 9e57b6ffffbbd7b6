"""Pure tier: the order-replaying reference computes the textbook math (checked in float64)."""
from __future__ import annotations

import math

import pytest
import torch

from kernelgen.measure import reference
from kernelgen.spec.variant import Variant

pytestmark = pytest.mark.pure


def textbook(v: Variant, x, w, b, freqs, pos, eps):
    y = x.double()
    if v.norm == "layer":
        y = y - y.mean(-1, keepdim=True)
    if v.norm != "none":
        y = y / torch.sqrt((y * y).mean(-1, keepdim=True) + eps) * w.double()
        if v.norm_bias:
            y = y + b.double()
    if v.rope_dim:
        f = freqs.double()[pos]
        rot = torch.complex(f[:, 0::2], f[:, 1::2])
        s, r = v.rope_begin, v.rope_dim
        seg = y[:, s:s + r]
        if v.rope_style == "interleaved":
            z = torch.view_as_complex(seg.reshape(len(y), -1, 2).contiguous()) * rot
            seg = torch.view_as_real(z).reshape(len(y), r)
        else:
            z = torch.complex(seg[:, :r // 2], seg[:, r // 2:]) * rot
            seg = torch.cat([z.real, z.imag], -1)
        y = torch.cat([y[:, :s], seg, y[:, s + r:]], -1)
    if v.hadamard:
        d = v.head_dim
        signs = torch.tensor([[(-1) ** bin(i & j).count("1") for j in range(d)] for i in range(d)], dtype=torch.float64)
        y = y @ signs.T / math.sqrt(d)
    return y


@pytest.mark.parametrize("v", [
    Variant("dsv4", head_dim=128, hadamard=True, store="fp8_e4m3"),
    Variant("dsv32", head_dim=128, rope_place="head", rope_style="neox", norm="layer", norm_bias=True, hadamard=True),
    Variant("d512", head_dim=512, store="fp8_flashmla"),
    Variant("d192", head_dim=192, rope_dim=32, rope_style="neox", norm="none", input_dtype="fp32"),
    Variant("d1024", head_dim=1024, rope_dim=128, rope_place="head", hadamard=True, input_dtype="fp16"),
])
def test_reference_rows_equal_textbook_math(v: Variant) -> None:
    g = torch.Generator().manual_seed(0)
    n = 33
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[v.input_dtype]
    x = (torch.randn(n, v.head_dim, generator=g) * 2).to(dtype)
    w, b = torch.randn(v.head_dim, generator=g), torch.randn(v.head_dim, generator=g)
    freqs = torch.randn(50, max(v.rope_dim, 2), generator=g)[:, :v.rope_dim].contiguous()
    pos = torch.randint(0, 50, (n,), generator=g)
    got = reference.rows(v, x, w, freqs, pos, 1e-6, b)
    want = textbook(v, x, w, b, freqs, pos, 1e-6)
    assert got.dtype == torch.float32
    assert float((got.double() - want).norm() / want.norm()) < 2e-6


@pytest.mark.parametrize("name", ["dsv4_indexer_fp8_p64", "dsv4_indexer_fp4_p64", "dsv4_mainkv_fp8mla_p64"])
def test_unmasked_store_for_benchmarks_writes_the_same_bytes(name: str) -> None:
    """The benchmark baseline's store (every row valid, no mask: one compiled graph) equals the general one,
    NaN rows included (a select, not a branch)."""
    from kernelgen.measure.inputs import workload_inputs
    from kernelgen.spec.parse import load_spec

    v = load_spec(name.rsplit("_", 2)[0]).variant(name)
    inputs = workload_inputs(v, 48, "decode", device="cpu")
    inputs["x"][3, 5] = float("nan")
    args = [inputs[k] for k in ("x", "weight", "freqs", "positions", "out_loc")]
    general, unmasked = inputs["kvcache"].clone(), inputs["kvcache"].clone()
    reference.store(v, *args, general, 1e-6, inputs["bias"])
    reference.store(v, *args, unmasked, 1e-6, inputs["bias"], all_valid=True)
    assert torch.equal(general, unmasked) and not torch.equal(general, inputs["kvcache"])


@pytest.mark.gpu
def test_compiled_benchmark_store_lowers_at_one_token() -> None:
    """torch.compile of the baseline store at N = 1 on the GPU lowers (inductor gave the [1, 1] scale a
    stride of 0 there, which broke the bytes view of a float scale; CPU inductor keeps 1) and writes the
    row eager writes, to rounding: inductor's fused float code is not bit-identical to eager's (seen on
    the H200), which is why the benchmark times this baseline and verifies the kernel against eager."""
    from kernelgen.layout.pages import pages_of
    from kernelgen.measure.inputs import workload_inputs
    from kernelgen.spec.parse import load_spec

    v = load_spec("dsv4_indexer").variant("dsv4_indexer_fp8_p64")
    inputs = workload_inputs(v, 1, "decode", device="cuda")
    args = [inputs[k] for k in ("x", "weight", "freqs", "positions", "out_loc")]
    eager, compiled = inputs["kvcache"].clone(), inputs["kvcache"].clone()
    reference.store(v, *args, eager, 1e-6, inputs["bias"], all_valid=True)
    torch._dynamo.reset()
    torch.compile(lambda cache: reference.store(v, *args, cache, 1e-6, inputs["bias"], all_valid=True),
                  dynamic=False)(compiled)
    assert not torch.equal(compiled, inputs["kvcache"])
    pages = pages_of(v)
    want, got = pages.decode(eager, inputs["out_loc"]), pages.decode(compiled, inputs["out_loc"])
    assert float((got - want).norm() / want.norm()) < 0.02


def test_lane_sums_are_pairwise_trees_split_at_a_power_of_two() -> None:
    # float32 sums where the order shows: 2^24 + 1 rounds back to 2^24 (ties to even), 2^24 + 2 is exact.
    big = float(2 ** 24)
    four = torch.tensor([[big, 1.0, 1.0, 1.0]])
    assert reference._tree_sum(four).item() == big + 2  # (big + 1) + (1 + 1); a chain gives big
    three = torch.tensor([[1.0, 1.0, big]])
    assert reference._tree_sum(three).item() == big + 2  # split 2 + 1: (1 + 1) + big; 1 + (1 + big) gives big
    # A power-of-two length is the level-by-level sum of adjacent pairs (another formulation, same tree).
    t = torch.randn(64, 16) * torch.logspace(-3, 3, 16)
    level = t
    while level.shape[-1] > 1:
        level = level[:, 0::2] + level[:, 1::2]
    assert torch.equal(reference._tree_sum(t), level[:, 0])
