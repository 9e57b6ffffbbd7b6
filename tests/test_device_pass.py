"""The device passes compile the kernels alone. nvcc parses a unit once per arch for the device and once for the
host; the host side (tvm-ffi's headers, the argument checks, the launches) is hidden from the device passes
(`#ifndef __CUDA_ARCH__`, templates/kernelgen/fused_norm_rope_store.cuh), which halves their front end's time, and
the generated unit instantiates every configuration's kernel there instead (fused_norm_rope_store.cu.j2). A kernel
the host launches that no device pass instantiated would fail only at launch, on a GPU ("invalid device
function"); these tests catch it with nvcc alone."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kernelgen import resources
from kernelgen.build import devicecode, toolchain
from kernelgen.build.lifecycle import build
from kernelgen.spec.parse import load_spec
from kernelgen.spec.variant import Launch
from kernelgen.tune.runner import tuning_plan

pytestmark = pytest.mark.build

ARCHS = ("sm_90a", "sm_100a")
# A stub's symbol is the kernel's with internal linkage: _ZN9kernelgenL18fused_group_kernel... for the device's
# _ZN9kernelgen18fused_group_kernel...
_STUB = re.compile(r"^_ZN9kernelgenL(\d+fused_(?:group|norm_rope_store)_kernel\w*)$")


def _host_kernels(library: Path) -> set[str]:
    out = subprocess.run(["nm", "--defined-only", str(library)], capture_output=True, text=True, check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    return {"_ZN9kernelgen" + m.group(1) for n in names if (m := _STUB.match(n))}


def _device_kernels(library: Path) -> dict[int, set[str]]:
    found: dict[int, set[str]] = {}
    for payload in devicecode.fatbin_payloads(library.read_bytes()):
        cubin = devicecode.read_cubin(payload)
        found.setdefault(cubin.sm, set()).update(k for k in devicecode.kernels(cubin) if "fused_" in k)
    return found


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm (binutils) to read the host stubs")
def test_every_kernel_the_host_launches_is_in_the_device_code_of_every_arch(tmp_path: Path) -> None:
    """A variant and a launch group, each built with several configurations (a tuning library: loop and block
    kernels, one and four warps per token): the host registers a launch stub for exactly the kernels each arch's
    device code holds, one per configuration."""
    spec = load_spec("attention_prep")
    variant, group = spec.variant("qwen3_8b_bf16_k"), spec.group("cake_64_8_fp8")
    launches = [Launch(4, 16, 8), Launch(8, 8, 8, loop=True), Launch(32, 2, 4, prefetch=True)]
    plans = [tuning_plan(variant, launches), tuning_plan(group, launches)]
    artifacts = build([variant, group], toolchain.detect(), ARCHS, cache_dir=tmp_path, launch_plans=plans)
    for a, plan in zip(artifacts, plans):
        host = _host_kernels(a.library)
        device = _device_kernels(a.library)
        assert len(host) == len(plan.configs) >= 3, (a.variant.name, sorted(host))
        assert {sm: names for sm, names in device.items() if names} == {90: host, 100: host}, a.variant.name


def test_the_device_pass_never_parses_the_host_side(tmp_path: Path) -> None:
    """nvcc's device-pass input (the preprocessed .cpp1.ii it keeps) holds the kernels and not a line of
    tvm-ffi; the host pass still sees the checks and the exported symbol (the library loads: test_build.py)."""
    from kernelgen.codegen.render import render_variant

    group = load_spec("attention_prep").group("cake_64_8_fp8")
    (tmp_path / "g.cu").write_text(render_variant(group))
    tc = toolchain.detect()
    subprocess.run([tc.nvcc, "--fatbin", "-std=c++17", "-O3", f"-I{resources.include_dir()}",
                    "-gencode", "arch=compute_90a,code=sm_90a", "--keep", "--keep-dir", str(tmp_path),
                    "g.cu", "-o", "g.fatbin"], cwd=tmp_path, check=True, capture_output=True)
    device_inputs = list(tmp_path.glob("*.cpp1.ii"))
    assert device_inputs
    for ii in device_inputs:
        text = ii.read_text(errors="replace")
        assert "fused_group_kernel" in text and "tvm::ffi" not in text and "TVMFFI" not in text, ii.name
