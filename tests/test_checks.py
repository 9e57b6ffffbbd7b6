"""Unit tier: the argument-check table (codegen/checks.py) is what both the generated C++ symbol and
the Python op apply, in the same order and with the same words."""
from __future__ import annotations

import re

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from kernelgen.codegen import checks
from kernelgen.codegen.launch import default_plan, resolve
from kernelgen.codegen.render import render_variant, x_align
from kernelgen.errors import LayoutMismatch
from kernelgen.layout.layout import layout_of
from kernelgen.layout.pages import pages_of
from kernelgen.runtime.op import InputChecker
from kernelgen.spec.parse import load_spec, shipped_variants

pytestmark = pytest.mark.pure

GOT = "<GOT>"


def _rendered_messages(source: str, name: str) -> list[tuple[str, str]]:
    """(condition, message with the got-expression replaced by GOT) of each check in the generated function."""
    body = source.split(f"void {name}_check(")[1].split("\n}\n")[0] + "\n"
    out = []
    for cond, stream in re.findall(r"  if \(!\((.*?)\)\)\n\s+TVM_FFI_THROW\(ValueError\) << (.*?);\n", body, re.DOTALL):
        parts = [p.strip() for p in stream.split(" << ")]
        text = "".join(bytes(p[1:-1], "utf-8").decode("unicode_escape") if p.startswith('"') else GOT for p in parts)
        out.append((cond, text))
    return out


@pytest.mark.parametrize("v", shipped_variants(), ids=lambda v: v.name)
def test_generated_symbol_checks_the_table_in_order_with_the_same_words(v) -> None:
    v = resolve(v)
    table = checks.table(v, layout_of(v), x_align(v, default_plan(v)))
    rendered = _rendered_messages(render_variant(v), v.name)
    assert [text for _, text in rendered] == [c.text(v.name, GOT) for c in table]
    assert [cond for cond, _ in rendered] == [checks.cpp_condition(c, v.elem_bytes) for c in table]


def test_a_message_with_quotes_survives_the_cpp_string() -> None:
    c = checks.Check("x", "cuda", 'x must be "on" a \\ CUDA device')
    literal = checks.cpp_message(c, "v").split(" << ")[0]
    assert bytes(literal[1:-1], "utf-8").decode("unicode_escape") == 'v: x must be "on" a \\ CUDA device, got '


def _checker(spec: str, name: str) -> InputChecker:
    v = resolve(load_spec(spec).variant(name))
    return InputChecker(v, pages_of(v), x_align(v, default_plan(v)))


def _fake_good(n: int = 8) -> list[torch.Tensor]:
    dev = "cuda"  # fake CUDA tensors: no GPU needed, no storage
    return [torch.empty(n, 128, dtype=torch.bfloat16, device=dev), torch.empty(128, device=dev),
            torch.empty(128, device=dev), torch.empty(16, 64, device=dev), torch.empty(n, dtype=torch.long, device=dev),
            torch.empty(n, dtype=torch.int32, device=dev), torch.empty(3, 8448, dtype=torch.uint8, device=dev)]


def test_python_applies_the_first_failing_check_and_every_check_can_fail() -> None:
    checker = _checker("dsv32_indexer", "dsv32_indexer_fp8_p64")  # LayerNorm + bias + RoPE: every argument used
    kinds: set[tuple[str, str]] = set()
    with FakeTensorMode():
        good = _fake_good()
        checker.check(*good, metadata_only=True)
        def t(shape: tuple[int, ...], dtype: torch.dtype = torch.float32, strides: tuple[int, ...] | None = None,
              device: str = "cuda") -> torch.Tensor:  # views of fake CUDA tensors need CUDA torch: build them
            return torch.empty_strided(shape, strides or torch.empty(shape, device="meta").stride(), dtype=dtype,
                                       device=device)

        bf16, i32, i64, u8 = torch.bfloat16, torch.int32, torch.int64, torch.uint8
        bad = [(0, t((8, 128))), (0, t((8, 64), bf16)), (0, t((8, 128), bf16, (1, 8))), (0, t((8, 128), bf16, (129, 1))),
               (5, t((3,), i32)), (5, t((8,))), (5, t((8,), i32, (2,))), (5, t((8,), i32, device="cuda:1")),
               (1, t((128,), torch.half)), (1, t((64,))), (1, t((128,), strides=(2,))), (1, t((128,), device="cuda:1")),
               (2, t((128,), bf16)), (2, t((128,), device="cuda:1")), (2, t((128,), strides=(2,))),
               (3, t((16, 32))), (3, t((16, 64), torch.double)), (3, t((16, 64), strides=(1, 16))),
               (3, t((16, 64), device="cuda:1")),
               (4, t((2,), i64)), (4, t((8,))), (4, t((8,), i64, (2,))), (4, t((8,), i64, device="cuda:1")),
               (6, t((3, 16384), u8)), (6, t((3, 8448), torch.int8)), (6, t((3 * 8448,), u8)),
               (6, t((3, 8448), u8, (16896, 1))), (6, t((3, 8448), u8, device="cuda:1"))]
        for i, tensor in bad:
            args = list(good)
            args[i] = tensor
            failed = checker.first_failure(*args, metadata_only=True)
            assert failed is not None and failed.arg == checks.ARGS[i], (checks.ARGS[i], failed)
            kinds.add((failed.arg, failed.kind))
            with pytest.raises(LayoutMismatch) as info:
                checker.check(*args, metadata_only=True)
            assert str(info.value).startswith(f"dsv32_indexer_fp8_p64: {failed.message.split('{got}')[0]}")
    # every check but the address ones (fake tensors have none) and x's device (CPU test below) was hit
    expected = {(c.arg, c.kind) for c in checker.checks if c.kind not in ("aligned", "cuda")}
    assert kinds == expected, expected - kinds


def test_python_words_for_wrong_device_and_misaligned_addresses() -> None:
    checker = _checker("dsv4_indexer", "dsv4_indexer_fp8_p64")
    x = torch.zeros(4, 128, dtype=torch.bfloat16)
    args = [x, torch.ones(128), None, torch.zeros(16, 64), torch.zeros(4, dtype=torch.long), torch.arange(4),
            pages_of(checker.v).allocate(2)]
    with pytest.raises(LayoutMismatch, match=r"^dsv4_indexer_fp8_p64: x must be on a CUDA device, got "
                                             r"bfloat16 \[4, 128\] on cpu$"):
        checker.check(*args)
    aligned = next(c for c in checker.checks if c.arg == "weight" and c.kind == "aligned")
    shifted = torch.zeros(129)[1:]
    assert not checker._holds(aligned, shifted, x)
    assert checker._got(aligned, shifted) == "an address 4 bytes past a 16-byte boundary"
    with pytest.raises(LayoutMismatch, match="weight must be a torch tensor, got NoneType"):
        checker.check(x, None, None, *args[3:])
