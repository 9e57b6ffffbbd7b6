"""Build tier (nvcc, no GPU): the compiled symbol refuses each bad tensor with the same words as the
Python op, character for character. CPU tensors reach every check but the last one (x on a CUDA
device), so the whole table runs here; a C++ caller's DLTensors (null strides, a byte_offset) too."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from kernelgen.build import toolchain
from kernelgen.errors import LayoutMismatch
from kernelgen.runtime.loader import load
from kernelgen.runtime.op import Op

pytestmark = pytest.mark.build


@pytest.fixture(scope="module")
def op(tmp_path_factory: pytest.TempPathFactory) -> Op:
    # LayerNorm with bias and RoPE: every argument is used
    return load("dsv32_indexer", "dsv32_indexer_fp8_p64", arch="sm_90a",
                cache_dir=str(tmp_path_factory.mktemp("checks-symbol-cache")))


def _good(n: int = 8) -> list[torch.Tensor]:
    return [torch.randn(n, 128).bfloat16(), torch.ones(128), torch.zeros(128), torch.randn(16, 64),
            torch.zeros(n, dtype=torch.int64), torch.arange(n, dtype=torch.int32), torch.zeros(3, 8448, dtype=torch.uint8)]


def _cases() -> list[tuple[int, torch.Tensor]]:
    x, w, b, f, p, loc, cache = _good()
    return [(0, x.float()), (0, x[:, :64]), (0, x.t().contiguous().t()), (0, x.reshape(-1)[4:4 + 7 * 128].view(7, 128)),
            (0, torch.randn(8, 129).bfloat16()[:, :128]), (0, x.half()), (0, x.to(torch.float8_e4m3fn)),
            (5, loc[:3]), (5, loc.float()), (5, loc.repeat(2)[::2]), (5, loc.to(torch.uint32)),
            (1, w.half()), (1, w[:64]), (1, w.repeat(2)[::2]), (1, torch.zeros(129)[1:]), (1, w.to(torch.complex64)),
            (2, b.bfloat16()), (2, b.repeat(2)[::2]), (2, torch.zeros(130)[2:]),
            (3, f[:, :32]), (3, f.double()), (3, f.t().contiguous().t()), (3, torch.zeros(16 * 64 + 1)[1:].view(16, 64)),
            (4, p[:2]), (4, p.float()), (4, p.repeat(2)[::2]), (4, p.bool()),
            (6, torch.zeros(3, 16384, dtype=torch.uint8)), (6, cache.view(torch.int8)), (6, cache.view(-1)),
            (6, cache.view(torch.float8_e4m3fn)), (6, torch.zeros(3, 2 * 8448, dtype=torch.uint8)[:, :8448]),
            (6, cache.view(-1)[4:4 + 2 * 8448].view(2, 8448)), (6, cache.view(torch.uint16)),
            (-1, x)]  # everything right but the device: the last check


def test_symbol_and_python_say_the_same_words_for_every_check(op: Op) -> None:
    hit = set()
    for i, bad in _cases():
        args = _good()
        if i >= 0:
            args[i] = bad
        if args[0].shape[0] != 8:  # the rows of x decide N
            args[4], args[5] = args[4][:args[0].shape[0]], args[5][:args[0].shape[0]]
        failed = op.checker.first_failure(*args)
        assert failed is not None
        hit.add((failed.arg, failed.kind))
        with pytest.raises(LayoutMismatch) as python_said:
            op.checker.check(*args)
        with pytest.raises(Exception) as symbol_said:
            op.launch(*args, None, 1e-6)
        assert type(symbol_said.value).__name__ == "ValueError"
        assert str(symbol_said.value) == str(python_said.value), (i, bad.dtype, list(bad.shape))
        with pytest.raises(LayoutMismatch) as op_said:  # the op's own refusal: the same words again
            op(args[0], args[1], args[3], args[4], args[5], args[6], bias=args[2])
        assert str(op_said.value) == str(python_said.value)
    # every check but "on x's device" (one CPU has one device: tests/test_checks.py covers those on fake tensors)
    expected = {(c.arg, c.kind) for c in op.checker.checks if c.kind != "device"}
    assert hit == expected, expected - hit


HARNESS = r'''
#include <dlpack/dlpack.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

// A C++ caller's tensors: compact ones with null strides, one with a byte_offset.
struct Host {
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  DLTensor t{};
  Host(std::vector<int64_t> s, uint8_t code, uint8_t bits, uint64_t offset = 0) : shape(s) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    bytes.resize(n * bits / 8 + offset + 64);
    uintptr_t base = (reinterpret_cast<uintptr_t>(bytes.data()) + 63) & ~uintptr_t(63);
    t.data = reinterpret_cast<void*>(base);
    t.device = {kDLCPU, 0};
    t.ndim = static_cast<int32_t>(shape.size());
    t.dtype = {code, bits, 1};
    t.shape = shape.data();
    t.strides = nullptr;
    t.byte_offset = offset;
  }
};

int main(int argc, char** argv) {
  auto module = tvm::ffi::Module::LoadFromFile(argv[1]);
  auto fn = module->GetFunction(argv[2]).value();
  const uint64_t weight_offset = std::stoull(argv[3]);
  Host x({8, 128}, kDLBfloat, 16), w({128}, kDLFloat, 32, weight_offset), b({128}, kDLFloat, 32),
      f({16, 64}, kDLFloat, 32), p({8}, kDLInt, 64), loc({8}, kDLInt, 32), cache({3, 8448}, kDLUInt, 8);
  try {
    fn(&x.t, &w.t, &b.t, &f.t, &p.t, &loc.t, &cache.t, 1e-6);
    std::printf("accepted\n");
  } catch (const tvm::ffi::Error& e) {
    std::printf("%s: %s\n", e.kind().c_str(), e.message().c_str());
  }
  return 0;
}
'''


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import tvm_ffi

    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler for the C++ caller harness")
    tc = toolchain.detect()
    out = tmp_path_factory.mktemp("harness")
    (out / "harness.cc").write_text(HARNESS)
    lib_dir = str(Path(tvm_ffi.libinfo.find_libtvm_ffi()).parent)
    subprocess.run([cxx, "-std=c++17", "-O1", str(out / "harness.cc"), *(f"-I{d}" for d in tc.include_dirs),
                    f"-L{lib_dir}", "-ltvm_ffi", f"-Wl,-rpath,{lib_dir}", "-o", str(out / "harness")], check=True)
    return out / "harness"


def _call_from_cpp(harness: Path, op: Op, weight_offset: int) -> str:
    done = subprocess.run([str(harness), str(op.artifact.library), op.variant.name, str(weight_offset)],
                          capture_output=True, text=True, timeout=120, env={**os.environ})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_cpp_caller_with_null_strides_and_byte_offset(harness: Path, op: Op) -> None:
    # compact tensors with null strides pass every check; on the CPU the last one (the device) refuses
    assert _call_from_cpp(harness, op, 0) == "ValueError: dsv32_indexer_fp8_p64: x must be on a CUDA device, got " \
                                            "bfloat16 [8, 128] on cpu"
    # the address is data + byte_offset: 4 bytes past an aligned data pointer is refused as misaligned
    assert _call_from_cpp(harness, op, 4) == ("ValueError: dsv32_indexer_fp8_p64: weight must start at a 16-byte "
                                              "aligned address (a fresh tensor does), got an address 4 bytes past a "
                                              "16-byte boundary")
