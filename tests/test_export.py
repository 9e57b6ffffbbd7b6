"""Build tier: ahead-of-time export and loading where there is no nvcc."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from kernelgen import knobs
from kernelgen.errors import KernelgenError, LayoutMismatch
from kernelgen.runtime.export import export, load_exported
from kernelgen.spec.parse import load_spec
from kernelgen.tune.gpu import GpuInfo

pytestmark = pytest.mark.build

H200 = GpuInfo("NVIDIA H200", "9.0", 132, 140, 4814)
RTX = GpuInfo("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0", 188, 95, 1792)
ARCHS = ("sm_90a", "sm_100a")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("export-cache")
    out = tmp_path_factory.mktemp("export") / "dsv32"
    with knobs.scope(CACHE_DIR=str(cache)):
        export(list(load_spec("dsv32_indexer").variants), ARCHS, out)
        again = out.parent / "again"
        export(list(load_spec("dsv32_indexer").variants), ARCHS, again)  # from the same built libraries
    return out


def test_manifest_describes_layouts_abi_archs_and_tuned_dispatch(exported: Path) -> None:
    manifest = json.loads((exported / "manifest.json").read_text())
    entry = manifest["variants"]["dsv32_indexer_fp8_p64"]
    assert manifest["archs"] == list(ARCHS) and set(entry["artifacts"]) == set(ARCHS)
    assert entry["layout"]["page_bytes"] == 8448 and entry["layout"]["byte_map"][0]["start"] == 0
    assert [a["name"] for a in entry["abi"]["args"]] == ["x", "weight", "bias", "freqs", "positions", "out_loc",
                                                          "kvcache", "eps"]
    assert entry["artifacts"]["sm_90a"]["tuned_on"] == "nvidia-h200-sm90-132sms"  # the shipped H200 record
    assert entry["artifacts"]["sm_100a"]["tuned_on"] == "defaults"
    assert "built_at" not in json.dumps(manifest) and "time" not in json.dumps(manifest).lower()


def test_the_same_libraries_give_the_same_manifest_bytes(exported: Path) -> None:
    assert (exported / "manifest.json").read_bytes() == (exported.parent / "again" / "manifest.json").read_bytes()


def test_exported_libraries_need_no_libcudart(exported: Path) -> None:
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) is not installed")
    for lib in exported.rglob("*.so"):
        needed = subprocess.run([readelf, "-d", str(lib)], capture_output=True, text=True, check=True).stdout
        assert "libcudart" not in needed, lib


def test_load_exported_works_without_nvcc_or_cuda_home(exported: Path) -> None:
    """In a fresh process whose CUDA_HOME points nowhere and whose PATH has no nvcc: it loads (for an
    H200), and a call with CPU tensors is refused by the exported symbol in kernelgen's words."""
    script = textwrap.dedent(f"""
        import torch
        from kernelgen import load_exported
        from kernelgen.errors import LayoutMismatch
        from kernelgen.tune.gpu import GpuInfo
        op = load_exported({str(exported)!r}, "dsv32_indexer_fp8_p64", gpu=GpuInfo("NVIDIA H200", "9.0", 132, 140, 0))
        assert op.tuned_from == "export:sm_90a", op.tuned_from
        try:
            op(torch.randn(4, 128).bfloat16(), torch.randn(128), torch.randn(16, 64), torch.zeros(4, dtype=torch.long),
               torch.arange(4), op.layout.allocate(2), bias=torch.randn(128))
        except LayoutMismatch as exc:
            print("refused:", exc)
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "KERNELGEN_CACHE_DIR")}
    env["CUDA_HOME"] = "/nonexistent-cuda"
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not (Path(p) / "nvcc").exists())
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused:" in done.stdout and "must be on a CUDA device" in done.stdout


def test_a_gpu_the_export_does_not_cover_is_named(exported: Path) -> None:
    with pytest.raises(KernelgenError, match=r"no library for NVIDIA RTX PRO 6000 .* \(compute capability 12.0\); "
                                             r"the export holds sm_100a, sm_90a: export again with --arch sm_120a"):
        load_exported(exported, "dsv32_indexer_fp8_p64", gpu=RTX)
    with pytest.raises(KernelgenError, match="no variant 'nope' in this export"):
        load_exported(exported, "nope", gpu=H200)


def test_a_modified_library_or_manifest_is_never_loaded(exported: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(exported, copy)
    lib = copy / "dsv32_indexer_bf16_p64" / "sm_90a" / "dsv32_indexer_bf16_p64.so"
    data = bytearray(lib.read_bytes())
    data[len(data) // 2] ^= 0x01
    lib.write_bytes(bytes(data))
    with pytest.raises(LayoutMismatch, match="missing or modified"):
        load_exported(copy, "dsv32_indexer_bf16_p64", gpu=H200)
    (copy / "manifest.json").write_text('{"format": "kernelgen-export/1", "variants": {}}')
    with pytest.raises(KernelgenError, match="export format 'kernelgen-export/1'.*export again"):
        load_exported(copy, "dsv32_indexer_bf16_p64", gpu=H200)
    (copy / "manifest.json").write_text('{"format": "kernelgen-export/1", "variants": ')
    with pytest.raises(KernelgenError, match="manifest.json is corrupt"):
        load_exported(copy, "dsv32_indexer_bf16_p64", gpu=H200)


def test_a_launch_group_exports_and_loads_without_nvcc(tmp_path: Path) -> None:
    """A launch group's library and manifest entry (members' math and layouts, the symbol's arguments by name, the
    checks in order); loaded in a fresh process without nvcc it is an Op whose symbol refuses CPU tensors."""
    out = tmp_path / "groups"
    with knobs.scope(CACHE_DIR=str(tmp_path / "cache")):
        export([load_spec("attention_prep").group("cake_8_1_fp8")], ("sm_90a",), out)
    entry = json.loads((out / "manifest.json").read_text())["variants"]["cake_8_1_fp8"]
    assert set(entry["group"]) == {"q", "k", "v"} and entry["group"]["q"]["layout"]["page_bytes"] == 8 * 132
    assert [a["name"] for a in entry["abi"]["args"]] == ["q", "k", "v", "q_weight", "k_weight", "freqs", "positions",
                                                          "out_loc", "q_out", "k_cache", "v_cache", "k_scale",
                                                          "v_scale", "eps"]
    art = entry["artifacts"]["sm_90a"]
    assert art["tuned_on"] == "nvidia-h200-sm90-132sms" and art["checks"][0].startswith("q must be bfloat16 [N, 1024]")
    script = textwrap.dedent(f"""
        import torch
        from kernelgen import load_exported
        from kernelgen.errors import LayoutMismatch
        from kernelgen.tune.gpu import GpuInfo
        op = load_exported({str(out)!r}, "cake_8_1_fp8", gpu=GpuInfo("NVIDIA H200", "9.0", 132, 140, 0))
        print(type(op).__name__, op.tuned_from, op.plan.describe())
        try:
            op(qkv=torch.zeros(4, 1280, dtype=torch.bfloat16), q_weight=torch.ones(128), k_weight=torch.ones(128),
               freqs=torch.zeros(16, 128), positions=torch.zeros(4, dtype=torch.long), out_loc=torch.arange(4),
               q_out=torch.zeros(4, 1056, dtype=torch.uint8), k_cache=op.layouts["k"].allocate(1),
               v_cache=op.layouts["v"].allocate(1), k_scale=torch.ones(1), v_scale=torch.ones(1))
        except LayoutMismatch as exc:
            print("refused:", exc)
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "KERNELGEN_CACHE_DIR")}
    env["CUDA_HOME"] = "/nonexistent-cuda"
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not (Path(p) / "nvcc").exists())
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("Op export:sm_90a N<=256: t16.b4.v8.pf.pdl")
    assert "refused: cake_8_1_fp8: q must be on a CUDA device, got bfloat16 [4, 1024] on cpu" in done.stdout


