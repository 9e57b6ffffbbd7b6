"""Build FlashInfer's own NVFP4 K/V append (its `page` JIT module) from its wheel, and call it on torch tensors, so
that kernelgen's NVFP4 groups can run beside it on the same inputs.

    python tools/peer_flashinfer.py build --wheel flashinfer_python-0.7.2-py3-none-any.whl [--out .peers/flashinfer]
        [--arch sm_90a]

`build` copies the two sources of FlashInfer's `page` module (flashinfer/jit/page.py gen_page_module:
csrc/page.cu and csrc/flashinfer_page_binding.cu), csrc/tvm_ffi_utils.h and the headers they include (nvcc -M)
out of the wheel into OUT/src (nothing of FlashInfer's is kept in this repository), compiles them with the
flags FlashInfer's JIT puts on an nvcc line for the arch (jit/core.py: -use_fast_math among them, which makes
its divisions and reciprocals approximate) into OUT/lib/page.so, and loads it back (loading needs no GPU).
Then, on a GPU machine:

    peer = load(".peers/flashinfer/lib")
    peer.nvfp4_append(k, v, slot_mapping, k_data, v_data, k_sf, v_sf, k_scale, v_scale, layout="NHD")

with flashinfer.page.nvfp4_quantize_append_paged_kv_cache_with_slot_mapping's tensors (its tuple form)."""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_wheel  # noqa: E402

DATA = "flashinfer/data/"
SOURCES = ("csrc/page.cu", "csrc/flashinfer_page_binding.cu")
# jit/core.py gen_jit_spec and cpp_ext.py build_cuda_cflags for an sm_90a module, less what changes only the file
# (--threads, fatbin compression) or the host ABI of code not called here
FLAGS = ("-std=c++17", "-O3", "-DNDEBUG", "-use_fast_math", "--expt-relaxed-constexpr",
         "-static-global-template-stub=false", "-Xcompiler", "-fPIC", "-DFLASHINFER_ENABLE_F16",
         "-DFLASHINFER_ENABLE_BF16", "-DFLASHINFER_ENABLE_FP8_E4M3", "-DFLASHINFER_ENABLE_FP8_E5M2",
         "-DFLASHINFER_ENABLE_FP8_E8M0", "-DFLASHINFER_ENABLE_FP4_E2M1")
LAYOUTS = {"NHD": 0, "HND": 1}  # flashinfer.utils.TensorLayout


def extract(wheel: Path, src: Path) -> str:
    """Copy csrc/'s page sources and tvm_ffi_utils.h and the header trees out of the wheel into src; return the
    wheel's FlashInfer version."""
    def keep(rel: str) -> bool:
        return (rel in SOURCES or rel == "csrc/tvm_ffi_utils.h" or rel.startswith("include/")
                or rel.startswith("cccl/libcudacxx/include/"))

    return peer_wheel.extract(wheel, src, DATA, keep, "flashinfer_python", SOURCES, "peer_flashinfer")


def toolchain(arch: str, src: Path) -> tuple[list[str], list[str]]:
    """(nvcc compile flags, link flags) for arch, FlashInfer's flags with its include order (csrc, include, the
    vendored CCCL before CUDA's, tvm-ffi's headers)."""
    import tvm_ffi.libinfo as info
    m = re.fullmatch(r"sm_(\d+)([af]?)", arch)
    if not m:
        sys.exit(f"peer_flashinfer: --arch {arch!r} is not like sm_90a")
    cuda = peer_wheel.cuda_home()
    includes = [src / "csrc", src / "include", src / "cccl/libcudacxx/include", info.find_include_path(),
                info.find_dlpack_include_path()]
    compile_flags = [f"{cuda}/bin/nvcc", *FLAGS, f"-gencode=arch=compute_{m[1]}{m[2]},code=sm_{m[1]}{m[2]}",
                     *(f"-I{d}" for d in includes)]
    return compile_flags, peer_wheel.link_flags()


