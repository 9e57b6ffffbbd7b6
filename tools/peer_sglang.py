"""Build SGLang's own DeepSeek-V4 KV cache writers from its wheel, and call them on torch tensors, so
that kernelgen's kernels can be run beside them on the same inputs.

    python tools/peer_sglang.py build --wheel sglang-0.5.23-...whl [--out .peers/sglang] [--arch sm_90a]
        [--page-sizes 64,1] [-j N]

`build` copies SGLang's JIT headers and the three kernel sources out of the wheel into OUT/src (nothing of
SGLang's is kept in this repository), writes one .cu per entry point into OUT/build that instantiates the
template exactly as SGLang's Python wrapper does (`load_jit` in sglang/kernels/jit/utils/compile: the same
five tvm-ffi includes, `TVM_FFI_DLL_EXPORT_TYPED_FUNC(export, (Kernel<args>::fn))` in namespace sglang, the
same nvcc flags), compiles them in parallel into OUT/lib/<entry>.so and loads each one back (loading needs
no GPU). Entry points, per page size P and layout L (v4 v41 v41_fp4 uniform_fp8 v41_new v41_fp4_new):

    mainkv_<L>_p<P>  forward           FusedKNormRopeFlashMLAKernel<bf16_t, 512, 64, P, L, true>
                                       (sglang.kernels.ops.attention.dsv4.norm_rope.fused_k_norm_rope_flashmla)
    store_<L>_p<P>   run [, run_rope]  FusedStoreCacheFlashMLAKernel<bf16_t, int32_t, P, L, true>
                                       (sglang.kernels.ops.attention.dsv4.attn.fused_store_cache, "flashmla")
    mla_<N>_<R>      set_mla_kv_buffer SetMlaKVBufferKernel<N, R, true>, (N, R) = (1024, 128) bf16 rows and
                                       (512, 64) fp8 rows (sglang.kernels.ops.kvcache.set_mla_kv_buffer)

The trailing `true` is SGLang's is_arch_support_pdl() on sm_90 and later. Then, on a GPU machine:

    peer = load(".peers/sglang/lib"); peer.mainkv_write("v41", kv, weight, freqs_cis, positions, loc, cache, 1e-6)
"""
from __future__ import annotations

import argparse
import concurrent.futures
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

JIT = "sglang/kernels/jit/"
SOURCES = ("csrc/deepseek_v4/main_norm_rope.cuh", "csrc/deepseek_v4/store.cuh",
           "csrc/elementwise/set_mla_kv_buffer.cuh")
LAYOUTS = ("v4", "v41", "v41_fp4", "uniform_fp8", "v41_new", "v41_fp4_new")
# kv_layout.cuh's KVLayoutTraits: (bytes per token, page alignment = the reader's TMA row stride).
TOKEN_BYTES = {"v4": (584, 576), "v41": (528, 512), "v41_fp4": (288, 256), "uniform_fp8": (512, 512),
               "v41_new": (528, 528), "v41_fp4_new": (288, 288)}
MLA_ROWS = ((1024, 128), (512, 64))
FFI_INCLUDES = ("tvm/ffi/container/tensor.h", "tvm/ffi/dtype.h", "tvm/ffi/error.h", "tvm/ffi/extra/c_env_api.h",
                "tvm/ffi/function.h")


