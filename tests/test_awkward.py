"""Defined behaviour for awkward data, on the reference (pure tier; tests/test_gpu.py holds the kernel to
the same bytes): NaN/inf rows and rows whose sum of squares overflows become canonical NaN rows,
all-zero rows stay zero, the other rows of the batch are unaffected, duplicate slots are caught in
debug mode."""
from __future__ import annotations

import pytest
import torch

from kernelgen.layout.pages import pages_of
from kernelgen.measure import reference
from kernelgen.measure.inputs import make_inputs
from kernelgen.spec.parse import shipped_variants

pytestmark = pytest.mark.pure

ONE_PER_STORE = {v.store: v for v in shipped_variants() if v.input_dtype == "bf16" and v.heads == 1}


def awkward_inputs(v, n: int = 64) -> dict:
    inputs = make_inputs(v, n, 4, "cpu", seed=4)
    inputs["out_loc"] = torch.randperm(inputs["kvcache"].shape[0] * v.page_size)[:n]
    if v.rope_dim:
        inputs["positions"] = inputs["positions"] % inputs["freqs"].shape[0]
    x = inputs["x"]
    x[1, 3] = float("nan")
    x[2, 5] = float("inf")
    x[3, 7] = float("-inf")
    x[4, :] = 1e30 * torch.tensor([1.0, -1.0]).repeat(v.head_dim // 2)  # finite in bf16; its square overflows
    x[5, :] = 0.0
    return inputs


def store(v, inputs) -> torch.Tensor:
    cache = inputs["kvcache"].clone()
    reference.store(v, inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"], inputs["out_loc"], cache,
                    1e-6, inputs["bias"], scale=inputs["scale"])
    return cache


@pytest.mark.parametrize("store_kind", sorted(ONE_PER_STORE))
def test_nan_inf_and_overflowing_rows_become_nan_rows(store_kind: str) -> None:
    v = ONE_PER_STORE[store_kind]
    inputs = awkward_inputs(v)
    values = pages_of(v).decode(store(v, inputs), inputs["out_loc"], inputs["scale"])
    assert torch.isnan(values[1:4]).all(), "every value of a row holding NaN or inf decodes to NaN"
    if v.norm != "none":
        assert torch.isnan(values[4]).all(), "a row whose sum of squares overflows decodes to NaN"
    else:  # nothing squares a row without a norm: a huge finite row stays finite (saturated where the format does)
        assert torch.isfinite(values[4]).all()
    if v.norm != "none" and not v.norm_bias:
        assert (values[5] == 0).all(), "an all-zero row normalizes to zeros"
    clean = {k: (t.clone() if t is not None else None) for k, t in inputs.items()}
    clean["x"][1:5] = 1.0
    clean_values = pages_of(v).decode(store(v, clean), clean["out_loc"], clean["scale"])
    assert torch.equal(values[6:], clean_values[6:]), "other rows of the batch are unaffected"


def test_nan_rows_hold_canonical_bytes() -> None:
    v = ONE_PER_STORE["fp8_e4m3"]
    inputs = awkward_inputs(v)
    cache = store(v, inputs)
    layout = pages_of(v)
    slot = int(inputs["out_loc"][1])
    page, off = slot // v.page_size, slot % v.page_size
    values = cache[page, layout.field("values").offset(off):][: v.head_dim]
    scale = cache[page, layout.field("scale").offset(off):][:4]
    assert (values == 0x7F).all() and scale.tolist() == [0x00, 0x00, 0xC0, 0x7F]


def test_duplicate_slots_are_caught_in_debug_mode() -> None:
    from kernelgen import knobs
    from kernelgen.errors import LayoutMismatch
    from kernelgen.runtime.op import InputChecker

    v = ONE_PER_STORE["bf16"]
    checker = InputChecker(v, pages_of(v), 16)
    checker.no_duplicate_slots(torch.tensor([3, 4, -1, -1, 9]), 4)  # padding rows may repeat
    with knobs.scope(DEBUG="1"), pytest.raises(LayoutMismatch, match="out_loc names slot 4 more than once"):
        checker.no_duplicate_slots(torch.tensor([3, 4, 4]), 4)