def build(args: argparse.Namespace) -> None:
    start = time.monotonic()
    out = Path(args.out).resolve()
    version = extract(Path(args.wheel), out / "src")
    compile_flags, link_flags = toolchain(args.arch, out / "src")
    (out / "build").mkdir(parents=True, exist_ok=True)
    (out / "lib").mkdir(parents=True, exist_ok=True)
    objects = [out / "build" / f"{Path(s).stem}.o" for s in SOURCES]
    procs = [subprocess.Popen([*compile_flags, "-c", str(out / "src" / s), "-o", str(o)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for s, o in zip(SOURCES, objects)]
    for s, p in zip(SOURCES, procs):
        text, _ = p.communicate()
        if p.returncode:
            sys.exit(f"peer_flashinfer: compiling {s} failed:\n{text[-3000:]}")
    so = out / "lib" / "page.so"
    done = subprocess.run([os.environ.get("CXX", "c++"), *map(str, objects), *link_flags, "-o", str(so)],
                          capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"peer_flashinfer: linking failed:\n{done.stderr[-3000:]}")
    import tvm_ffi
    module = tvm_ffi.load_module(str(so))
    assert module.implements_function("nvfp4_quantize_append_paged_kv_cache_with_slot_mapping")
    manifest = {"flashinfer": version, "wheel": Path(args.wheel).name,
                "wheel_sha256": hashlib.sha256(Path(args.wheel).read_bytes()).hexdigest(), "arch": args.arch,
                "nvcc": compile_flags, "link": link_flags, "sources": list(SOURCES)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"FlashInfer {version}'s page module in {so}, loads; {time.monotonic() - start:.0f}s")


class FlashInferPeer:
    """FlashInfer's page module, loaded from a `build` lib folder; every tensor a CUDA tensor of one device, run on
    torch's current stream (tvm-ffi reads it from the arguments)."""

    def __init__(self, lib_dir: str | os.PathLike):
        import tvm_ffi
        path = Path(lib_dir) / "page.so"
        if not path.exists():
            raise FileNotFoundError(f"{path}: not built (python tools/peer_flashinfer.py build --wheel ...)")
        self.module = tvm_ffi.load_module(str(path))

    def nvfp4_append(self, k, v, slot_mapping, k_data, v_data, k_sf, v_sf, k_scale, v_scale,
                     layout: str = "NHD") -> None:
        """nvfp4_quantize_append_paged_kv_cache_with_slot_mapping with the tuple caches (page.py lines 919-1027):

        k, v          [T, kv_heads, head_dim] bf16 or fp16, last dim contiguous
        slot_mapping  [T] int32 or int64: page * page_size + entry; a negative slot is skipped
        k_data/v_data uint8 [pages, page_size, kv_heads, head_dim / 2] (NHD) or [pages, kv_heads, page_size, ...]
                      (HND), last dim contiguous (strided views are fine)
        k_sf/v_sf     float8_e4m3fn, the same with head_dim / 16
        k_scale/v_scale float32 [1] device tensors: the dequantization scales"""
        if not all(t.is_cuda for t in (k, v, slot_mapping, k_data, v_data, k_sf, v_sf, k_scale, v_scale)):
            raise ValueError("peer_flashinfer: every tensor must be a CUDA tensor")
        self.module.nvfp4_quantize_append_paged_kv_cache_with_slot_mapping(
            k, v, slot_mapping, k_data, v_data, k_sf, v_sf, k_scale, v_scale, LAYOUTS[layout])


def load(lib_dir: str | os.PathLike = ".peers/flashinfer/lib") -> FlashInferPeer:
    return FlashInferPeer(lib_dir)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="extract, compile and load-check FlashInfer's page module")
    b.add_argument("--wheel", required=True, help="a flashinfer-python wheel (flashinfer_python-0.7.2-*.whl)")
    b.add_argument("--out", default=".peers/flashinfer")
    b.add_argument("--arch", default="sm_90a")
    build(parser.parse_args(argv))


if __name__ == "__main__":
    main()