def page_bytes(layout: str, page_size: int) -> int:
    """Bytes of one cache page (a row of the [num_pages, page_bytes] uint8 cache): page_size tokens
    rounded up to the layout's alignment. P=64: v4 37440, v41 33792, v41_fp4 18432, uniform_fp8 32768,
    v41_new 33792, v41_fp4_new 18432."""
    per_token, align = TOKEN_BYTES[layout]
    return -(-page_size * per_token // align) * align


def entries(page_sizes: list[int]) -> dict[str, tuple[str, str, dict[str, str]]]:
    """Entry name -> (source, C++ class, {export name: static method}), as SGLang's wrappers name them."""
    out = {}
    for p in page_sizes:
        for layout in LAYOUTS:
            cpp = layout.upper()  # SGLang's KVLayout.cpp_name: the bare enumerator, `using enum`-ed in
            mainkv = f"FusedKNormRopeFlashMLAKernel<bf16_t, 512, 64, {p}, {cpp}, true>"
            store = f"FusedStoreCacheFlashMLAKernel<bf16_t, int32_t, {p}, {cpp}, true>"
            store_exports = {"run": "run"} if layout == "v4" else {"run": "run", "run_rope": "run_rope"}
            out[f"mainkv_{layout}_p{p}"] = (SOURCES[0], mainkv, {"forward": "forward"})
            out[f"store_{layout}_p{p}"] = (SOURCES[1], store, store_exports)
    for nope, rope in MLA_ROWS:
        out[f"mla_{nope}_{rope}"] = (SOURCES[2], f"SetMlaKVBufferKernel<{nope}, {rope}, true>",
                                     {"set_mla_kv_buffer": "run"})
    return out


def translation_unit(source: str, cls: str, exports: dict[str, str]) -> str:
    exported = [f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({name}, ({cls}::{fn}));" for name, fn in exports.items()]
    lines = [f"#include <{h}>" for h in FFI_INCLUDES]
    return "\n".join([*lines, f'#include "{source}"', "namespace sglang {", *exported, "}  // namespace sglang", ""])


def extract(wheel: Path, src: Path) -> str:
    """Copy the JIT headers and SOURCES out of the wheel into src; return the wheel's SGLang version."""
    return peer_wheel.extract(wheel, src, JIT, lambda rel: rel.startswith("include/") or rel in SOURCES, "sglang",
                              SOURCES, "peer_sglang")


def toolchain(arch: str, src: Path) -> tuple[list[str], list[str]]:
    """(nvcc compile flags, link flags) as SGLang's toolchain.py / arch.py write them for arch."""
    import tvm_ffi.libinfo as info
    m = re.fullmatch(r"sm_(\d+)(\d)([af]?)", arch)
    if not m:
        sys.exit(f"peer_sglang: --arch {arch!r} is not like sm_90a")
    major, minor, suffix = m.groups()
    cuda = peer_wheel.cuda_home()
    includes = dict.fromkeys([info.find_include_path(), info.find_dlpack_include_path(), src / "include", src])
    compile_flags = [f"{cuda}/bin/nvcc", "-Xcompiler", "-fPIC",
                     f"-gencode=arch=compute_{major}{minor}{suffix},code=sm_{major}{minor}{suffix}",
                     f"-DSGL_CUDA_ARCH={int(major) * 100 + int(minor) * 10}", "-std=c++20", "-O3",
                     "--expt-relaxed-constexpr", *(f"-I{d}" for d in includes)]
    return compile_flags, peer_wheel.link_flags()


def build(args: argparse.Namespace) -> None:
    start = time.monotonic()
    out = Path(args.out).resolve()
    version = extract(Path(args.wheel), out / "src")
    wheel_sha = hashlib.sha256(Path(args.wheel).read_bytes()).hexdigest()
    compile_flags, link_flags = toolchain(args.arch, out / "src")
    (out / "build").mkdir(parents=True, exist_ok=True)
    (out / "lib").mkdir(parents=True, exist_ok=True)
    todo = entries([int(p) for p in args.page_sizes.split(",")])

    def one(name: str) -> tuple[str, float, str]:
        source, cls, exports = todo[name]
        tu, obj, so = out / "build" / f"{name}.cu", out / "build" / f"{name}.o", out / "lib" / f"{name}.so"
        text = translation_unit(source, cls, exports)
        stamp = hashlib.sha256("\n".join([wheel_sha, text, *compile_flags, *link_flags]).encode()).hexdigest()
        stamp_file = out / "build" / f"{name}.stamp"
        if so.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
            return name, 0.0, ""
        t0 = time.monotonic()
        tu.write_text(text)
        for cmd in ([*compile_flags, "-c", str(tu), "-o", str(obj)],
                    [os.environ.get("CXX", "c++"), str(obj), *link_flags, "-o", str(so)]):
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:
                return name, time.monotonic() - t0, f"{' '.join(cmd)}\n{done.stdout}{done.stderr}"
        stamp_file.write_text(stamp)
        return name, time.monotonic() - t0, ""

    failed = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for name, seconds, error in pool.map(one, todo):
            print(f"{'FAILED' if error else 'built ' if seconds else 'fresh '} {name} {seconds:.1f}s", flush=True)
            if error:
                failed.append(name)
                print(error, file=sys.stderr)
    if failed:
        sys.exit(f"peer_sglang: {len(failed)} of {len(todo)} entry points failed: {' '.join(failed)}")
    import tvm_ffi
    for name, (_, _, exports) in todo.items():
        module = tvm_ffi.load_module(str(out / "lib" / f"{name}.so"))
        assert all(module.implements_function(fn) for fn in exports), (name, exports)
    manifest = {"sglang": version, "wheel": Path(args.wheel).name, "wheel_sha256": wheel_sha, "arch": args.arch,
                "nvcc": compile_flags, "link": link_flags,
                "entries": {n: {"source": s, "class": c, "exports": e} for n, (s, c, e) in todo.items()}}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{len(todo)} entry points of SGLang {version} in {out / 'lib'}, each loads; "
          f"{time.monotonic() - start:.0f}s with -j {args.jobs}")


def _on_gpu(*tensors) -> None:
    """SGLang's matchers let host tensors through (tensor.h: `.with_device(device_)` resets the kDLCUDA option
    set before it), and its launch would then read host pointers: refuse them here."""
    if not all(t.is_cuda for t in tensors):
        raise ValueError("peer_sglang: every tensor must be a CUDA tensor")


class SGLangPeer:
    """SGLang's writers, loaded from a `build` lib folder. Every tensor is a CUDA tensor on one device; the
    kernels run on torch's current stream (tvm-ffi reads it from the torch arguments). SGLang's host code
    checks shapes, dtypes and strides and raises on a mismatch; it does not bounds-check positions or slots."""

    def __init__(self, lib_dir: str | os.PathLike):
        self.lib_dir = Path(lib_dir)
        self._modules = {}

    def module(self, name: str):
        if name not in self._modules:
            import tvm_ffi
            path = self.lib_dir / f"{name}.so"
            if not path.exists():
                raise FileNotFoundError(f"{path}: not built (python tools/peer_sglang.py build --page-sizes ...)")
            self._modules[name] = tvm_ffi.load_module(str(path))
        return self._modules[name]

    @staticmethod
    def freqs_table(freqs_cis):
        """SGLang's table: complex64 [max_pos, 32] (DeepSeek-V4's `freqs_cis` buffer, torch.polar of
        position * inv_freq) -> float32 [max_pos, 64] with (cos_j, sin_j) at columns (2j, 2j+1), which is
        what the kernels read; a float32 [max_pos, 64] table is taken as it is."""
        import torch
        table = torch.view_as_real(freqs_cis).flatten(-2) if freqs_cis.is_complex() else freqs_cis
        return table.contiguous()

    @staticmethod
    def new_cache(layout: str, num_pages: int, page_size: int = 64, device="cuda"):
        """A zeroed [num_pages, page_bytes(layout, page_size)] uint8 cache, as SGLang's DSV4 pool makes it."""
        import torch
        return torch.zeros(num_pages, page_bytes(layout, page_size), dtype=torch.uint8, device=device)

    def mainkv_write(self, layout: str, kv, weight, freqs_cis, positions, out_loc, cache, eps: float,
                     page_size: int = 64) -> None:
        """fused_k_norm_rope_flashmla: RMSNorm (with weight) + RoPE of the last 64 dims of each kv row,
        quantized and written at its slot of the paged cache in `layout`.

        kv         [T, 512] bf16, unit stride in dim 1 (a row stride above 512 is fine: SGLang passes a slice)
        weight     [512] bf16 (the kv_norm weight; the kernel reads it as bf16 and widens to fp32)
        freqs_cis  complex64 [max_pos, 32] or float32 [max_pos, 64], see freqs_table
        positions  [T] int32 or int64: token t's row of the table (its position in its sequence)
        out_loc    [T] int32 (an int64 tensor is cast here: SGLang's kernel takes int32 only): the cache
                   slot, page = loc // page_size, slot in page = loc % page_size; a negative slot is skipped
        cache      uint8 [num_pages, page_bytes(layout, page_size)], row stride page_bytes (new_cache)
        page_size  a power of two this folder was built for (64, and 1, by default)
        T >= 2048 on the V4.1 layouts launches the warp-per-token kernel instead (bitwise the same)."""
        import torch
        _on_gpu(kv, weight, freqs_cis, positions, out_loc, cache)
        loc = out_loc if out_loc.dtype == torch.int32 else out_loc.to(torch.int32)
        self.module(f"mainkv_{layout}_p{page_size}").forward(kv, weight, self.freqs_table(freqs_cis), positions,
                                                             loc, cache, float(eps))

    def store(self, layout: str, x, out_loc, cache, page_size: int = 64, freqs=None) -> None:
        """fused_store_cache(type="flashmla"): quantize already normed (and, without freqs, rotated) rows.

        x          [T, 512] bf16, contiguous
        out_loc    [T] int32 (int64 is cast here); unlike mainkv_write, the v4 store does not skip a negative slot
        cache      as in mainkv_write
        freqs      v4.1 layouts only: per-token float32 [T, 64] (cos, sin) pairs (or complex64 [T, 32]),
                   i.e. freqs_table(table)[positions]; x's last 64 dims are then rotated in the kernel"""
        import torch
        _on_gpu(x, out_loc, cache, *([] if freqs is None else [freqs]))
        loc = out_loc if out_loc.dtype == torch.int32 else out_loc.to(torch.int32)
        module = self.module(f"store_{layout}_p{page_size}")
        if freqs is None:
            module.run(x, cache, loc)
        else:
            module.run_rope(x, cache, loc, self.freqs_table(freqs))

    def mla_write(self, kv_buffer, loc, k_nope, k_rope, reserved_skip_index: int = 0) -> None:
        """set_mla_kv_buffer: kv_buffer[loc[t], :] = cat(k_nope[t], k_rope[t]), a plain byte copy.

        kv_buffer  [num_slots, >= nope + rope] (SGLang's pool is [size + page_size, 576]); one row per token,
                   indexed by loc directly (no pages); same dtype as k_nope / k_rope
        loc        [T] int32 or int64
        k_nope     [T, 512], k_rope [T, 64]: bf16 (the 1024 + 128 byte build) or 1-byte fp8 (512 + 64);
                   unit stride in dim 1, any row stride
        reserved_skip_index  rows whose loc equals it are not written: SGLang's default 0 (slot 0 is its
                   CUDA-graph padding slot); pass -1 to write every row. The kernel picks its warps per block
                   from the SM count (SGLang's num_warps argument is ignored by the C++)."""
        _on_gpu(kv_buffer, loc, k_nope, k_rope)
        nope = k_nope.shape[-1] * k_nope.element_size()
        rope = k_rope.shape[-1] * k_rope.element_size()
        self.module(f"mla_{nope}_{rope}").set_mla_kv_buffer(kv_buffer, loc, k_nope, k_rope, 0,
                                                            int(reserved_skip_index))


def load(lib_dir: str | os.PathLike = ".peers/sglang/lib") -> SGLangPeer:
    return SGLangPeer(lib_dir)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="extract, instantiate, compile and load-check SGLang's writers")
    b.add_argument("--wheel", required=True, help="an sglang wheel (sglang-0.5.23-*.whl)")
    b.add_argument("--out", default=".peers/sglang")
    b.add_argument("--arch", default="sm_90a")
    b.add_argument("--page-sizes", default="64,1", help="comma-separated powers of two")
    b.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    build(args)


if __name__ == "__main__":
    main()