BLOCKER = '''
import sys
class _Blocked:
    """What the wheel's users lack: kernelgen itself and its build toolchain's Python packages."""
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("kernelgen", "jinja2", "yaml", "ninja", "rich"):
            raise ImportError(f"{name} is not installed here")
sys.meta_path.insert(0, _Blocked())
'''


def test_an_export_installs_as_a_wheel_and_loads_without_kernelgen_or_its_toolchain(exported: Path,
                                                                                    tmp_path: Path) -> None:
    """The wheel round trip (issue 38 item 6): build the wheel of an export, pip-install it into a folder, and in a
    fresh process that cannot import kernelgen, jinja2, yaml, ninja or rich, with no nvcc on PATH and CUDA_HOME
    pointing nowhere: list its ops, load a variant for an H200, and get the exported symbol's refusal of CPU tensors
    in kernelgen's words. The same export gives the same wheel bytes."""
    from kernelgen.runtime.wheel import build_wheel

    (tmp_path / "again").mkdir()
    first = build_wheel(exported, tmp_path, "my-kernels", "1.2.3")
    again = build_wheel(exported, tmp_path / "again", "my-kernels", "1.2.3")
    assert re.fullmatch(r"my_kernels-1\.2\.3-py3-none-manylinux_2_(1[7-9]|[2-9]\d)_x86_64\.whl", first.name), first.name
    with zipfile.ZipFile(first) as zf:
        metadata = zf.read("my_kernels-1.2.3.dist-info/METADATA").decode()
    assert re.search(r"^Requires-Dist: apache-tvm-ffi>=\d+\.\d+\.\d+,<\d+\.\d+$", metadata, re.M), metadata
    assert first.read_bytes() == again.read_bytes()
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site),
                    str(first)], check=True, timeout=300)
    (tmp_path / "block").mkdir()
    (tmp_path / "block" / "sitecustomize.py").write_text(BLOCKER)
    script = textwrap.dedent("""
        import torch
        import my_kernels
        print("names:", ",".join(my_kernels.names()))
        from my_kernels._kernelgen.tune.gpu import GpuInfo
        from my_kernels._kernelgen.errors import LayoutMismatch
        op = my_kernels.load("dsv32_indexer_fp8_p64", gpu=GpuInfo("NVIDIA H200", "9.0", 132, 140, 0))
        try:
            op(torch.randn(4, 128).bfloat16(), torch.randn(128), torch.randn(16, 64), torch.zeros(4, dtype=torch.long),
               torch.arange(4), op.layout.allocate(2), bias=torch.randn(128))
        except LayoutMismatch as exc:
            print("refused:", exc)
        try:
            import kernelgen
        except ImportError:
            print("no kernelgen")
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "KERNELGEN_CACHE_DIR", "PYTHONPATH")}
    env.update(CUDA_HOME="/nonexistent-cuda", PYTHONPATH=os.pathsep.join([str(tmp_path / "block"), str(site)]),
               PATH=os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not (Path(p) / "nvcc").exists()))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    names = json.loads((exported / "manifest.json").read_text())["variants"]
    assert f"names: {','.join(sorted(names))}" in done.stdout
    assert "refused:" in done.stdout and "must be on a CUDA device" in done.stdout, done.stdout
    assert "no kernelgen" in done.stdout


def _elf(machine: int, glibc: bytes = b"") -> bytes:
    """The first bytes of a little-endian ELF shared object for a machine, with some dynamic-string text."""
    return b"\x7fELF\x02\x01\x01" + bytes(11) + machine.to_bytes(2, "little") + bytes(40) + glibc


def test_a_wheel_is_tagged_by_its_libraries_machine_and_newest_glibc_symbol() -> None:
    from kernelgen.runtime.wheel import elf_platform

    assert elf_platform({"a.so": _elf(62)}) == "manylinux_2_17_x86_64"
    assert elf_platform({"a.so": _elf(62, b"GLIBC_2.2.5\0GLIBC_2.34\0"), "b.so": _elf(62, b"GLIBC_2.28")}) \
        == "manylinux_2_34_x86_64"
    assert elf_platform({"a.so": _elf(183, b"GLIBC_2.17")}) == "manylinux_2_17_aarch64"
    with pytest.raises(KernelgenError, match="must share one machine"):
        elf_platform({"a.so": _elf(62), "b.so": _elf(183)})
    with pytest.raises(KernelgenError, match="b.so: not an ELF shared library"):
        elf_platform({"b.so": b"#!/bin/sh\n" * 4})


def test_a_wheel_names_and_versions_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    from kernelgen.runtime.wheel import check_version, dist_name, requires

    for bad in ("torch", "tvm-ffi", "Kernelgen", "9lives"):
        with pytest.raises(KernelgenError, match=f"--wheel '{bad}'"):
            dist_name(bad)
    for good in ("1.2.0", "1.2.0rc1", "2!1.0.post3.dev4", "1.0+h200.sm90"):
        assert check_version(good) == good
    for bad in ("1.2-beta", "v1.0", "1.0 ", "latest"):
        with pytest.raises(KernelgenError, match="not a PEP 440 version"):
            check_version(bad)
    assert requires({"toolchain": {"tvm_ffi": "0.1.15.post2"}}) == ("apache-tvm-ffi>=0.1.15,<0.2", "torch")
    out = tmp_path / "never"
    done = subprocess.run([sys.executable, "-m", "kernelgen", "export", "specs/mla.yaml", "--arch", "sm_90a", "-o", str(out), "--wheel",
                           "torch"], capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[1])
    assert done.returncode != 0 and "--wheel 'torch'" in done.stderr and not out.exists(), done.stderr
    done = subprocess.run([sys.executable, "-m", "kernelgen", "export", "specs/mla.yaml", "--arch", "sm_90a", "-o", str(out), "--wheel",
                           "mine", "--wheel-version", "1.2-beta"], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parents[1])
    assert done.returncode != 0 and "not a PEP 440 version" in done.stderr and not out.exists(), done.stderr
