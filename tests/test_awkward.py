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


def test_duplicate_slots_check_names_the_slot_and_lets_skipped_rows_repeat() -> None:
    from kernelgen.errors import LayoutMismatch
    from kernelgen.runtime.op import InputChecker

    v = next(v for v in shipped_variants() if v.store == "bf16" and v.heads == 1 and v.page_size >= 8)
    checker = InputChecker(v, pages_of(v), 16)
    past = 4 * v.page_size  # the first slot past a pool of 4 pages: a skipped row, like out_loc < 0
    checker.no_duplicate_slots(torch.tensor([3, 4, -1, -1, 9, past, past]), 4)  # rows that write nothing may repeat
    with pytest.raises(LayoutMismatch) as err:
        checker.no_duplicate_slots(torch.tensor([3, 4, 4]), 4)
    assert str(err.value) == (f"{v.name}: out_loc names slot 4 more than once in one call; the rows' bytes could "
                              "mix: pass distinct slots (checked because KERNELGEN_DEBUG=1)")


def test_duplicate_slots_are_caught_in_debug_mode(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # noqa: ANN001
    """KERNELGEN_DEBUG gates the duplicate-slot check of an Op call, read once when the op is made: without it a
    call whose rows share a slot goes to the kernel and the check is not run; with it the check runs before the
    launch, raises, and nothing is launched. The op wraps a fake library (no GPU here): the symbol records its
    calls, and the per-call tensor checks (which want CUDA tensors) are stubbed to pass."""
    from kernelgen import knobs
    from kernelgen.build.store import Artifact
    from kernelgen.codegen.launch import default_plan
    from kernelgen.errors import LayoutMismatch
    from kernelgen.runtime import op as op_module

    v = ONE_PER_STORE["bf16"]
    launched: list[tuple] = []
    library = {v.name: lambda *args: launched.append(args), f"{v.name}_config": lambda *args: None}
    monkeypatch.setattr(op_module, "load_module", lambda path: library)
    checked: list[list[int]] = []
    real_check = op_module.InputChecker.no_duplicate_slots

    def spy(self: object, out_loc: torch.Tensor, num_pages: int) -> None:
        checked.append(out_loc.tolist())
        real_check(self, out_loc, num_pages)

    monkeypatch.setattr(op_module.InputChecker, "no_duplicate_slots", spy)
    monkeypatch.setattr(op_module.InputChecker, "check", lambda self, *args, **kw: None)
    artifact = Artifact(variant=v, key="fake", directory=tmp_path, launch_plan=default_plan(v))
    inputs = make_inputs(v, 3, 4, "cpu", seed=1)
    call = (inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"])

    with knobs.scope(DEBUG=None):
        quiet = op_module.Op(artifact)
    with knobs.scope(DEBUG="1"):
        loud = op_module.Op(artifact)
        quiet(*call, torch.tensor([3, 4, 4]), inputs["kvcache"])  # made without debug: unchecked, even now
    assert checked == [] and len(launched) == 1
    with knobs.scope(DEBUG=None):
        with pytest.raises(LayoutMismatch, match="out_loc names slot 4 more than once in one call"):
            loud(*call, torch.tensor([3, 4, 4]), inputs["kvcache"])  # made with debug: checked, even now
    assert checked == [[3, 4, 4]] and len(launched) == 1, "a refused call must not launch"
    loud(*call, torch.tensor([3, 4, 5]), inputs["kvcache"])
    assert checked == [[3, 4, 4], [3, 4, 5]] and len(launched) == 2
